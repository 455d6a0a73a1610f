package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/peers"
)

// snapshotTimeout bounds how long a request waits for the loop (busy in a
// long pass, or not running yet); then only readiness is served.
const snapshotTimeout = 5 * time.Second

// stateEndpoint is what the state socket serves: readiness from the start,
// the loop's snapshot compared with the kernel once the loop runs.
type stateEndpoint struct {
	cfg     *config.Config
	status  *health.Status
	repairs *inspect.RepairLog
	loop    atomic.Pointer[loop]
	log     *slog.Logger
}

// loop is a running apply loop and the parts of its snapshots that are
// not the loop's own (the managers', the peer validator's refusals),
// asked on the loop goroutine in this order.
type loop struct {
	agent *agent.Agent
	parts []inspect.Snapshotter
}

// startStateEndpoint binds <stateDir>/routeletd.sock and serves it until
// ctx is done; the returned function waits for the server to stop. A
// socket that cannot be bound is logged: the daemon runs without it.
func startStateEndpoint(ctx context.Context, ep *stateEndpoint) func() {
	l, err := statusapi.Listen(ep.cfg.StateDir)
	if err != nil {
		ep.log.Error("state endpoint disabled", "err", err)
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := statusapi.Serve(ctx, l, ep.state, ep.log); err != nil {
			ep.log.Error("state endpoint stopped", "err", err)
		}
	}()
	return func() { <-done }
}

// state builds the State for one request.
func (ep *stateEndpoint) state(ctx context.Context) (*statusapi.State, error) {
	var d *inspect.Desired
	var snapErr error
	if l := ep.loop.Load(); l != nil {
		sctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		d, snapErr = agent.Query(sctx, l.agent, func(s *agent.Snapshot) *inspect.Desired {
			d := desiredOf(s, ep.repairs)
			for _, p := range l.parts {
				p.Snapshot(d)
			}
			return d
		})
		cancel()
	}
	if d == nil {
		d = &inspect.Desired{Repairs: ep.repairs.List()}
	}
	if snapErr != nil {
		d.Errors = append(d.Errors, statusapi.ObjectError{Object: "endpoint",
			Error: fmt.Sprintf("the apply loop did not answer within %s: %v", snapshotTimeout, snapErr), Since: time.Now().UTC()})
	}
	ready, reason := ep.status.Ready()
	d.Readiness = statusapi.Readiness{Ready: ready, Reason: reason, Updated: time.Now().UTC()}
	inspect.FillNode(&d.Node, ep.cfg)
	if d.Loop {
		blocks := make([]netip.Prefix, 0, len(d.Node.LocalBlocks))
		for _, b := range d.Node.LocalBlocks {
			if p, err := netip.ParsePrefix(b); err == nil {
				blocks = append(blocks, p)
			}
		}
		d.Blocks, _ = inspect.BlockUse(filepath.Join(ep.cfg.StateDir, "ipam"), blocks)
	}
	return compareKernel(d, statusapi.SourceDaemon)
}

// desiredOf turns the loop's snapshot into the desired state the
// inspection compares with the kernel; repairs are the drift repairs
// noted so far.
func desiredOf(s *agent.Snapshot, repairs *inspect.RepairLog) *inspect.Desired {
	blocks := []string(nil)
	for _, b := range s.LocalBlocks {
		blocks = append(blocks, b.String())
	}
	d := &inspect.Desired{
		Loop: true, IfacePrefix: s.IfacePrefix, LastResync: s.LastResync, Repairs: repairs.List(),
		Node: statusapi.Node{
			Name: s.NodeName, Version: s.Version, HostIPv4: s.Self.HostIPv4, HostIPv6: s.Self.HostIPv6,
			VTEPMAC: s.Self.VTEPMAC, VTEPMACv6: s.Self.VTEPMACv6, TunnelIPv4: s.Self.TunnelIPv4, TunnelIPv6: s.Self.TunnelIPv6,
			PodMTU: s.PodMTU, RouteProtocol: s.RouteProtocol, LocalBlocks: blocks,
		},
		Datastore: datastoreHealth(s.Datastore, s.DatastoreHealth),
		Workloads: s.Workloads, WorkloadRoutes: s.WorkloadRoutes, Refused: s.Refused,
	}
	for _, p := range s.Peers {
		d.Peers = append(d.Peers, inspect.Peer{NodeInfo: p.NodeInfo, LastChange: p.LastChange})
	}
	for _, e := range s.Errors {
		d.Errors = append(d.Errors, statusapi.ObjectError{Object: e.Object, Error: e.Error, Since: e.Since})
	}
	return d
}

// datastoreHealth is the state document's datastore health: the loop's
// last read of the peers and what the datastore tells of itself.
func datastoreHealth(r agent.DatastoreRead, h datastore.Health) statusapi.DatastoreHealth {
	out := statusapi.DatastoreHealth{
		OK: r.OK, Error: r.Error, LastRead: r.LastRead, Records: r.Records, Valid: r.Valid, Unreadable: r.Unreadable,
		Reachable: h.Reachable, RequestErrors: h.RequestErrors, Liveness: h.Liveness, Live: h.Live,
	}
	for _, bc := range h.BlockConflicts {
		out.BlockConflicts = append(out.BlockConflicts, statusapi.BlockConflict{Block: bc.Block.String(), Key: bc.Key, Holder: bc.Holder, Since: bc.Since.UTC()})
	}
	return out
}

// compareKernel reads the kernel (when d comes from a running loop or
// the records) and compares; the State says where d came from.
func compareKernel(d *inspect.Desired, source string) (*statusapi.State, error) {
	k := &inspect.Kernel{}
	if d.Loop || d.Workloads != nil || d.Peers != nil {
		nl, err := inspect.NewNetlink()
		if err != nil {
			return nil, err
		}
		defer nl.Close()
		if k, err = inspect.Read(nl, d); err != nil {
			return nil, err
		}
	}
	st := inspect.Compare(d, k, time.Now())
	st.Source = source
	return st, nil
}

// refusals adds the peer validator's refusals to snapshots: each one in
// the datastore's health and on its peer (inspect.Snapshotter).
type refusals struct{ v *peers.Validator }

// Snapshot implements inspect.Snapshotter.
func (r refusals) Snapshot(d *inspect.Desired) {
	byNode := map[string][]string{}
	for _, rf := range r.v.Refused() {
		d.Datastore.Refused = append(d.Datastore.Refused, rf.Error())
		d.Datastore.Refusals = append(d.Datastore.Refusals, statusapi.Refusal{Node: rf.Node, Field: rf.Field, Value: rf.Value, Reason: rf.Reason})
		byNode[rf.Node] = append(byNode[rf.Node], rf.Field+" "+rf.Value+" refused: "+rf.Reason)
	}
	for i := range d.Peers {
		for _, why := range byNode[d.Peers[i].Name] {
			if d.Peers[i].Problem != "" {
				d.Peers[i].Problem += "; "
			}
			d.Peers[i].Problem += why
		}
	}
}
