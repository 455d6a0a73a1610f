package main

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/birdtest"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
)

// birdProto is the kernel protocol of BIRD's own routes.
const birdProto = 12

// birdSpeaker stands in for routeletd on the BGP node: a BIRD there with
// a session to the router, exporting what it learns into the node's main
// table. It is started once; Start and Stop leave it running.
type birdSpeaker struct{ b *birdtest.Bird }

func (s birdSpeaker) Start(context.Context) error { return nil }
func (s birdSpeaker) Stop() error                 { return nil }
func (s birdSpeaker) Mem() (int64, int64, error)  { return readMem(s.b.PID()) }
func (s birdSpeaker) Log() string                 { return s.b.Log() }

// TestBGPPathRounds runs the BGP path's rounds with BIRD in the node in
// place of routeletd: the router's configuration is accepted and announces
// nothing until the static protocol is enabled, then every prefix, with
// the router as next hop; the route watch sees all of them arrive, and
// the reset withdraws them for the next round.
func TestBGPPathRounds(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces")
	birdtest.SkipUnlessInstalled(t)
	const n = 300
	prefixes, err := birdtest.Subnets(pool, blockBits, n)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.New(cluster.Options{Prefix: netnstest.OwnedPrefix("routelet-bgpbenchtest-"), WorkDir: t.TempDir(),
		Nodes: []cluster.NodeSpec{specBGP}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	rb, err := c.StartRouterBird(ctx, routerConfig(prefixes))
	if err != nil {
		t.Fatal(err)
	}
	node := c.Nodes[0]
	nb, err := c.StartBird(ctx, node.CNI.NS, birdtest.Config{RouterID: netip.MustParsePrefix(specBGP.Host4).Addr(),
		Neighbors: []birdtest.Neighbor{{Name: "uplink", Address: routerIP, ASN: routerAS, LocalASN: nodeAS, GracefulRestart: true}}})
	if err != nil {
		t.Fatal(err)
	}
	o := options{n: n, rounds: 2, timeout: 30 * time.Second}
	p, err := newBGPPath(node, birdProto, birdSpeaker{nb}, rb, o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.watch.Close()
	for r := range o.rounds {
		s, err := p.round(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", r+1, err)
		}
		if s.elapsed <= 0 || s.rss <= 0 || s.hwm < s.rss {
			t.Errorf("round %d: %+v: want a time, and VmHWM ≥ VmRSS > 0", r+1, s)
		}
		t.Logf("round %d: %s", r+1, s)
		// The reset withdrew them: the node's BIRD removes its routes.
		if _, err := p.watch.WaitCount(ctx, 0, 10*time.Second); err != nil {
			t.Fatalf("after round %d: %v", r+1, err)
		}
	}
	// What the router announced was the prefixes, via itself.
	enableAndCheck(t, ctx, p, nb, prefixes)
}

// enableAndCheck enables the announcements once more and checks the
// routes the node's BIRD learned: every prefix, next hop the router.
func enableAndCheck(t *testing.T, ctx context.Context, p *bgpPath, nb *birdtest.Bird, prefixes []netip.Prefix) {
	t.Helper()
	if err := p.bird.Enable(ctx, staticProto); err != nil {
		t.Fatal(err)
	}
	if _, err := p.watch.WaitCount(ctx, len(prefixes), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	rs, err := nb.ProtocolRoutes(ctx, "uplink")
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix]bool{}
	for _, pf := range prefixes {
		want[pf] = true
	}
	for _, r := range rs {
		if !want[r.Prefix] || r.NextHop != routerIP {
			t.Errorf("learned %s: want one of the prefixes via %s", r, routerIP)
		}
		delete(want, r.Prefix)
	}
	if len(want) > 0 {
		t.Errorf("%d prefixes not learned", len(want))
	}
}
