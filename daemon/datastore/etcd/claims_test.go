package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// syncBuffer is a log sink safe for the datastore's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// count is how many lines of the log contain all of parts.
func (s *syncBuffer) count(parts ...string) int {
	n := 0
	for _, l := range strings.Split(s.String(), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			n++
		}
	}
	return n
}

// podsUse makes the datastore's node use addrs (its pods' addresses).
func podsUse(addrs ...string) func(*Options) {
	return func(o *Options) {
		o.InUse = func() ([]netip.Addr, error) {
			var out []netip.Addr
			for _, a := range addrs {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		}
	}
}

// logTo sends the datastore's log to buf.
func logTo(buf *syncBuffer) func(*Options) {
	return func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(buf, nil)) }
}

// claimOf reads one block's claim straight from srv ("" when absent).
func claimOf(t *testing.T, cli *clientv3.Client, block string) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), "/routelet/blocks/"+block)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// conflictsOf is d's conflicts as "block key holder" lines.
func conflictsOf(d *Datastore) []string {
	var out []string
	for _, c := range d.BlockConflicts() {
		out = append(out, fmt.Sprintf("%s %s %s", c.Block, c.Key, c.Holder))
	}
	return out
}

// probed waits until d's keeper ran at least one whole pass after now:
// its own record, deleted twice, was written again twice (the second
// write comes after the first pass's claim check).
func probed(t *testing.T, cli *clientv3.Client, node string) {
	t.Helper()
	for range 2 {
		if _, err := cli.Delete(context.Background(), "/routelet/nodes/"+node); err != nil {
			t.Fatal(err)
		}
		netnstest.Eventually(t, 30*time.Second, node+"'s record written again", func() bool {
			resp, err := cli.Get(context.Background(), "/routelet/nodes/"+node)
			return err == nil && len(resp.Kvs) == 1
		})
	}
}

// TestClaimRewrittenKept: another writer rewrites the claim of a block
// node-a serves (its pods use it) to node-b. While running, node-a logs
// the conflict once (block, key, value), exports it and reports it
// (BlockConflicts), keeps the block and never overwrites node-b's value.
// Restarted, it serves the same block (not a new one) and still reports
// the conflict. Once the key is deleted, node-a claims the block again
// and the conflict is gone.
func TestClaimRewrittenKept(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	defer cli.Close()
	var log1 syncBuffer
	a := open(t, srv, "node-a", podsUse("10.244.0.5"), logTo(&log1))
	initPools(t, a, pool4)
	blocks := blocksOf(t, a)
	if !slices.Equal(blocks, prefixes("10.244.0.0/26")) {
		t.Fatalf("node-a blocks %v", blocks)
	}
	if err := a.Publish(record("node-a", "10.244.0.0/26", "192.168.1.1")); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	watchedCtx(t, ctx, a)
	const key = "/routelet/blocks/10.244.0.0-26"
	want := []string{"10.244.0.0/26 " + key + " node-b"}
	if _, err := cli.Put(context.Background(), key, "node-b"); err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 30*time.Second, "node-a reports the conflict", func() error {
		if got := conflictsOf(a); !slices.Equal(got, want) {
			return fmt.Errorf("conflicts %v, want %v", got, want)
		}
		return nil
	})
	if v := testutil.ToFloat64(a.m.conflicts.WithLabelValues("10.244.0.0/26")); v != 1 {
		t.Errorf("routelet_datastore_block_claim_conflicts{block=10.244.0.0/26} = %v, want 1", v)
	}
	probed(t, cli, "node-a")
	if got := claimOf(t, cli, "10.244.0.0-26"); got != "node-b" {
		t.Errorf("claim %s = %q: node-a overwrote another node's value", key, got)
	}
	logged := func(buf *syncBuffer) int {
		return buf.count("block claim conflict", "block=10.244.0.0/26", "key="+key, "value=node-b")
	}
	if n := logged(&log1); n != 1 {
		t.Errorf("the conflict was logged %d times, want once:\n%s", n, log1.String())
	}

	// A restart keeps the block its pods use and reports the conflict.
	stop()
	a.Close()
	var log2 syncBuffer
	a2 := open(t, srv, "node-a", podsUse("10.244.0.5"), logTo(&log2))
	if got := blocksOf(t, a2); !slices.Equal(got, blocks) {
		t.Errorf("after a restart node-a serves %v, want %v (the block its pods use)", got, blocks)
	}
	if c := claimsIn(t, srv); len(c) != 1 {
		t.Errorf("claims %v: node-a claimed a new block in place of the one its pods use", c)
	}
	if got := conflictsOf(a2); !slices.Equal(got, want) {
		t.Errorf("after a restart conflicts %v, want %v", got, want)
	}
	if err := a2.Publish(record("node-a", "10.244.0.0/26", "192.168.1.1")); err != nil {
		t.Fatal(err)
	}
	watched(t, a2)
	if n := logged(&log2); n != 1 {
		t.Errorf("after a restart the conflict was logged %d times, want once:\n%s", n, log2.String())
	}

	// The key deleted: claimed again, only then.
	if _, err := cli.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 30*time.Second, "node-a claims its block again", func() error {
		if got := claimOf(t, cli, "10.244.0.0-26"); got != "node-a" {
			return fmt.Errorf("claim %q", got)
		}
		if got := conflictsOf(a2); len(got) != 0 {
			return fmt.Errorf("conflicts %v", got)
		}
		return nil
	})
	if v := testutil.ToFloat64(a2.m.conflicts.WithLabelValues("10.244.0.0/26")); v != 0 {
		t.Errorf("conflict gauge %v after the claim came back, want 0", v)
	}
	if v := testutil.ToFloat64(a2.m.claims.WithLabelValues("reclaimed")); v != 1 {
		t.Errorf("routelet_datastore_block_claims_total{reason=reclaimed} = %v, want 1", v)
	}
}

// TestClaimOverlappedKept: a claim of another node overlapping a served
// block (a /25 around node-a's /26), and a value that is no node name,
// are conflicts too; the block stays node-a's.
func TestClaimOverlappedKept(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	defer cli.Close()
	a := open(t, srv, "node-a", podsUse("10.244.0.5"))
	initPools(t, a, pool4)
	blocksOf(t, a)
	watched(t, a)
	if _, err := cli.Put(context.Background(), "/routelet/blocks/10.244.0.0-25", "node-b"); err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 30*time.Second, "overlap reported", func() error {
		want := []string{"10.244.0.0/26 /routelet/blocks/10.244.0.0-25 node-b"}
		if got := conflictsOf(a); !slices.Equal(got, want) {
			return fmt.Errorf("conflicts %v, want %v", got, want)
		}
		return nil
	})
	if _, err := cli.Delete(context.Background(), "/routelet/blocks/10.244.0.0-25"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), "/routelet/blocks/10.244.0.0-26", "\x1b[2J"); err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 30*time.Second, "garbage value reported", func() error {
		want := []string{"10.244.0.0/26 /routelet/blocks/10.244.0.0-26 \x1b[2J"}
		if got := conflictsOf(a); !slices.Equal(got, want) {
			return fmt.Errorf("conflicts %q, want %q", got, want)
		}
		return nil
	})
	// A restart with the garbage value: the block is kept, and no pool
	// claim loops on it.
	again := open(t, srv, "node-a", podsUse("10.244.0.5"))
	if got := blocksOf(t, again); !slices.Equal(got, prefixes("10.244.0.0/26")) {
		t.Errorf("after a restart node-a serves %v", got)
	}
	b := open(t, srv, "node-b")
	if got := blocksOf(t, b); !slices.Equal(got, prefixes("10.244.0.64/26")) {
		t.Errorf("node-b claimed %v, want the next block", got)
	}
}

// TestClaimGoneReclaimedAtStart: a node whose block claim was deleted
// while it was down (with the claim of a block before it) claims its
// pods' block again at start, not the first free one.
func TestClaimGoneReclaimedAtStart(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	defer cli.Close()
	a := open(t, srv, "node-a")
	initPools(t, a, pool4)
	if got := blocksOf(t, open(t, srv, "node-x")); !slices.Equal(got, prefixes("10.244.0.0/26")) {
		t.Fatalf("node-x blocks %v", got)
	}
	if got := blocksOf(t, a); !slices.Equal(got, prefixes("10.244.0.64/26")) {
		t.Fatalf("node-a blocks %v", got)
	}
	for _, b := range []string{"10.244.0.0-26", "10.244.0.64-26"} {
		if _, err := cli.Delete(context.Background(), "/routelet/blocks/"+b); err != nil {
			t.Fatal(err)
		}
	}
	again := open(t, srv, "node-a", podsUse("10.244.0.70"))
	if got := blocksOf(t, again); !slices.Equal(got, prefixes("10.244.0.64/26")) {
		t.Errorf("node-a serves %v, want its pods' block 10.244.0.64/26", got)
	}
	if got, want := claimsIn(t, srv), map[string]string{"10.244.0.64-26": "node-a"}; !equalMaps(got, want) {
		t.Errorf("claims %v, want %v", got, want)
	}
	if v := testutil.ToFloat64(again.m.claims.WithLabelValues("reclaimed")); v != 1 {
		t.Errorf("reclaimed claims %v, want 1", v)
	}
}

// TestPodCIDRInUseKept: a --pod-cidr block another node claims is
// refused at start (naming the holder) unless this node's pods use it:
// then it is served and reported as a conflict.
func TestPodCIDRInUseKept(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	withCIDR := func(o *Options) { o.PodCIDRs = prefixes("10.244.0.0/24") }
	blocksOf(t, open(t, srv, "node-a", withCIDR))
	cli := srv.Client(t)
	defer cli.Close()
	if _, err := cli.Put(context.Background(), "/routelet/blocks/10.244.0.0-24", "node-b"); err != nil {
		t.Fatal(err)
	}
	_, err := open(t, srv, "node-a", withCIDR).LocalBlocks(context.Background(), func(string) {})
	if !errors.Is(err, ErrBlockHeld) {
		t.Errorf("pod-cidr held by node-b, no pods here: %v, want ErrBlockHeld", err)
	}
	a := open(t, srv, "node-a", withCIDR, podsUse("10.244.0.9"))
	if got := blocksOf(t, a); !slices.Equal(got, prefixes("10.244.0.0/24")) {
		t.Errorf("node-a serves %v", got)
	}
	if got, want := conflictsOf(a), []string{"10.244.0.0/24 /routelet/blocks/10.244.0.0-24 node-b"}; !slices.Equal(got, want) {
		t.Errorf("conflicts %v, want %v", got, want)
	}
}

// TestClaimNamingUsNotTaken: a claim rewritten to name node-b for the
// block node-a's record publishes does not make node-b take it at its
// next start (no pod of node-b uses it): node-b serves its own block
// only, and its first block stays first.
func TestClaimNamingUsNotTaken(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	defer cli.Close()
	a := open(t, srv, "node-a", podsUse("10.244.0.5"))
	initPools(t, a, pool4)
	blocksOf(t, a)
	if err := a.Publish(record("node-a", "10.244.0.0/26", "192.168.1.1")); err != nil {
		t.Fatal(err)
	}
	if got := blocksOf(t, open(t, srv, "node-b")); !slices.Equal(got, prefixes("10.244.0.64/26")) {
		t.Fatalf("node-b blocks %v", got)
	}
	if _, err := cli.Put(context.Background(), "/routelet/blocks/10.244.0.0-26", "node-b"); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	b := open(t, srv, "node-b", logTo(&buf))
	if got := blocksOf(t, b); !slices.Equal(got, prefixes("10.244.0.64/26")) {
		t.Errorf("node-b restarted serves %v, want only its own 10.244.0.64/26", got)
	}
	if n := buf.count("not taking it", "block=10.244.0.0/26", "publishedBy=node-a"); n != 1 {
		t.Errorf("logged %d times that node-b does not take node-a's block, want once:\n%s", n, buf.String())
	}
	// Growing does not hand it out either.
	watched(t, b)
	waitPeers(t, b, "node-a's record", record("node-a", "10.244.0.0/26", "192.168.1.1"))
	got, err := grow(t, b, 4, prefixes("10.244.0.64/26")...)
	if err != nil || got == netip.MustParsePrefix("10.244.0.0/26") {
		t.Errorf("node-b grew into %v (%v), want a free block, not node-a's", got, err)
	}
}
