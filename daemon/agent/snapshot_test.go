package agent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/state"
)

// TestSnapshotFromRunningLoop: snapshots come from the loop while it runs
// (run with -race): the served records, their desired routes, the peers
// with the time their values last changed (kept while they do not
// change), the datastore's health, the last resync and the time of a
// route repair; a stopped loop does not answer.
func TestSnapshotFromRunningLoop(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.store.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.11", Blocks: []string{"10.244.2.0/24"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "ready", func() bool { ok, _ := f.st.Ready(); return ok })

	snap := func() *snapshotView {
		t.Helper()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		d, err := f.a.Snapshot(sctx)
		if err != nil {
			t.Fatal(err)
		}
		v := &snapshotView{workloads: len(d.Workloads), resync: d.LastResync, repairs: len(d.Repairs), dsOK: d.Datastore.OK, dsValid: d.Datastore.Valid}
		v.routes = len(d.WorkloadRoutes[0]["cali1"])
		for _, p := range d.Peers {
			if p.Name == "node-b" {
				v.peerChange = p.LastChange
			}
		}
		return v
	}
	first := snap()
	if first.workloads != 1 || first.routes != 1 || first.resync.IsZero() || !first.dsOK || first.dsValid != 1 || first.peerChange.IsZero() {
		t.Fatalf("snapshot = %+v", first)
	}
	// An unrelated peer appears: node-b's last change stays.
	f.store.PutNode(&state.Node{Name: "node-c", HostIPv4: "192.0.2.12", Blocks: []string{"10.244.3.0/24"}})
	waitFor(t, "node-c seen", func() bool { return snap().dsValid == 2 })
	if got := snap().peerChange; !got.Equal(first.peerChange) {
		t.Errorf("node-b's last change moved from %v to %v though its record did not change", first.peerChange, got)
	}
	// node-b's host IP changes: its last change moves.
	time.Sleep(time.Millisecond) // the clock must move for the times to differ
	f.store.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.21", Blocks: []string{"10.244.2.0/24"}})
	waitFor(t, "node-b's change seen", func() bool { return snap().peerChange.After(first.peerChange) })

	// A desired route deleted behind the loop's back is a timed repair.
	f.a.NotifyRoute(RouteEvent{Iface: "cali1", Dst: netip.MustParsePrefix("10.244.1.2/32"), Deleted: true, Protocol: 80})
	waitFor(t, "repair recorded", func() bool { return snap().repairs == 1 })

	cancel()
	<-done
	done <- nil
	sctx, c := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer c()
	if _, err := f.a.Snapshot(sctx); err == nil {
		t.Error("a stopped loop answered a snapshot")
	}
}

// snapshotView is what TestSnapshotFromRunningLoop compares.
type snapshotView struct {
	workloads, routes, repairs, dsValid int
	dsOK                                bool
	resync, peerChange                  time.Time
}
