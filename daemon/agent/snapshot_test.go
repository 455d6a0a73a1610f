package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/pkg/peers"
)

// healthDS is a datastore that tells of its health, as the etcd
// datastore does.
type healthDS struct{ h *datastore.Health }

func (healthDS) LocalBlocks(context.Context, func(string)) ([]netip.Prefix, error) { return nil, nil }
func (healthDS) Publish(peers.Record) error                                        { return nil }
func (healthDS) Watch(context.Context, func()) error                               { return nil }
func (healthDS) Peers() ([]peers.Record, []error, error)                           { return nil, nil, nil }
func (d healthDS) Health() datastore.Health                                        { return *d.h }

// TestDatastoreHealth: a snapshot's datastore health is what the
// datastore tells (datastore.Health), read at snapshot time.
func TestDatastoreHealth(t *testing.T) {
	f := newFixture(t)
	down := false
	h := &datastore.Health{Reachable: &down, Liveness: true, Live: []string{"b"}}
	f.a.peers.src = datastore.Peers{DS: healthDS{h}, V: peers.New(peers.Options{Self: peers.Self{Name: "node-a"}})}
	s := f.a.snapshot()
	if got := s.DatastoreHealth; !got.Liveness || !slices.Equal(got.Live, []string{"b"}) || got.Reachable == nil || *got.Reachable || got.RequestErrors != nil {
		t.Fatalf("health before any request: %+v", got)
	}
	up := true
	h.Reachable, h.RequestErrors = &up, map[string]int{"watch": 2}
	if got := f.a.snapshot().DatastoreHealth; got.Reachable == nil || !*got.Reachable || got.RequestErrors["watch"] != 2 {
		t.Errorf("health after a reached request and two failed watches: %+v", got)
	}
}

// TestQuery: a running loop answers a query with its snapshot, built on
// the loop goroutine; a loop that is not running leaves the query to its
// context.
func TestQuery(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := Query(ctx, f.a, func(*Snapshot) int { return 1 }); err == nil {
		t.Fatal("a loop that is not running answered")
	}
	f.run(t)
	n, err := Query(context.Background(), f.a, func(s *Snapshot) int { return len(s.Workloads) + len(s.WorkloadRoutes[0]["cali1"]) })
	if err != nil || n != 2 {
		t.Fatalf("query: %d, %v; want the record and its route", n, err)
	}
}
