package agent

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/debugapi"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/peers"
)

// Snapshotter adds its part of the desired state (overlay, allowlist,
// refusals) to a snapshot. It runs on the loop goroutine.
type Snapshotter interface {
	Snapshot(d *inspect.Desired)
}

// snapState is what the loop keeps only for snapshots: when peers last
// changed, the datastore's health, when each error appeared, the repairs.
// Loop-owned except req (the request channel) and repairs (safe for
// concurrent use).
type snapState struct {
	req        chan chan *inspect.Desired
	repairs    *inspect.RepairLog
	extra      []Snapshotter
	lastResync time.Time
	ds         debugapi.DatastoreHealth
	peers      []inspect.Peer
	dsMetrics  *prometheus.Registry            // the datastore's own metrics (nil: none)
	dsChecked  bool                            // dsMetrics was looked for
	errs       map[string]debugapi.ObjectError // by object
}

// newSnapState returns an empty snapState.
func newSnapState() *snapState {
	return &snapState{req: make(chan chan *inspect.Desired), repairs: inspect.NewRepairLog(), errs: map[string]debugapi.ObjectError{}}
}

// SetRepairLog makes the loop record its drift repairs in l, which other
// components (the overlay's and the allowlist's OnRepair) share (call
// before Run).
func (a *Agent) SetRepairLog(l *inspect.RepairLog) { a.snap.repairs = l }

// AddSnapshotter adds s to every snapshot (call before Run). Managers that
// implement Snapshotter are asked without it.
func (a *Agent) AddSnapshotter(s Snapshotter) { a.snap.extra = append(a.snap.extra, s) }

// Snapshot asks the loop for its desired state; the loop answers between
// two passes. It returns ctx's error when the loop does not answer in
// time (not running yet, or busy).
func (a *Agent) Snapshot(ctx context.Context) (*inspect.Desired, error) {
	reply := make(chan *inspect.Desired, 1)
	select {
	case a.snap.req <- reply:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case d := <-reply:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// snapshot builds the desired state on the loop goroutine. Everything in
// it is a copy or immutable (records are replaced, never changed).
func (a *Agent) snapshot() *inspect.Desired {
	var blocks []string
	for _, b := range a.opts.LocalBlocks {
		blocks = append(blocks, b.String())
	}
	d := &inspect.Desired{
		Loop: true, IfacePrefix: a.opts.IfacePrefix, LastResync: a.snap.lastResync.UTC(), Repairs: a.snap.repairs.List(),
		Node: debugapi.Node{
			Name: a.opts.NodeName, Version: a.opts.Version, HostIPv4: a.opts.Self.HostIPv4, HostIPv6: a.opts.Self.HostIPv6,
			VTEPMAC: a.opts.Self.VTEPMAC, VTEPMACv6: a.opts.Self.VTEPMACv6, TunnelIPv4: a.opts.Self.TunnelIPv4, TunnelIPv6: a.opts.Self.TunnelIPv6,
			PodMTU: a.opts.PodMTU, RouteProtocol: a.opts.RouteProtocol, LocalBlocks: blocks,
		},
		Datastore: a.snap.ds,
		Workloads: maps.Clone(a.workloads),
		Peers:     slices.Clone(a.snap.peers),
	}
	dr := DesiredRoutes(RouteInput{
		Workloads: a.workloads, Links: a.links, LocalBlocks: a.opts.LocalBlocks, NodeSpace: a.opts.NodeSpace,
		IfacePrefix: a.opts.IfacePrefix, StaticARP: a.opts.StaticARP,
	})
	d.WorkloadRoutes, d.Refused = dr.Routes, dr.Refused
	d.Datastore.Unreadable = slices.Clone(d.Datastore.Unreadable)
	a.snap.datastoreHealth(a.ds, &d.Datastore)
	for _, e := range a.snap.errs {
		d.Errors = append(d.Errors, e)
	}
	slices.SortFunc(d.Errors, func(x, y debugapi.ObjectError) int {
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		return strings.Compare(x.Object, y.Object)
	})
	for _, m := range a.managers {
		if s, ok := m.(Snapshotter); ok {
			s.Snapshot(d)
		}
	}
	for _, s := range a.snap.extra {
		s.Snapshot(d)
	}
	return d
}

// serveSnapshot answers one snapshot request.
func (a *Agent) serveSnapshot(reply chan *inspect.Desired) { reply <- a.snapshot() }

// notePeers records a read of the peers: the datastore's health and when
// each peer's validated values last changed. full: a full read, whose
// unreadable records replace the last ones. It reports whether the peers
// differ from the last read's (false after a failed read).
func (a *Agent) notePeers(valid []peers.NodeInfo, n int, bad []error, err error, full bool) (changed bool) {
	s := a.snap
	now := a.now().UTC()
	if err != nil {
		s.ds.OK, s.ds.Error = false, err.Error()
		return false
	}
	s.ds.OK, s.ds.Error, s.ds.LastRead, s.ds.Records, s.ds.Valid = true, "", now, n, len(valid)
	if full {
		s.ds.Unreadable = nil
		for _, e := range bad {
			s.ds.Unreadable = append(s.ds.Unreadable, e.Error())
		}
	}
	if sameNames(valid, s.peers) {
		// The common change (one peer's values among the same peers):
		// updated in place, nothing allocated. Snapshots hold a clone.
		for i, p := range valid {
			if !samePeer(s.peers[i].NodeInfo, p) {
				s.peers[i].LastChange = now
				changed = true
			}
			s.peers[i].NodeInfo = p
		}
		return changed
	}
	// Both lists are sorted by name (the datastore's order), so one walk
	// pairs each peer with its last state.
	old := s.peers
	next := make([]inspect.Peer, 0, len(valid))
	for _, p := range valid {
		for len(old) > 0 && old[0].Name < p.Name {
			old = old[1:]
		}
		since := now
		if len(old) > 0 && samePeer(old[0].NodeInfo, p) {
			since = old[0].LastChange
		}
		next = append(next, inspect.Peer{NodeInfo: p, LastChange: since})
	}
	s.peers = next
	return true
}

// sameNames reports whether valid and known name the same peers in the
// same order.
func sameNames(valid []peers.NodeInfo, known []inspect.Peer) bool {
	if len(valid) != len(known) {
		return false
	}
	for i := range valid {
		if valid[i].Name != known[i].Name {
			return false
		}
	}
	return true
}

// samePeer reports whether two validated peers carry the same values.
func samePeer(x, y peers.NodeInfo) bool {
	ep := func(a, b peers.Endpoint) bool {
		return a.HostIP == b.HostIP && a.TunnelAddr == b.TunnelAddr && bytes.Equal(a.VTEPMAC, b.VTEPMAC)
	}
	return x.Name == y.Name && ep(x.IPv4, y.IPv4) && ep(x.IPv6, y.IPv6) && slices.Equal(x.Blocks, y.Blocks)
}

// noteErrors records, after a pass, the current error of each object and
// since when it has held (the first pass that saw it).
func (a *Agent) noteErrors() {
	s := a.snap
	now := a.now().UTC()
	cur := map[string]string{}
	if a.lastErr != "" {
		cur["apply"] = a.lastErr
	}
	if s.ds.Error != "" {
		cur["datastore"] = s.ds.Error
	}
	for key, why := range a.badFiles {
		cur["workload/"+key] = why
	}
	for key, why := range a.refused {
		cur["workload/"+key] = "refused: " + why
	}
	if a.blocked != "" {
		cur["readiness"] = a.blocked
	}
	for obj := range s.errs {
		if _, ok := cur[obj]; !ok {
			delete(s.errs, obj)
		}
	}
	for obj, msg := range cur {
		if e, ok := s.errs[obj]; !ok || e.Error != msg {
			s.errs[obj] = debugapi.ObjectError{Object: obj, Error: msg, Since: now}
		}
	}
}

// datastoreHealth adds to h what the datastore itself tells of its
// health: liveness (a Live method, the etcd datastore's) and, from its
// own metrics, whether its last request reached it and how many failed.
func (s *snapState) datastoreHealth(src PeerSource, h *debugapi.DatastoreHealth) {
	p, ok := src.(datastore.Peers)
	if !ok {
		return
	}
	if l, ok := p.DS.(interface{ Live() []string }); ok {
		h.Liveness, h.Live = true, l.Live()
	}
	if c, ok := p.DS.(datastore.ClaimReporter); ok {
		for _, bc := range c.BlockConflicts() {
			h.BlockConflicts = append(h.BlockConflicts, debugapi.BlockConflict{Block: bc.Block.String(), Key: bc.Key, Holder: bc.Holder, Since: bc.Since.UTC()})
		}
	}
	if !s.dsChecked {
		s.dsChecked = true
		s.dsMetrics = datastoreRegistry(p.DS)
	}
	if s.dsMetrics == nil {
		return
	}
	mfs, err := s.dsMetrics.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "routelet_datastore_up":
			for _, m := range mf.GetMetric() {
				up := m.GetGauge().GetValue() == 1
				h.Reachable = &up
			}
		case "routelet_datastore_errors_total", "routelet_kubernetes_api_errors_total":
			for _, m := range mf.GetMetric() {
				op := "request"
				for _, l := range m.GetLabel() {
					if l.GetName() == "op" {
						op = l.GetValue()
					}
				}
				if h.RequestErrors == nil {
					h.RequestErrors = map[string]int{}
				}
				h.RequestErrors[op] += int(m.GetCounter().GetValue())
			}
		}
	}
}

// datastoreRegistry registers ds's metrics (a prometheus.Collector) in a
// registry of their own, which snapshots read; nil when ds has none.
func datastoreRegistry(ds datastore.Datastore) *prometheus.Registry {
	c, ok := ds.(prometheus.Collector)
	if !ok {
		return nil
	}
	reg := prometheus.NewRegistry()
	if reg.Register(c) != nil {
		return nil
	}
	return reg
}
