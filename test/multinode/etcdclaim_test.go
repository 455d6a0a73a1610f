package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/diagnose"
	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// TestEtcdClaimConflict: another writer rewrites the claim of the block
// node a's pod uses to node b (`etcdctl put …/blocks/<block> b`). Node a
// keeps the block and its pod's route (pods still talk across), does not
// overwrite the value, logs the conflict once naming the block, the key
// and the value, exports it in routelet_datastore_block_claim_conflicts,
// and status and diagnose show it; peer b still routes the block to a.
// Restarted, a serves the same block (claiming no new one), the pod keeps
// its route and the conflict is still reported; b restarted does not take
// the block (a's record publishes it) and still routes it to a. The key
// deleted, a claims the block again and the conflict is gone.
func TestEtcdClaimConflict(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	etcdtest.Binary(t)
	tc, srv, etcdArgs := etcdCluster(t, specs[:2], false)
	a, b := tc.node("a"), tc.node("b")
	if out, err := routeletd(a, append(append([]string{"etcd", "init"}, etcdPools...), etcdArgs...)...); err != nil {
		t.Fatalf("etcd init: %v\n%s", err, out)
	}
	flags := append([]string{"--encapsulation=vxlan"}, etcdArgs...)
	daemonArgs := append(append(slices.Clone(baseArgs), "--health-addr=127.0.0.1:9099"), flags...)
	tc.c.SetDaemonArgs(daemonArgs)
	ctx := context.Background()
	if err := tc.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	block, bBlock := waitV4Blocks(t, a, 1)[0], waitV4Blocks(t, b, 1)[0]
	for _, n := range []*node{a, b} {
		if _, err := tc.c.AddPod(ctx, n.Node, n.Spec.Name+"-pod0"); err != nil {
			t.Fatal(err)
		}
	}
	pod := a.Pods[0]
	if !block.Contains(pod.IPv4) {
		t.Fatalf("a-pod0 got %s, outside a's block %s", pod.IPv4, block)
	}
	talks := func(what string) {
		t.Helper()
		netnstest.WaitFor(t, 30*time.Second, what+": a-pod0 and b-pod0 reach each other", func() error {
			if out, err := pod.Ping(t.Context(), b.Pods[0].IPv4); err != nil {
				return fmt.Errorf("a-pod0 → b-pod0: no reply\n%s", out)
			}
			if out, err := b.Pods[0].Ping(t.Context(), pod.IPv4); err != nil {
				return fmt.Errorf("b-pod0 → a-pod0: no reply\n%s", out)
			}
			return nil
		})
	}
	bRoutesA := func(what string) {
		t.Helper()
		want := vxlanRoute(block, block)
		netnstest.WaitFor(t, 30*time.Second, what+": b routes a's block to a", func() error {
			got, err := b.overlayRoutes(unix.AF_INET)
			if err != nil {
				return err
			}
			if !slices.Equal(got, []string{want}) {
				return fmt.Errorf("routes %v, want [%s]", got, want)
			}
			return nil
		})
	}
	talks("before")

	key := "/routelet/blocks/" + block.Addr().String() + "-" + fmt.Sprint(block.Bits())
	cli := srv.Client(t)
	defer cli.Close()
	claim := func() string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := cli.Get(cctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	if got := claim(); got != "a" {
		t.Fatalf("claim %s = %q, want a", key, got)
	}
	if _, err := cli.Put(ctx, key, "b"); err != nil {
		t.Fatal(err)
	}
	gauge := fmt.Sprintf(`routelet_datastore_block_claim_conflicts{block="%s"}`, block)
	reported := func(what string) {
		t.Helper()
		netnstest.WaitFor(t, 30*time.Second, what+": a exports the conflict", func() error {
			if v := metricOf(a, gauge); v != "1" {
				return fmt.Errorf("%s = %q, want 1", gauge, v)
			}
			return nil
		})
		wantStatus(t, a, flags, "1 BLOCK CLAIM CONFLICTS",
			fmt.Sprintf("block %s: claim conflict: the datastore key %q holds %q, not this node", block, key, "b"))
		r := diagnoseMode(t, a, flags, podRef(a, a, pod, 4), podRef(a, b, b.Pods[0], 4))
		st, ok := r.step(diagnose.StepBlockClaims, 0)
		if !ok || st.Status != diagnose.Fail || !strings.Contains(st.Fact, fmt.Sprintf("block %s: key %q holds %q", block, key, "b")) {
			t.Errorf("%s: diagnose a-pod0 → b-pod0: block-claims step %+v (found %v), want a failure naming %s, %s and b:\n%s", what, st, ok, block, key, r.out)
		}
	}
	reported("claim rewritten")
	logged := func() int {
		n := 0
		for _, l := range strings.Split(a.LogTail(100000), "\n") {
			if strings.Contains(l, "block claim conflict") && strings.Contains(l, "block="+block.String()) &&
				strings.Contains(l, "key="+key) && strings.Contains(l, "value=b") {
				n++
			}
		}
		return n
	}
	if n := logged(); n != 1 {
		t.Errorf("the conflict was logged %d times, want once", n)
	}
	talks("claim rewritten")
	bRoutesA("claim rewritten")
	if got := claim(); got != "b" {
		t.Errorf("claim %s = %q: a overwrote another node's value", key, got)
	}

	// A restart keeps the block the pod uses.
	if err := tc.c.Restart(ctx, a.Node, daemonArgs...); err != nil {
		t.Fatal(err)
	}
	if got := waitV4Blocks(t, a, 1); !slices.Equal(got, []netip.Prefix{block}) {
		t.Errorf("after a restart a serves %v, want %s (the block its pod uses)", got, block)
	}
	if c := claimsOf(t, srv); len(c["a"]) != 1 || len(c["b"]) != 3 {
		t.Errorf("claims after the restart %v: want a's IPv6 block only under a (no new IPv4 block), the rewritten one under b", c)
	}
	reported("after a restart")
	if n := logged(); n != 2 {
		t.Errorf("the conflict was logged %d times over two runs, want once per run", n)
	}
	talks("after a restart")
	bRoutesA("after a restart")
	if got := claim(); got != "b" {
		t.Errorf("after a restart claim %s = %q: a overwrote another node's value", key, got)
	}

	// b, restarted, does not take the block the rewritten claim names it
	// for: a's record publishes it and no pod of b uses it.
	if err := tc.c.Restart(ctx, b.Node, daemonArgs...); err != nil {
		t.Fatal(err)
	}
	if got := waitV4Blocks(t, b, 1); !slices.Equal(got, []netip.Prefix{bBlock}) {
		t.Errorf("after b restarted it serves %v, want only its own %s", got, bBlock)
	}
	if !strings.Contains(b.LogTail(100000), "not taking it") {
		t.Errorf("b did not log that it does not take a's block")
	}
	bRoutesA("after b restarted")
	talks("after b restarted")

	// The key deleted: a claims the block again.
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 30*time.Second, "a claims its block again", func() error {
		if got := claim(); got != "a" {
			return fmt.Errorf("claim %q", got)
		}
		if v := metricOf(a, gauge); v != "0" {
			return fmt.Errorf("%s = %q, want 0", gauge, v)
		}
		if v := metricOf(a, `routelet_datastore_block_claims_total{reason="reclaimed"}`); v != "1" {
			return fmt.Errorf("reclaimed claims %q, want 1", v)
		}
		return nil
	})
	wantStatus(t, a, flags, "No problems")
	talks("claim restored")
}
