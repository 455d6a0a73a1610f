package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelet/routelet/daemon/datastore/datastoretest"
	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netiptest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

var (
	pool4 = Pool{CIDR: netip.MustParsePrefix("10.244.0.0/16"), BlockSize: 26}
	pool6 = Pool{CIDR: netip.MustParsePrefix("fd00:10:244::/56"), BlockSize: 122}
)

// quiet discards logs.
var quiet = slog.New(slog.DiscardHandler)

// open returns a datastore of node on srv's endpoints (or endpoints),
// closed at the end of the test.
func open(t *testing.T, srv *etcdtest.Server, node string, mod ...func(*Options)) *Datastore {
	t.Helper()
	o := Options{Etcd: Conn{Endpoints: srv.Endpoints, CAFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile, Prefix: "/routelet"},
		NodeName: node, Logger: quiet, ProbePeriod: 100 * time.Millisecond, RequestTimeout: 3 * time.Second}
	for _, m := range mod {
		m(&o)
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// blocksOf runs LocalBlocks with a deadline.
func blocksOf(t *testing.T, d *Datastore) []netip.Prefix {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := d.LocalBlocks(ctx, func(string) {})
	if err != nil {
		t.Fatalf("LocalBlocks of %s: %v", d.o.NodeName, err)
	}
	return b
}

// initPools writes pools with d.
func initPools(t *testing.T, d *Datastore, pools ...Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.Init(ctx, pools); err != nil {
		t.Fatalf("init %v: %v", pools, err)
	}
}

// claimsIn reads the block claims straight from srv: block → node.
func claimsIn(t *testing.T, srv *etcdtest.Server) map[string]string {
	t.Helper()
	cli := srv.Client(t)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), "/routelet/blocks/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), "/routelet/blocks/")] = string(kv.Value)
	}
	return out
}

// prefixes parses CIDRs.
var prefixes = netiptest.Prefixes

// TestClaimFromPool: a node without --pod-cidr claims the first free block
// of each pool, keyed by the block and holding its name; a second node
// gets the next ones.
func TestClaimFromPool(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := open(t, srv, "node-a")
	initPools(t, a, pool4, pool6)
	if got, want := blocksOf(t, a), prefixes("10.244.0.0/26", "fd00:10:244::/122"); !slices.Equal(got, want) {
		t.Errorf("node-a blocks %v, want %v", got, want)
	}
	b := open(t, srv, "node-b")
	if got, want := blocksOf(t, b), prefixes("10.244.0.64/26", "fd00:10:244::40/122"); !slices.Equal(got, want) {
		t.Errorf("node-b blocks %v, want %v", got, want)
	}
	want := map[string]string{"10.244.0.0-26": "node-a", "fd00:10:244::-122": "node-a", "10.244.0.64-26": "node-b", "fd00:10:244::40-122": "node-b"}
	if got := claimsIn(t, srv); !equalMaps(got, want) {
		t.Errorf("claims in etcd %v, want %v", got, want)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestClaimsRace: 16 nodes claiming at once never get the same block.
func TestClaimsRace(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	initPools(t, open(t, srv, "admin"), pool4, pool6)
	const n = 16
	ds := make([]*Datastore, n)
	for i := range ds {
		ds[i] = open(t, srv, fmt.Sprintf("node-%02d", i))
	}
	atOnce(t, ds, func(ctx context.Context, _ int, d *Datastore) ([]netip.Prefix, error) {
		b, err := d.LocalBlocks(ctx, func(string) {})
		if err == nil && (len(b) != 2 || !b[0].Addr().Is4() || !b[1].Addr().Is6()) {
			err = fmt.Errorf("got %v, want one IPv4 and one IPv6 block", b)
		}
		return b, err
	})
	if c := claimsIn(t, srv); len(c) != 2*n {
		t.Errorf("%d claims in etcd, want %d: %v", len(c), 2*n, c)
	}
}

// atOnce runs claim for every datastore at the same moment and fails t
// when one fails or two claimed blocks overlap (also with before, the
// blocks held already). It returns every block claimed.
func atOnce(t *testing.T, ds []*Datastore, claim func(ctx context.Context, i int, d *Datastore) ([]netip.Prefix, error), before ...netip.Prefix) []netip.Prefix {
	t.Helper()
	type claimed struct {
		node   string
		blocks []netip.Prefix
		err    error
	}
	results := make(chan claimed, len(ds))
	start := make(chan struct{})
	for i, d := range ds {
		go func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			b, err := claim(ctx, i, d)
			results <- claimed{d.o.NodeName, b, err}
		}()
	}
	close(start)
	all := slices.Clone(before)
	var got []netip.Prefix
	for range ds {
		r := <-results
		if r.err != nil {
			t.Fatalf("%s: %v", r.node, r.err)
		}
		for _, p := range r.blocks {
			for _, q := range all {
				if p.Overlaps(q) {
					t.Errorf("two nodes hold overlapping blocks %s and %s", p, q)
				}
			}
			all = append(all, p)
		}
		got = append(got, r.blocks...)
	}
	return got
}

// TestClaimKeptAcrossRestart: a node that comes back (new process, same
// name) gets the blocks it claimed before, not new ones.
func TestClaimKeptAcrossRestart(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := open(t, srv, "node-a")
	initPools(t, a, pool4)
	first := blocksOf(t, a)
	a.Close()
	b := open(t, srv, "node-b")
	blocksOf(t, b)
	again := blocksOf(t, open(t, srv, "node-a"))
	if !slices.Equal(first, again) {
		t.Errorf("after a restart node-a holds %v, want its claim %v", again, first)
	}
	if c := claimsIn(t, srv); len(c) != 2 {
		t.Errorf("claims %v, want one per node", c)
	}
}

// TestPodCIDRRegistration: --pod-cidr is registered as a claim (no pool
// needed); the same or an overlapping block on another node is refused
// naming the holder; pool claims skip it.
func TestPodCIDRRegistration(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	withCIDR := func(s string) func(*Options) {
		return func(o *Options) { o.PodCIDRs = prefixes(s) }
	}
	a := open(t, srv, "node-a", withCIDR("10.244.0.0/24"))
	if got := blocksOf(t, a); !slices.Equal(got, prefixes("10.244.0.0/24")) {
		t.Errorf("node-a blocks %v", got)
	}
	// Registering again (a restart) is fine.
	blocksOf(t, open(t, srv, "node-a", withCIDR("10.244.0.0/24")))
	for _, cidr := range []string{"10.244.0.0/24", "10.244.0.128/25"} {
		b := open(t, srv, "node-b", withCIDR(cidr))
		_, err := b.LocalBlocks(context.Background(), func(string) {})
		if !errors.Is(err, ErrBlockHeld) || !strings.Contains(err.Error(), `"node-a"`) || !strings.Contains(err.Error(), cidr) {
			t.Errorf("node-b with pod-cidr %s: %v, want refused naming node-a", cidr, err)
		}
	}
	c := open(t, srv, "node-c")
	initPools(t, c, pool4)
	if got := blocksOf(t, c); !slices.Equal(got, prefixes("10.244.1.0/26")) {
		t.Errorf("node-c claimed %v, want the first block past node-a's /24", got)
	}
}

// TestInitRefusesChange: pools cannot change while blocks are claimed;
// the same pools again are fine; without claims they can change.
func TestInitRefusesChange(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := open(t, srv, "node-a")
	initPools(t, a, pool4)
	if changed, err := a.Init(context.Background(), []Pool{{CIDR: netip.MustParsePrefix("10.245.0.0/16"), BlockSize: 24}}); err != nil || !changed {
		t.Errorf("change without claims: %v, %v", changed, err)
	}
	blocksOf(t, a)
	_, err := a.Init(context.Background(), []Pool{pool4})
	if !errors.Is(err, ErrPoolsInUse) || !strings.Contains(err.Error(), "1 blocks are claimed") {
		t.Errorf("change with a claim: %v, want refused saying how many", err)
	}
	if changed, err := a.Init(context.Background(), []Pool{{CIDR: netip.MustParsePrefix("10.245.0.0/16"), BlockSize: 24}}); err != nil || changed {
		t.Errorf("same pools again: %v, %v, want no change", changed, err)
	}
}

// TestWaitsForPool: with no pool, LocalBlocks waits saying how to set one;
// once written, it claims.
func TestWaitsForPool(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := open(t, srv, "node-a")
	reasons := make(chan string, 100)
	done := make(chan []netip.Prefix, 1)
	go func() {
		b, _ := a.LocalBlocks(context.Background(), func(r string) {
			select {
			case reasons <- r:
			default:
			}
		})
		done <- b
	}()
	select {
	case r := <-reasons:
		if !strings.Contains(r, "routeletd etcd init") {
			t.Errorf("reason %q does not say how to configure a pool", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("no waiting reason")
	}
	initPools(t, open(t, srv, "admin"), pool4)
	select {
	case b := <-done:
		if !slices.Equal(b, prefixes("10.244.0.0/26")) {
			t.Errorf("blocks %v", b)
		}
	case <-time.After(time.Minute):
		t.Fatal("LocalBlocks did not return after the pool was written")
	}
}

// record is node's record with a block and a host IP.
func record(node, block, host string) peers.Record {
	return peers.Record{Name: node, HostIPv4: host, Blocks: []string{block}, VTEPMAC: "66:00:00:00:00:01", TunnelIPv4: netip.MustParsePrefix(block).Addr().String()}
}

// watched starts d's watch and returns a channel of its change hints.
func watched(t *testing.T, d *Datastore) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return watchedCtx(t, ctx, d)
}

// watchedCtx is watched until ctx is done (the daemon stops).
func watchedCtx(t *testing.T, ctx context.Context, d *Datastore) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 1)
	if err := d.Watch(ctx, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	return ch
}

// waitPeers waits until d's peers are want (by name and blocks).
func waitPeers(t *testing.T, d *Datastore, what string, want ...peers.Record) {
	t.Helper()
	netnstest.WaitFor(t, 30*time.Second, what, func() error {
		recs, _, err := d.Peers()
		if err != nil {
			return err
		}
		if len(recs) != len(want) {
			return fmt.Errorf("peers %+v", recs)
		}
		for i := range recs {
			if recs[i].Name != want[i].Name || !slices.Equal(recs[i].Blocks, want[i].Blocks) || recs[i].HostIPv4 != want[i].HostIPv4 {
				return fmt.Errorf("peers %+v", recs)
			}
		}
		return nil
	})
}

// TestWatchPeer: a peer's record appearing, changing and leaving reaches
// the other node through the watch; the own record is written only when
// it changes and never handed back as a peer.
func TestWatchPeer(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	initPools(t, a, pool4)
	if err := b.Publish(record("node-b", "10.244.0.64/26", "192.168.1.2")); err != nil {
		t.Fatal(err)
	}
	watched(t, b)
	waitPeers(t, b, "no peers yet")
	recA := record("node-a", "10.244.0.0/26", "192.168.1.1")
	if err := a.Publish(recA); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, b, "node-a appears", recA)

	cli := srv.Client(t)
	defer cli.Close()
	rev := func() int64 {
		resp, err := cli.Get(context.Background(), "/routelet/nodes/node-a")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("node-a's record: %v %v", resp, err)
		}
		return resp.Kvs[0].ModRevision
	}
	before := rev()
	a2 := open(t, srv, "node-a")
	if err := a2.Publish(recA); err != nil {
		t.Fatal(err)
	}
	if after := rev(); after != before {
		t.Errorf("publishing the same record rewrote it (revision %d → %d)", before, after)
	}
	recA.HostIPv4 = "192.168.1.11"
	if err := a2.Publish(recA); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, b, "node-a's host IP changes", recA)
	if _, err := a2.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, b, "node-a leaves")
	if c := claimsIn(t, srv); len(c) != 0 {
		t.Errorf("claims after node-a left and node-b never claimed: %v", c)
	}
}

// TestOwnRecordRestored: the own record deleted or altered by someone else
// is written again.
func TestOwnRecordRestored(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := open(t, srv, "node-a")
	rec := record("node-a", "10.244.0.0/26", "192.168.1.1")
	if err := a.Publish(rec); err != nil {
		t.Fatal(err)
	}
	watched(t, a)
	cli := srv.Client(t)
	defer cli.Close()
	for _, tamper := range []func() error{
		func() error { _, err := cli.Delete(context.Background(), "/routelet/nodes/node-a"); return err },
		func() error {
			_, err := cli.Put(context.Background(), "/routelet/nodes/node-a", `{"version":1,"name":"node-a","blocks":["10.99.0.0/24"]}`)
			return err
		},
	} {
		if err := tamper(); err != nil {
			t.Fatal(err)
		}
		netnstest.Eventually(t, 30*time.Second, "own record restored", func() bool {
			resp, err := cli.Get(context.Background(), "/routelet/nodes/node-a")
			if err != nil || len(resp.Kvs) != 1 {
				return false
			}
			n, err := state.DecodeNode(resp.Kvs[0].Value)
			return err == nil && slices.Equal(n.Blocks, rec.Blocks)
		})
	}
}

// TestCompactedWatchRelists: a watch whose revision was compacted away
// re-lists and serves what changed meanwhile.
func TestCompactedWatchRelists(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	b := open(t, srv, "node-b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stale, err := b.relist(ctx, "start")
	if err != nil {
		t.Fatal(err)
	}
	a := open(t, srv, "node-a")
	recA := record("node-a", "10.244.0.0/26", "192.168.1.1")
	if err := a.Publish(recA); err != nil {
		t.Fatal(err)
	}
	cli := srv.Client(t)
	defer cli.Close()
	// A write outside the prefix, so the compaction removes the
	// revision node-a's record was written at.
	resp, err := cli.Put(ctx, "/elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	go b.watchLoop(ctx, stale)
	waitPeers(t, b, "node-a after the re-list", recA)
	if n := testutil.ToFloat64(b.m.relists.WithLabelValues("compacted")); n != 1 {
		t.Errorf("routelet_datastore_relists_total{reason=compacted} = %v, want 1", n)
	}
}

// TestTLS: with the CA and a client certificate of it the datastore
// works; a client certificate of another CA is refused (the node waits,
// saying why), as is no client certificate.
func TestTLS(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{TLS: true})
	a := open(t, srv, "node-a")
	initPools(t, a, pool4)
	if got := blocksOf(t, a); len(got) != 1 {
		t.Errorf("blocks over TLS: %v", got)
	}
	for name, mod := range map[string]func(*Options){
		"wrong CA": func(o *Options) { o.Etcd.CertFile, o.Etcd.KeyFile = srv.WrongCertFile, srv.WrongKeyFile },
		"no cert":  func(o *Options) { o.Etcd.CertFile, o.Etcd.KeyFile = "", "" },
	} {
		t.Run(name, func(t *testing.T) {
			b := open(t, srv, "node-b", mod)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			var reason string
			blocks, err := b.LocalBlocks(ctx, func(r string) {
				reason = r
				cancel()
			})
			if err == nil {
				t.Fatalf("claimed %v with a refused certificate", blocks)
			}
			if !strings.Contains(reason, "etcd") {
				t.Errorf("waiting reason %q does not name etcd", reason)
			}
		})
	}
	if c := claimsIn(t, srv); len(c) != 1 {
		t.Errorf("claims %v, want node-a's only", c)
	}
}

// TestBadDataSkipped: a foreign key, a record under another node's name
// and a truncated value are skipped, each an error naming its key and
// counted in routelet_datastore_skipped_keys; a record with a hostile
// block passes the peer validation, which drops that block; the good
// peer is served throughout.
func TestBadDataSkipped(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	defer cli.Close()
	good := record("node-c", "10.244.0.128/26", "192.168.1.3")
	gn := peers.ToState(good)
	data, err := state.EncodeNode(&gn)
	if err != nil {
		t.Fatal(err)
	}
	hostile := peers.ToState(record("node-d", "10.244.0.0/26", "192.168.1.4")) // node-b's own block
	hdata, _ := state.EncodeNode(&hostile)
	puts := map[string]string{
		"/routelet/nodes/node-c":   string(data),
		"/routelet/nodes/node-d":   string(hdata),
		"/routelet/junk":           "x",
		"/routelet/nodes/node-e":   string(data), // node-c's record under node-e
		"/routelet/nodes/node-f":   string(data[:len(data)/2]),
		"/routelet/nodes/Bad_Name": string(data),
	}
	for k, v := range puts {
		if _, err := cli.Put(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	b := open(t, srv, "node-b")
	if err := b.Publish(record("node-b", "10.244.0.0/26", "192.168.1.2")); err != nil {
		t.Fatal(err)
	}
	watched(t, b)
	recs, bad, err := b.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if names := datastoretest.Names(recs); !slices.Equal(names, []string{"node-c", "node-d"}) {
		t.Errorf("peers %v, want node-c and node-d", names)
	}
	for _, key := range []string{"/routelet/junk", "/routelet/nodes/node-e", "/routelet/nodes/node-f", "/routelet/nodes/Bad_Name"} {
		if !slices.ContainsFunc(bad, func(e error) bool { return strings.Contains(e.Error(), key+":") }) {
			t.Errorf("no error names %s: %v", key, bad)
		}
	}
	if n := testutil.ToFloat64(b.m.skipped); n != 4 {
		t.Errorf("routelet_datastore_skipped_keys = %v, want 4", n)
	}
	v := peers.New(peers.Options{
		Self:     peers.Self{Name: "node-b", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.168.1.2")}, Blocks: prefixes("10.244.0.0/26")},
		ReadHost: func() (nodespace.Host, error) { return nodespace.Host{}, nil },
		StateDir: t.TempDir(), Logger: quiet,
	})
	valid := v.Validate(recs)
	if len(valid) != 2 || !slices.Equal(valid[0].Blocks, prefixes("10.244.0.128/26")) || len(valid[1].Blocks) != 0 {
		t.Errorf("validated peers %+v: want node-c's block and none of node-d's", valid)
	}
	if !slices.ContainsFunc(v.Refused(), func(r peers.Refusal) bool { return r.Node == "node-d" && r.Field == peers.FieldBlock }) {
		t.Errorf("refusals %v: want node-d's block", v.Refused())
	}
	// Fixing a key clears it.
	if _, err := cli.Delete(context.Background(), "/routelet/junk"); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 30*time.Second, "skipped keys 3", func() bool { return testutil.ToFloat64(b.m.skipped) == 3 })
}

// TestWireGuardFields: a node's WireGuard key and port are in its etcd
// value under the record's JSON names and reach the other node as they
// were published; a new key published after a rotation replaces the old.
func TestWireGuardFields(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	initPools(t, a, pool4)
	watched(t, b)
	recA := record("node-a", "10.244.0.0/26", "192.168.1.1")
	recA.WireGuardPublicKey, recA.WireGuardPort = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", "51821"
	if err := a.Publish(recA); err != nil {
		t.Fatal(err)
	}
	cli := srv.Client(t)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), "/routelet/nodes/node-a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("node-a's record: %v %v", resp, err)
	}
	for _, want := range []string{`"wireguardPublicKey":"xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="`, `"wireguardPort":51821`} {
		if !strings.Contains(string(resp.Kvs[0].Value), want) {
			t.Errorf("node-a's value lacks %s: %s", want, resp.Kvs[0].Value)
		}
	}
	waitWireGuard := func(what, key, port string) {
		t.Helper()
		netnstest.WaitFor(t, 30*time.Second, what, func() error {
			recs, _, err := b.Peers()
			if err != nil {
				return err
			}
			if len(recs) != 1 || recs[0].WireGuardPublicKey != key || recs[0].WireGuardPort != port {
				return fmt.Errorf("peers %+v", recs)
			}
			return nil
		})
	}
	waitWireGuard("node-a's key at 51821", recA.WireGuardPublicKey, "51821")
	recA.WireGuardPublicKey, recA.WireGuardPort = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=", ""
	if err := a.Publish(recA); err != nil {
		t.Fatal(err)
	}
	waitWireGuard("node-a's new key at the default port", recA.WireGuardPublicKey, "")
}

// TestBGPASField: a node's BGP AS number is in its etcd value as bgpAS
// and reaches the other node as it was published.
func TestBGPASField(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	initPools(t, a, pool4)
	watched(t, b)
	recA := record("node-a", "10.244.0.0/26", "192.168.1.1")
	recA.BGPAS = "4200000000"
	if err := a.Publish(recA); err != nil {
		t.Fatal(err)
	}
	cli := srv.Client(t)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), "/routelet/nodes/node-a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("node-a's record: %v %v", resp, err)
	}
	if !strings.Contains(string(resp.Kvs[0].Value), `"bgpAS":4200000000`) {
		t.Errorf("node-a's value lacks bgpAS: %s", resp.Kvs[0].Value)
	}
	waitAS := func(what, as string) {
		t.Helper()
		netnstest.WaitFor(t, 30*time.Second, what, func() error {
			recs, _, err := b.Peers()
			if err != nil {
				return err
			}
			if len(recs) != 1 || recs[0].BGPAS != as {
				return fmt.Errorf("peers %+v", recs)
			}
			return nil
		})
	}
	waitAS("node-a's AS", "4200000000")
	recA.BGPAS = "" // bgp turned off
	if err := a.Publish(recA); err != nil {
		t.Fatal(err)
	}
	waitAS("node-a without an AS", "")
}

// TestOwnBGPPeers: the specs under <prefix>/bgppeers/<node> are this
// node's BGP peers; each put or delete of the key wakes the watch;
// another node's key is not this node's and not a bad key; a value that
// is not a JSON array of strings is an error naming the key (and a
// skipped key), until it is fixed.
func TestOwnBGPPeers(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	a := open(t, srv, "node-a")
	if _, err := a.OwnBGPPeers(); err == nil || !strings.Contains(err.Error(), "not been listed") {
		t.Errorf("OwnBGPPeers before the first list: %v, want an error", err)
	}
	changed := watched(t, a)
	if specs, err := a.OwnBGPPeers(); err != nil || len(specs) != 0 {
		t.Errorf("OwnBGPPeers without the key = %q, %v; want none", specs, err)
	}
	cli := srv.Client(t)
	defer cli.Close()
	put := func(key, value string) {
		t.Helper()
		for len(changed) > 0 {
			<-changed
		}
		if _, err := cli.Put(context.Background(), key, value); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatalf("no change hint after writing %s", key)
		}
	}
	const own = "/routelet/bgppeers/node-a"
	want := []string{"192.0.2.254,as=65000", "2001:db8::fe,as=65000,route-reflector"}
	put(own, `["192.0.2.254,as=65000","2001:db8::fe,as=65000,route-reflector"]`)
	if specs, err := a.OwnBGPPeers(); err != nil || !slices.Equal(specs, want) {
		t.Errorf("OwnBGPPeers = %q, %v; want %q", specs, err, want)
	}
	put("/routelet/bgppeers/node-b", `["198.51.100.1,as=65100"]`)
	if specs, err := a.OwnBGPPeers(); err != nil || !slices.Equal(specs, want) {
		t.Errorf("after node-b's key, OwnBGPPeers = %q, %v; want node-a's %q", specs, err, want)
	}
	if _, bad, err := a.Peers(); err != nil || len(bad) != 0 {
		t.Errorf("another node's bgppeers key: bad keys %v, %v", bad, err)
	}
	put(own, `"192.0.2.254,as=65000"`)
	if specs, err := a.OwnBGPPeers(); err == nil || !strings.Contains(err.Error(), own) || specs != nil {
		t.Errorf("OwnBGPPeers of a string = %q, %v; want an error naming %s", specs, err, own)
	}
	if _, bad, _ := a.Peers(); len(bad) != 1 || !strings.Contains(bad[0].Error(), own) {
		t.Errorf("bad keys %v, want %s", bad, own)
	}
	put(own, `["192.0.2.253,as=65000"]`)
	if specs, err := a.OwnBGPPeers(); err != nil || !slices.Equal(specs, []string{"192.0.2.253,as=65000"}) {
		t.Errorf("after the fix, OwnBGPPeers = %q, %v", specs, err)
	}
	for len(changed) > 0 {
		<-changed
	}
	if _, err := cli.Delete(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no change hint after deleting the key")
	}
	if specs, err := a.OwnBGPPeers(); err != nil || len(specs) != 0 {
		t.Errorf("after the delete, OwnBGPPeers = %q, %v; want none", specs, err)
	}
	// A relist (the daemon restarting) reads the key again.
	put(own, `["192.0.2.252,as=65000"]`)
	a2 := open(t, srv, "node-a")
	watched(t, a2)
	if specs, err := a2.OwnBGPPeers(); err != nil || !slices.Equal(specs, []string{"192.0.2.252,as=65000"}) {
		t.Errorf("a new datastore's OwnBGPPeers = %q, %v", specs, err)
	}
}
