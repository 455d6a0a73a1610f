package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// etcdHost is the etcd server's host on the underlay (a's and b's subnet).
var etcdHost = cluster.NodeSpec{Name: "etcd", Host4: "10.0.1.2/24", Host6: "fd00:1::2/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1"}

// etcdPools are the pools `routeletd etcd init` writes: /24 and /120
// blocks, like the file datastore tests' --pod-cidr values.
var etcdPools = []string{"--pool", "10.244.0.0/16", "--block-size", "24", "--pool", "fd00:244::/48", "--block-size-v6", "120"}

// etcdCluster builds a cluster of nodes (without blocks of their own,
// sharing their records directory) and a host running etcd (with TLS and
// client certificates when tls), and returns the server and the daemon
// flags that use it.
func etcdCluster(t *testing.T, nodes []cluster.NodeSpec, tls bool) (*testCluster, *etcdtest.Server, []string) {
	t.Helper()
	tc := buildCluster(t, cluster.Options{Nodes: withoutBlocks(nodes...), SharedRecords: true})
	host, err := tc.c.AddHost(etcdHost)
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.Start(t, etcdtest.Options{NetNS: host.CNI.NS, Addr: netip.MustParseAddr(hostAddr(etcdHost.Host4)), TLS: tls})
	args := []string{"--datastore=etcd", "--etcd-endpoints=" + srv.Endpoints[0]}
	if tls {
		args = append(args, "--etcd-ca-file="+srv.CAFile, "--etcd-cert-file="+srv.CertFile, "--etcd-key-file="+srv.KeyFile)
	}
	return tc, srv, args
}

// withoutBlocks is specs with no --pod-cidr: the blocks come from etcd.
func withoutBlocks(ss ...cluster.NodeSpec) []cluster.NodeSpec {
	out := slices.Clone(ss)
	for i := range out {
		out[i].Block4, out[i].Block6 = "", ""
	}
	return out
}

// learnBlocks sets n's spec blocks to those its daemon reports in
// daemon.json (claimed from etcd), so the dataplane expectations apply.
func learnBlocks(t *testing.T, n *node) {
	t.Helper()
	st, err := n.Store.ReadDaemonStatus()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Blocks {
		p := netip.MustParsePrefix(b)
		if p.Addr().Is4() {
			n.Spec.Block4 = b
		} else {
			n.Spec.Block6 = b
		}
	}
	if n.Spec.Block4 == "" || n.Spec.Block6 == "" {
		t.Fatalf("node %s blocks %v: want one per family from the pools", n.Spec.Name, st.Blocks)
	}
}

// pingFor pings dst from p every 200 ms, count times, and returns ping's
// error: nil only when every echo was answered.
func pingFor(p *cluster.Pod, dst netip.Addr, count int) error {
	deadline := fmt.Sprint(count/5 + 30)
	_, err := netnstest.Exec(context.Background(), p.NS, "ping", "-n", "-q", "-i", "0.2", "-c", fmt.Sprint(count), "-w", deadline, dst.String())
	return err
}

// TestEtcdDatastore: three nodes with --datastore etcd (TLS, client
// certificates) and no --pod-cidr claim distinct blocks from the pools
// and program each other from the records in etcd; pods reach each other
// over IPv4 and IPv6. With etcd stopped for 30 s pods keep talking with
// no lost echo and no node's dataplane changes; a node started during the
// outage claims a block and appears on every peer once etcd is back.
// `routeletd leave` refuses while pods remain, then removes the node:
// its peers drop its routes, ARP/NDP and FDB entries and allowlist
// entries.
func TestEtcdDatastore(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	etcdtest.Binary(t)
	tc, srv, etcdArgs := etcdCluster(t, specs, true)
	a := tc.node("a")
	if out, err := routeletd(a, append(append([]string{"etcd", "init"}, etcdPools...), etcdArgs...)...); err != nil {
		t.Fatalf("etcd init: %v\n%s", err, out)
	}
	tc.c.SetDaemonArgs(append(append(slices.Clone(baseArgs), "--encapsulation=vxlan"), etcdArgs...))
	ctx := context.Background()
	if err := tc.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.nodes {
		learnBlocks(t, n)
	}
	var blocks []netip.Prefix
	for _, n := range tc.nodes {
		for _, b := range []string{n.Spec.Block4, n.Spec.Block6} {
			p := netip.MustParsePrefix(b)
			for _, q := range blocks {
				if p.Overlaps(q) {
					t.Fatalf("two nodes hold overlapping blocks %s and %s", p, q)
				}
			}
			blocks = append(blocks, p)
		}
	}
	for _, n := range tc.c.Nodes {
		if _, err := tc.c.AddPod(ctx, n, n.Spec.Name+"-pod0"); err != nil {
			t.Fatal(err)
		}
	}
	tc.checkAll("vxlan")
	if bad := tc.reachability(func(_, _ *node) bool { return true }); len(bad) > 0 {
		t.Fatalf("pods that should reach each other do not:\n%s", strings.Join(bad, "\n"))
	}
	// status and diagnose take the peers from the running daemon; status
	// shows etcd's health and the peers' liveness.
	etcdFlags := append([]string{"--encapsulation=vxlan"}, etcdArgs...)
	diagnoseAcross(t, tc, etcdFlags)
	netnstest.WaitFor(t, 30*time.Second, "status on a: etcd reachable, both peers live", func() error {
		args := append([]string{"status", "--node-name=a", "--state-dir=" + a.StateDir}, etcdFlags...)
		out, err := routeletd(a, args...)
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		for _, want := range []string{"etcd reachable: ok: 2 peer records, 2 valid peers", "2/2 peers live", "Peers: 2 (2 ok, 0 with problems)"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		return nil
	})

	parent := t
	// The helpers fail the subtest running them.
	sub := func(t *testing.T) func() {
		tc.t = t
		return func() { tc.t = parent }
	}
	t.Run("etcd outage", func(t *testing.T) {
		defer sub(t)()
		before := tc.dataplanes(tc.nodes)
		const outage = 30 * time.Second
		count := int((outage + 10*time.Second) / (200 * time.Millisecond))
		from := a.Pods[0]
		dsts := []netip.Addr{tc.node("b").Pods[0].IPv4, tc.node("c").Pods[0].IPv4, tc.node("c").Pods[0].IPv6}
		pingErrs := make(chan error, len(dsts))
		for _, dst := range dsts {
			go func() { pingErrs <- pingFor(from, dst, count) }()
		}
		srv.Stop(t)
		stopped := time.Now()
		d, err := tc.c.AddNode(cluster.NodeSpec{Name: "d", Host4: "10.0.1.12/24", Host6: "fd00:1::12/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1"})
		if err != nil {
			t.Fatal(err)
		}
		dn := newNode(parent, d) // lives as long as the cluster
		tc.nodes = append(tc.nodes, dn)
		if err := tc.c.StartDaemon(d); err != nil {
			t.Fatal(err)
		}
		netnstest.Eventually(t, 20*time.Second, "node d not ready, waiting for etcd", func() bool {
			st, err := d.Store.ReadDaemonStatus()
			return err == nil && !st.Ready && strings.Contains(st.Reason, "etcd")
		})
		// The outage lasts its full length; meanwhile nothing changes.
		tc.keepDataplanes(tc.nodes[:3], before, stopped, outage, "the etcd outage")
		for _, n := range tc.nodes[:3] {
			if !strings.Contains(n.LogTail(1000), "etcd unreachable") {
				t.Errorf("node %s did not log the outage", n.Spec.Name)
			}
		}
		srv.Resume(t)
		if err := d.WaitReady(ctx, netnstest.ReadyTimeout); err != nil {
			t.Fatal(err)
		}
		for range dsts {
			if err := <-pingErrs; err != nil {
				t.Errorf("pings across the outage: %v", err)
			}
		}
		learnBlocks(t, dn)
		for _, b := range []string{d.Spec.Block4, d.Spec.Block6} {
			if p := netip.MustParsePrefix(b); slices.ContainsFunc(blocks, p.Overlaps) {
				t.Errorf("node d claimed %s, which overlaps another node's block", b)
			}
		}
		if _, err := tc.c.AddPod(ctx, d, "d-pod0"); err != nil {
			t.Fatal(err)
		}
		tc.checkAll("vxlan")
		if bad := tc.reachability(func(_, _ *node) bool { return true }); len(bad) > 0 {
			t.Fatalf("after the outage, pods that should reach each other do not:\n%s", strings.Join(bad, "\n"))
		}
	})

	t.Run("leave", func(t *testing.T) {
		defer sub(t)()
		cn := tc.node("c")
		if err := cn.Stop(); err != nil {
			t.Fatal(err)
		}
		leave := append([]string{"leave", "--node-name=c", "--state-dir=" + cn.StateDir}, etcdArgs...)
		out, err := routeletd(cn, leave...)
		if err == nil || !strings.Contains(out, "1 pod still on this node") {
			t.Fatalf("leave with a pod on the node: %v\n%s\nwant refused saying 1 pod", err, out)
		}
		if err := tc.c.DelPod(ctx, cn.Node, cn.Pods[0]); err != nil {
			t.Fatal(err)
		}
		if out, err := routeletd(cn, leave...); err != nil {
			t.Fatalf("leave: %v\n%s", err, out)
		}
		tc.nodes = slices.DeleteFunc(tc.nodes, func(n *node) bool { return n == cn })
		tc.checkAll("vxlan")
		for _, n := range tc.nodes {
			netnstest.Eventually(t, 10*time.Second, "node "+n.Spec.Name+" allowlist without c", func() bool {
				return !slices.Contains(n.setMembers("routelet-vxlan-peers"), hostAddr(cn.Spec.Host4)) &&
					!slices.Contains(n.setMembers("routelet-vxlan-peers-v6"), hostAddr(cn.Spec.Host6)) &&
					!slices.Contains(n.setMembers("routelet-pools"), cn.Spec.Block4)
			})
		}
	})
}

// v4Blocks returns the IPv4 blocks n's daemon.json lists while ready, in
// its order (nil while not ready).
func v4Blocks(n *node) []netip.Prefix {
	st, err := n.Store.ReadDaemonStatus()
	if err != nil || !st.Ready {
		return nil
	}
	var out []netip.Prefix
	for _, b := range st.Blocks {
		if p := netip.MustParsePrefix(b); p.Addr().Is4() {
			out = append(out, p)
		}
	}
	return out
}

// waitV4Blocks waits until n is ready with count IPv4 blocks and returns
// them.
func waitV4Blocks(t *testing.T, n *node, count int) []netip.Prefix {
	t.Helper()
	var got []netip.Prefix
	netnstest.WaitFor(t, 60*time.Second, fmt.Sprintf("node %s ready with %d IPv4 blocks", n.Spec.Name, count), func() error {
		if got = v4Blocks(n); len(got) != count {
			return fmt.Errorf("daemon.json IPv4 blocks %v", got)
		}
		return nil
	})
	return got
}

// claimsOf reads the block claims in etcd: node → blocks.
func claimsOf(t *testing.T, srv *etcdtest.Server) map[string][]string {
	t.Helper()
	cli := srv.Client(t)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/routelet/blocks/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Value)] = append(out[string(kv.Value)], strings.TrimPrefix(string(kv.Key), "/routelet/blocks/"))
	}
	return out
}

// metricOf reads one metric line's value from n's /metrics.
func metricOf(n *node, name string) string {
	_, body, err := netnstest.HTTPGet(n.CNI.NS, "http://127.0.0.1:9099/metrics")
	if err != nil {
		return err.Error()
	}
	v, _ := netnstest.MetricValue(body, name)
	return v
}

// vxlanRoute is the route a peer holds for block of a node whose tunnel
// address is the first address of its first block.
func vxlanRoute(block, first netip.Prefix) string {
	return fmt.Sprintf("%s via %s dev vxlan.calico onlink mtu %d", block, first.Addr(), mtuV4)
}

// TestEtcdBlockGrowth: two etcd nodes with /30 blocks (two pod addresses
// each) from a pool of four fill their blocks at once with plugin ADDs;
// each claims a second block, never the same as the other, and rebuilds
// its loop losing no echo of a ping across; the next ADD gets an address
// in it, the peer routes it over VXLAN to the node and
// pods talk across; the metrics and the log say so. A restart keeps both
// claims. With every block full and the pool empty an ADD fails naming
// the full blocks; once the peer leaves (releasing both its blocks) the
// node claims one of them and the ADD succeeds.
func TestEtcdBlockGrowth(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	etcdtest.Binary(t)
	tc, srv, etcdArgs := etcdCluster(t, specs[:2], false)
	a, b := tc.node("a"), tc.node("b")
	pools := []string{"--pool", "10.244.0.0/28", "--block-size", "30", "--pool", "fd00:244::/120", "--block-size-v6", "122"}
	if out, err := routeletd(a, append(append([]string{"etcd", "init"}, pools...), etcdArgs...)...); err != nil {
		t.Fatalf("etcd init: %v\n%s", err, out)
	}
	daemonArgs := append(append(slices.Clone(baseArgs), "--health-addr=127.0.0.1:9099", "--encapsulation=vxlan"), etcdArgs...)
	tc.c.SetDaemonArgs(daemonArgs)
	ctx := context.Background()
	if err := tc.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first := map[*node]netip.Prefix{a: waitV4Blocks(t, a, 1)[0], b: waitV4Blocks(t, b, 1)[0]}

	// One pod each, pinging across while both nodes then fill their block
	// at once: the loops' rebuilds lose no echo.
	for _, n := range []*node{a, b} {
		if _, err := tc.c.AddPod(ctx, n.Node, n.Spec.Name+"-pod0"); err != nil {
			t.Fatal(err)
		}
	}
	netnstest.WaitFor(t, 30*time.Second, "a-pod0 reaches b-pod0", func() error {
		if out, err := a.Pods[0].Ping(t.Context(), b.Pods[0].IPv4); err != nil {
			return fmt.Errorf("no reply:\n%s", out)
		}
		return nil
	})
	pinged := make(chan error, 1)
	go func() { pinged <- pingFor(a.Pods[0], b.Pods[0].IPv4, 25) }()
	errs := make(chan error, 2)
	for _, n := range []*node{a, b} {
		go func() {
			_, err := tc.c.AddPod(ctx, n.Node, n.Spec.Name+"-pod1")
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	blocks := map[*node][]netip.Prefix{a: waitV4Blocks(t, a, 2), b: waitV4Blocks(t, b, 2)}
	var all []netip.Prefix
	for _, n := range []*node{a, b} {
		if blocks[n][0] != first[n] {
			t.Errorf("node %s blocks %v: want its first block %s first (its tunnel address)", n.Spec.Name, blocks[n], first[n])
		}
		all = append(all, blocks[n]...)
	}
	for i, p := range all {
		for _, q := range all[:i] {
			if p.Overlaps(q) {
				t.Fatalf("two claims overlap: %s and %s (a %v, b %v)", p, q, blocks[a], blocks[b])
			}
		}
	}
	for _, n := range []*node{a, b} {
		netnstest.WaitFor(t, 30*time.Second, "node "+n.Spec.Name+" metrics", func() error {
			full := metricOf(n, `routelet_datastore_block_claims_total{reason="full"}`)
			free0 := metricOf(n, fmt.Sprintf(`routelet_ipam_block_free_addresses{block="%s"}`, blocks[n][0]))
			free1 := metricOf(n, fmt.Sprintf(`routelet_ipam_block_free_addresses{block="%s"}`, blocks[n][1]))
			if full != "1" || free0 != "0" || free1 != "2" {
				return fmt.Errorf("claims{full} %q, free in %s %q, in %s %q; want 1, 0, 2", full, blocks[n][0], free0, blocks[n][1], free1)
			}
			return nil
		})
		if log := n.LogTail(2000); !strings.Contains(log, "claimed another block from the pool: every block of its family is full") {
			t.Errorf("node %s did not log the claim", n.Spec.Name)
		}
	}
	// The next ADD gets an address in the new block; the peer routes the
	// block to the node; pods talk across.
	for _, n := range []*node{a, b} {
		p, err := tc.c.AddPod(ctx, n.Node, n.Spec.Name+"-pod2")
		if err != nil {
			t.Fatal(err)
		}
		if !blocks[n][1].Contains(p.IPv4) {
			t.Errorf("node %s: pod2 got %s, want an address in the new block %s", n.Spec.Name, p.IPv4, blocks[n][1])
		}
	}
	for _, pair := range [][2]*node{{a, b}, {b, a}} {
		n, peer := pair[0], pair[1]
		want := []string{vxlanRoute(blocks[n][0], blocks[n][0]), vxlanRoute(blocks[n][1], blocks[n][0])}
		netnstest.WaitFor(t, 30*time.Second, "node "+peer.Spec.Name+" routes both blocks of "+n.Spec.Name, func() error {
			got, err := peer.overlayRoutes(unix.AF_INET)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) && !slices.Equal(got, []string{want[1], want[0]}) {
				return fmt.Errorf("routes %v, want %v", got, want)
			}
			pools := peer.setMembers("routelet-pools")
			for _, blk := range all {
				if !slices.Contains(pools, blk.String()) {
					return fmt.Errorf("routelet-pools %v lacks %s", pools, blk)
				}
			}
			return nil
		})
	}
	netnstest.WaitFor(t, 30*time.Second, "status on a lists both blocks", func() error {
		out, err := routeletd(a, append([]string{"status", "--node-name=a", "--state-dir=" + a.StateDir}, etcdArgs...)...)
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "Blocks:") && strings.Contains(l, blocks[a][0].String()+" ") && strings.Contains(l, blocks[a][1].String()+" ") {
				return nil
			}
		}
		return fmt.Errorf("no Blocks line with %v:\n%s", blocks[a], out)
	})
	if err := <-pinged; err != nil {
		t.Errorf("a-pod0 → b-pod0 while both nodes claimed a block and rebuilt their loops: %v", err)
	}
	for _, pair := range [][2]*node{{a, b}, {b, a}} {
		from, to := pair[0].Pods[0], pair[1].Pods[2]
		if out, err := from.Ping(t.Context(), to.IPv4); err != nil {
			t.Errorf("%s → %s (%s, the new block): no reply\n%s", from.Name, to.Name, to.IPv4, out)
		}
	}

	// A restart keeps both claims, in order.
	if err := tc.c.Restart(ctx, a.Node, daemonArgs...); err != nil {
		t.Fatal(err)
	}
	if got := waitV4Blocks(t, a, 2); !slices.Equal(got, blocks[a]) {
		t.Errorf("after a restart node a holds %v, want %v", got, blocks[a])
	}
	if c := claimsOf(t, srv); len(c["a"]) != 3 || len(c["b"]) != 3 {
		t.Errorf("claims after the restart %v, want 3 per node (two IPv4, one IPv6)", c)
	}

	// Every block full, the pool empty: ADD fails naming the blocks.
	if _, err := tc.c.AddPod(ctx, a.Node, "a-pod3"); err != nil {
		t.Fatal(err)
	}
	_, err := tc.c.AddPod(ctx, a.Node, "a-pod4")
	wantErr := fmt.Sprintf("no addresses left in IPv4 blocks %s, %s", blocks[a][0], blocks[a][1])
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("ADD with every block full and the pool empty: %v, want %q", err, wantErr)
	}
	netnstest.WaitFor(t, 30*time.Second, "node a logs that it cannot claim", func() error {
		if !strings.Contains(a.LogTail(2000), "no other block could be claimed") {
			return fmt.Errorf("no such log line")
		}
		return nil
	})

	// b leaves: both its blocks are released; a claims one and the ADD
	// (the runtime's retry) succeeds.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range slices.Clone(b.Pods) {
		if err := tc.c.DelPod(ctx, b.Node, p); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := routeletd(b, append([]string{"leave", "--node-name=b", "--state-dir=" + b.StateDir}, etcdArgs...)...); err != nil {
		t.Fatalf("leave: %v\n%s", err, out)
	}
	if c := claimsOf(t, srv); len(c["b"]) != 0 {
		t.Errorf("claims of b after leave: %v, want none", c["b"])
	}
	third := waitV4Blocks(t, a, 3)[2]
	if !slices.Contains(blocks[b], third) {
		t.Errorf("node a claimed %s, want one of the blocks b released %v", third, blocks[b])
	}
	p, err := tc.c.AddPod(ctx, a.Node, "a-pod5")
	if err != nil {
		t.Fatalf("ADD once a third block is claimed: %v", err)
	}
	if !third.Contains(p.IPv4) {
		t.Errorf("a-pod5 got %s, want an address in %s", p.IPv4, third)
	}
	netnstest.WaitFor(t, 30*time.Second, "node a without routes to b", func() error {
		if got, err := a.overlayRoutes(unix.AF_INET); err != nil || len(got) != 0 {
			return fmt.Errorf("routes %v, %v; want none", got, err)
		}
		return nil
	})
}
