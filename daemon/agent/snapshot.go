package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// Snapshot is the loop's desired state at one instant, as plain values:
// what the state endpoint turns into its documents (daemon/inspect,
// daemon/statusapi). Everything in it is a copy or immutable (records are
// replaced, never changed).
type Snapshot struct {
	NodeName      string
	Version       string
	Self          peers.Record // this node's record as published
	PodMTU        int
	RouteProtocol int
	LocalBlocks   []netip.Prefix
	IfacePrefix   string
	LastResync    time.Time // the last full sync's end (UTC)
	// Datastore is the last read of the peers; DatastoreHealth what the
	// datastore tells of itself (datastore.Health), read now.
	Datastore       DatastoreRead
	DatastoreHealth datastore.Health
	// Workloads are the served records by key; WorkloadRoutes their
	// routes and the blackholes per family (0: IPv4, 1: IPv6) and
	// interface; Refused says why a key gets no route.
	Workloads      map[string]*state.Workload
	WorkloadRoutes [2]map[string][]routes.Target
	Refused        map[string]string
	Peers          []PeerState // sorted by name
	// Errors are the current error of each object and since when it has
	// held, oldest first.
	Errors []ObjectError
}

// DatastoreRead is the loop's last read of the peers.
type DatastoreRead struct {
	OK         bool
	Error      string // why the peers cannot be listed
	LastRead   time.Time
	Records    int      // peer records read
	Valid      int      // of them, validated peers
	Unreadable []string // the unreadable records of the last full read, one line each
}

// PeerState is a validated peer and when its values last changed.
type PeerState struct {
	peers.NodeInfo
	LastChange time.Time
}

// ObjectError is one object's current error ("apply", "datastore",
// "readiness", "workload/<key>") and since when it has held.
type ObjectError struct {
	Object string
	Error  string
	Since  time.Time
}

// snapState is what the loop keeps only for snapshots: when the last full
// sync ended and since when each error has held. Loop-owned except req
// (the request channel).
type snapState struct {
	req        chan func(*Snapshot)
	lastResync time.Time
	errs       map[string]ObjectError // by object
}

// newSnapState returns an empty snapState.
func newSnapState() *snapState {
	return &snapState{req: make(chan func(*Snapshot)), errs: map[string]ObjectError{}}
}

// Query asks the loop for a snapshot and returns what build makes of it.
// build runs on the loop goroutine, between two passes, so it may also
// ask the managers for their parts (the state endpoint's
// inspect.Snapshotter). Query returns ctx's error when the loop does not
// answer in time (not running yet, or busy).
func Query[T any](ctx context.Context, a *Agent, build func(*Snapshot) T) (T, error) {
	var zero T
	reply := make(chan T, 1)
	select {
	case a.snap.req <- func(s *Snapshot) { reply <- build(s) }:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case v := <-reply:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// snapshot builds the snapshot on the loop goroutine.
func (a *Agent) snapshot() *Snapshot {
	s := &Snapshot{
		NodeName: a.opts.NodeName, Version: a.opts.Version, Self: a.opts.Self, PodMTU: a.opts.PodMTU,
		RouteProtocol: a.opts.RouteProtocol, LocalBlocks: slices.Clone(a.opts.LocalBlocks), IfacePrefix: a.opts.IfacePrefix,
		LastResync:      a.snap.lastResync.UTC(),
		Datastore:       a.peers.last,
		DatastoreHealth: a.peers.src.Health(),
		Peers:           slices.Clone(a.peers.known),
	}
	s.Datastore.Unreadable = slices.Clone(s.Datastore.Unreadable)
	a.wl.snapshot(s)
	for _, e := range a.snap.errs {
		s.Errors = append(s.Errors, e)
	}
	slices.SortFunc(s.Errors, func(x, y ObjectError) int {
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		return strings.Compare(x.Object, y.Object)
	})
	return s
}

// noteErrors records, after a pass, the current error of each object and
// since when it has held (the first pass that saw it).
func (a *Agent) noteErrors() {
	s := a.snap
	now := a.now().UTC()
	cur := map[string]string{}
	if a.ready.lastErr != "" {
		cur["apply"] = a.ready.lastErr
	}
	if a.peers.last.Error != "" {
		cur["datastore"] = a.peers.last.Error
	}
	a.wl.noteErrors(cur)
	if a.ready.blocked != "" {
		cur["readiness"] = a.ready.blocked
	}
	for obj := range s.errs {
		if _, ok := cur[obj]; !ok {
			delete(s.errs, obj)
		}
	}
	for obj, msg := range cur {
		if e, ok := s.errs[obj]; !ok || e.Error != msg {
			s.errs[obj] = ObjectError{Object: obj, Error: msg, Since: now}
		}
	}
}
