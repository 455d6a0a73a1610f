package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// etcdHost is the etcd server's host on the underlay (a's and b's subnet).
var etcdHost = cluster.NodeSpec{Name: "etcd", Host4: "10.0.1.2/24", Host6: "fd00:1::2/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1"}

// etcdPools are the pools `routeletd etcd init` writes: /24 and /120
// blocks, like the file datastore tests' --pod-cidr values.
var etcdPools = []string{"--pool", "10.244.0.0/16", "--block-size", "24", "--pool", "fd00:244::/48", "--block-size-v6", "120"}

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
	requireRoot(t)
	etcdtest.Binary(t)
	tc := buildCluster(t, cluster.Options{Nodes: withoutBlocks(specs...), SharedRecords: true})
	host, err := tc.c.AddHost(etcdHost)
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.Start(t, etcdtest.Options{NetNS: host.CNI.NS, Addr: netip.MustParseAddr(hostAddr(etcdHost.Host4)), TLS: true})
	etcdArgs := []string{"--datastore=etcd", "--etcd-endpoints=" + srv.Endpoints[0],
		"--etcd-ca-file=" + srv.CAFile, "--etcd-cert-file=" + srv.CertFile, "--etcd-key-file=" + srv.KeyFile}
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
