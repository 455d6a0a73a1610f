package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// tiny is a pool of /30 blocks: two pod addresses each.
var tiny = Pool{CIDR: netip.MustParsePrefix("10.244.0.0/24"), BlockSize: 30}

// grow runs Grow with a deadline.
func grow(t *testing.T, d *Datastore, family int, full ...netip.Prefix) (netip.Prefix, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return d.Grow(ctx, family, full)
}

// TestGrow: a node whose block is full claims the next free block of the
// pool, keyed like the first; asking again claims nothing more; a restart
// gets both, the first block first even when the new one has the lower
// address; leave releases both.
func TestGrow(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	x := open(t, srv, "node-x")
	initPools(t, x, tiny, pool6)
	blocksOf(t, x) // node-x holds 10.244.0.0/30
	a := open(t, srv, "node-a")
	first := blocksOf(t, a)
	if want := prefixes("10.244.0.4/30", "fd00:10:244::40/122"); !slices.Equal(first, want) {
		t.Fatalf("node-a blocks %v, want %v", first, want)
	}
	got, err := grow(t, a, 4, first[0])
	if err != nil || got != netip.MustParsePrefix("10.244.0.8/30") {
		t.Fatalf("Grow: %v, %v; want 10.244.0.8/30", got, err)
	}
	if again, err := grow(t, a, 4, first[0]); err != nil || again != got {
		t.Errorf("Grow again with the same full block: %v, %v; want the block claimed before, %s", again, err, got)
	}
	if n := testutil.ToFloat64(a.m.claims.WithLabelValues("full")); n != 1 {
		t.Errorf("routelet_datastore_block_claims_total{reason=full} = %v, want 1", n)
	}
	// node-x leaves: 10.244.0.0/30 is free, the lowest; a claims it when
	// both its IPv4 blocks are full.
	if _, err := x.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	third, err := grow(t, a, 4, first[0], got)
	if err != nil || third != netip.MustParsePrefix("10.244.0.0/30") {
		t.Fatalf("Grow with two full blocks: %v, %v; want the freed 10.244.0.0/30", third, err)
	}
	a.Close()
	restarted := open(t, srv, "node-a")
	want := prefixes("10.244.0.4/30", "10.244.0.8/30", "10.244.0.0/30", "fd00:10:244::40/122")
	if b := blocksOf(t, restarted); !slices.Equal(b, want) {
		t.Errorf("after a restart node-a holds %v, want %v (in claim order)", b, want)
	}
	// An IPv6 block grows the same way (node-x released fd00:10:244::/122).
	if b, err := grow(t, restarted, 6, want[3]); err != nil || b != netip.MustParsePrefix("fd00:10:244::/122") {
		t.Errorf("Grow IPv6: %v, %v; want fd00:10:244::/122", b, err)
	}
	released, err := restarted.Leave(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(released) != 5 {
		t.Errorf("leave released %v, want all 5 blocks", released)
	}
	if c := claimsIn(t, srv); len(c) != 0 {
		t.Errorf("claims after leave: %v, want none", c)
	}
}

// TestGrowRefused: a full pool is datastore.ErrPoolFull (and claiming
// works once a block is free); --pod-cidr blocks do not grow; a block no
// longer this node's is an error naming it.
func TestGrowRefused(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	small := Pool{CIDR: netip.MustParsePrefix("10.244.0.0/29"), BlockSize: 30}
	a := open(t, srv, "node-a")
	initPools(t, a, small)
	mine := blocksOf(t, a)
	b := open(t, srv, "node-b")
	blocksOf(t, b)
	if _, err := grow(t, a, 4, mine...); !errors.Is(err, datastore.ErrPoolFull) {
		t.Errorf("Grow on a full pool: %v, want ErrPoolFull", err)
	}
	if _, err := b.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, err := grow(t, a, 4, mine...); err != nil || got != netip.MustParsePrefix("10.244.0.4/30") {
		t.Errorf("Grow once node-b left: %v, %v; want 10.244.0.4/30", got, err)
	}
	fixed := open(t, srv, "node-c", func(o *Options) { o.PodCIDRs = prefixes("10.9.0.0/30") })
	if _, err := grow(t, fixed, 4, prefixes("10.9.0.0/30")...); !errors.Is(err, datastore.ErrFixedBlocks) {
		t.Errorf("Grow with --pod-cidr: %v, want ErrFixedBlocks", err)
	}
	if _, err := grow(t, a, 4, netip.MustParsePrefix("10.244.0.0/30"), netip.MustParsePrefix("10.244.1.0/30")); err == nil {
		t.Error("Grow naming a block the node does not hold: no error")
	}
}

// TestGrowRace: 16 nodes, each with its block full, claim another at
// once: no two get the same block, and each holds two.
func TestGrowRace(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	initPools(t, open(t, srv, "admin"), tiny)
	const n = 16
	ds := make([]*Datastore, n)
	firsts := make([][]netip.Prefix, n)
	for i := range ds {
		ds[i] = open(t, srv, fmt.Sprintf("node-%02d", i))
		firsts[i] = blocksOf(t, ds[i])
	}
	atOnce(t, ds, func(ctx context.Context, i int, d *Datastore) ([]netip.Prefix, error) {
		b, err := d.Grow(ctx, 4, firsts[i])
		return []netip.Prefix{b}, err
	}, slices.Concat(firsts...)...)
	c := claimsIn(t, srv)
	if len(c) != 2*n {
		t.Errorf("%d claims in etcd, want %d: %v", len(c), 2*n, c)
	}
	held := map[string]int{}
	for _, node := range c {
		held[node]++
	}
	for _, d := range ds {
		if held[d.o.NodeName] != 2 {
			t.Errorf("%s holds %d blocks, want 2", d.o.NodeName, held[d.o.NodeName])
		}
	}
}

// TestLeaseKeptAcrossWatches: a second Watch (the daemon rebuilding its
// loop) keeps the liveness key on the same lease; Close revokes it.
func TestLeaseKeptAcrossWatches(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := open(t, srv, "node-a")
	cli := srv.Client(t)
	defer cli.Close()
	lease := func() int64 {
		resp, err := cli.Get(context.Background(), "/routelet/liveness/node-a")
		if err != nil || len(resp.Kvs) == 0 {
			return 0
		}
		return resp.Kvs[0].Lease
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	if err := a.Watch(ctx1, func() {}); err != nil {
		t.Fatal(err)
	}
	var first int64
	netnstest.Eventually(t, 30*time.Second, "liveness key written", func() bool { first = lease(); return first != 0 })
	cancel1()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if err := a.Watch(ctx2, func() {}); err != nil {
		t.Fatal(err)
	}
	// Several probe periods: a revoked or replaced lease would show.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if l := lease(); l != first {
			t.Fatalf("liveness key's lease %d after the second Watch, want %d kept", l, first)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.Close()
	if l := lease(); l != 0 {
		t.Errorf("liveness key still on lease %d after Close", l)
	}
}
