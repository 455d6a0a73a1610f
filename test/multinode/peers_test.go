package multinode

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/state"
)

// healthArgs serve /readyz and /metrics inside each node (every node has
// its own loopback).
var healthArgs = []string{"--health-addr=127.0.0.1:9099"}

// httpGet fetches url from inside n and returns the status code and body.
var httpGet = netnstest.HTTPGet

// metricLine reports whether n's /metrics serves exactly line.
func (n *node) metricLine(line string) bool {
	code, body, err := httpGet(n.CNI.NS, "http://127.0.0.1:9099/metrics")
	return err == nil && code == http.StatusOK && slices.Contains(strings.Split(body, "\n"), line)
}

// refusedMetric is the refusal gauge's line for one value.
func refusedMetric(node, field, value string) string {
	return fmt.Sprintf(`routelet_peer_values_refused{field=%q,node=%q,value=%q} 1`, field, node, value)
}

// baseRoutes returns every main-table route of n (both families) except
// the overlay's (routelet protocol with a gateway): the node's own routes,
// its connected and default routes, the pod routes and blackholes.
func (n *node) baseRoutes() ([]string, error) {
	var out []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := n.nl.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if int(r.Protocol) == routeProto && r.Gw != nil {
				continue
			}
			dev := ""
			if l, err := n.nl.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			dst := "0.0.0.0/0"
			if fam == netlink.FAMILY_V6 {
				dst = "::/0"
			}
			if r.Dst != nil {
				dst = r.Dst.String()
			}
			out = append(out, fmt.Sprintf("%s via %v dev %s proto %d scope %d type %d", dst, r.Gw, dev, r.Protocol, r.Scope, r.Type))
		}
	}
	slices.Sort(out)
	return out, nil
}

// setMembers returns the members of ipset name in n.
func (n *node) setMembers(name string) []string {
	m, _ := netnstest.IPSetMembers(n.CNI.NS, name)
	return m
}

// putRecord writes rec into n's nodes/ directory, as copying it there would.
func putRecord(t *testing.T, n *node, rec state.Node) {
	t.Helper()
	rec.Version = state.RecordVersion
	if rec.Updated.IsZero() {
		rec.Updated = time.Now().UTC()
	}
	if err := n.Store.PutNode(&rec); err != nil {
		t.Fatal(err)
	}
}

// stranger is a peer record for a host on a's underlay subnet that no
// other record names, dual-stack, with one good block per family.
func stranger(name string, extraBlocks ...string) state.Node {
	return state.Node{Name: name, HostIPv4: "10.0.1.77", HostIPv6: "fd00:1::77",
		Blocks:  append(slices.Clone(extraBlocks), "10.244.77.0/24", "fd00:244:77::/120"),
		VTEPMAC: "02:00:00:00:77:04", VTEPMACv6: "02:00:00:00:77:06", TunnelIPv4: "10.244.77.0", TunnelIPv6: "fd00:244:77::"}
}

// withStranger is want plus what node a holds for stranger's good blocks.
func withStranger(want dataplane) dataplane {
	d := want
	d.Routes4 = append(slices.Clone(d.Routes4), fmt.Sprintf("10.244.77.0/24 via 10.244.77.0 dev vxlan.calico onlink mtu %d", mtuV4))
	d.Routes6 = append(slices.Clone(d.Routes6), fmt.Sprintf("fd00:244:77::/120 via fd00:244:77:: dev vxlan-v6.calico onlink mtu %d", mtuV6))
	d.Neigh4 = append(slices.Clone(d.Neigh4), "10.244.77.0 lladdr 02:00:00:00:77:04")
	d.FDB4 = append(slices.Clone(d.FDB4), "02:00:00:00:77:04 dst 10.0.1.77")
	d.Neigh6 = append(slices.Clone(d.Neigh6), "fd00:244:77:: lladdr 02:00:00:00:77:06")
	d.FDB6 = append(slices.Clone(d.FDB6), "02:00:00:00:77:06 dst fd00:1::77")
	for _, s := range []*[]string{&d.Routes4, &d.Routes6, &d.Neigh4, &d.FDB4, &d.Neigh6, &d.FDB6} {
		slices.Sort(*s)
	}
	return d
}

// TestHostilePeerBlocks: a peer record claiming a block that is not pod
// space — every address, half of it, the underlay subnet, another peer's
// host IP, our host IP, loopback, link-local, multicast, our own block —
// gets no route for that block: the node's default and connected routes
// (and every other route it had) stay as they were, the good peers' routes,
// ARP and FDB entries and allowlist members stay, the rest of the hostile
// record (its good blocks) is programmed, and the log and
// routelet_peer_values_refused name the record and the value.
func TestHostilePeerBlocks(t *testing.T) {
	c := newCluster(t, append([]string{"--encapsulation=vxlan"}, healthArgs...)...)
	c.checkAll("vxlan")
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	good := expected(a, "vxlan", []*node{b, cn})
	before, err := a.baseRoutes()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0.0.0.0/0 via 10.0.1.1 dev eth0", "10.0.1.0/24 via <nil> dev eth0", "::/0 via fd00:1::1 dev eth0"} {
		if !slices.ContainsFunc(before, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Fatalf("node a lacks its %q route before the test:\n%s", want, strings.Join(before, "\n"))
		}
	}
	peerSet := []string{"10.0.1.11", "10.0.2.10"} // b and c may send VXLAN

	for _, tc := range []struct {
		name, block string
	}{
		{"every address", "0.0.0.0/0"},
		{"half of every address", "128.0.0.0/1"},
		{"the underlay subnet", "10.0.1.0/24"},
		{"peer c's host IP", "10.0.2.8/30"},
		{"our host IP", "10.0.1.8/30"},
		{"loopback", "127.0.0.0/8"},
		{"link-local", "169.254.0.0/16"},
		{"multicast", "224.0.0.0/4"},
		{"IPv6 link-local", "fe80::/10"},
		{"our own block", "10.244.1.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &testCluster{t: t, c: c.c, nodes: c.nodes}
			putRecord(t, a, stranger("hostile", tc.block))
			// The record's good blocks are routed: it was read and the
			// rest of it works.
			c.waitDataplane(a, 10*time.Second, "hostile record claiming "+tc.block, withStranger(good))
			after, err := a.baseRoutes()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(after, before) {
				t.Errorf("node a's own routes changed by a record claiming %s:\nbefore:\n%s\nafter:\n%s",
					tc.block, strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
			if got, want := a.setMembers("routelet-vxlan-peers"), []string{"10.0.1.11", "10.0.1.77", "10.0.2.10"}; !slices.Equal(got, want) {
				t.Errorf("routelet-vxlan-peers = %v, want %v", got, want)
			}
			pools := a.setMembers("routelet-pools")
			for _, p := range []string{"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "10.244.77.0/24"} {
				if !slices.Contains(pools, p) {
					t.Errorf("routelet-pools = %v, lacks %s", pools, p)
				}
			}
			if netip.MustParsePrefix(tc.block).Addr().Is4() && tc.block != "10.244.1.0/24" && slices.Contains(pools, tc.block) {
				t.Errorf("routelet-pools = %v, holds the refused %s", pools, tc.block)
			}
			line := refusedMetric("hostile", "block", tc.block)
			netnstest.Eventually(t, 5*time.Second, line+" in node a's /metrics", func() bool { return a.metricLine(line) })
			if log := a.LogTail(1 << 20); !strings.Contains(log, "node=hostile field=block value="+tc.block) {
				t.Errorf("no log line names node hostile and block %s:\n%s", tc.block, log)
			}
			if err := a.Store.DeleteNode("hostile"); err != nil {
				t.Fatal(err)
			}
			c.waitDataplane(a, 10*time.Second, "after the hostile record was removed", good)
		})
	}
	if got := a.setMembers("routelet-vxlan-peers"); !slices.Equal(got, peerSet) {
		t.Errorf("routelet-vxlan-peers at the end = %v, want %v", got, peerSet)
	}
	if out, err := a.Pods[0].Ping(t.Context(), cn.Pods[0].IPv4); err != nil {
		t.Errorf("pod a → pod c after the hostile records:\n%s", out)
	}
}

// TestPeerRecordWithOurIdentity: a peer record carrying our VTEP MAC, our
// host IP or our tunnel address is refused whole: none of its blocks,
// neighbour or FDB entries and no allowlist member appear, and the other
// peers are untouched.
func TestPeerRecordWithOurIdentity(t *testing.T) {
	c := newCluster(t, append([]string{"--encapsulation=vxlan"}, healthArgs...)...)
	c.checkAll("vxlan")
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	good := expected(a, "vxlan", []*node{b, cn})
	for _, tc := range []struct {
		name   string
		change func(*state.Node)
	}{
		{"our VTEP MAC", func(n *state.Node) { n.VTEPMAC = overlay.VTEPMAC("a", 4).String() }},
		{"our IPv6 VTEP MAC", func(n *state.Node) { n.VTEPMACv6 = overlay.VTEPMAC("a", 6).String() }},
		{"our host IP", func(n *state.Node) { n.HostIPv4 = "10.0.1.10" }},
		{"our tunnel address", func(n *state.Node) { n.TunnelIPv4 = "10.244.1.0" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &testCluster{t: t, c: c.c, nodes: c.nodes}
			rec := stranger("impostor")
			tc.change(&rec)
			putRecord(t, a, rec)
			line := refusedMetric("impostor", "record", "impostor")
			netnstest.Eventually(t, 10*time.Second, line+" in node a's /metrics", func() bool { return a.metricLine(line) })
			c.waitDataplane(a, 5*time.Second, "record with "+tc.name, good)
			if got := a.setMembers("routelet-vxlan-peers"); !slices.Equal(got, []string{"10.0.1.11", "10.0.2.10"}) {
				t.Errorf("routelet-vxlan-peers = %v, want b's and c's host IPs only", got)
			}
			if pools := a.setMembers("routelet-pools"); slices.Contains(pools, "10.244.77.0/24") {
				t.Errorf("routelet-pools = %v, holds the refused record's block", pools)
			}
			if log := a.LogTail(1 << 20); !strings.Contains(log, "node=impostor field=record") {
				t.Errorf("no log line names the refused record impostor:\n%s", log)
			}
			if err := a.Store.DeleteNode("impostor"); err != nil {
				t.Fatal(err)
			}
			netnstest.Eventually(t, 10*time.Second, "refusal gone after the record was removed", func() bool { return !a.metricLine(line) })
		})
	}
	if out, err := a.Pods[0].Ping(t.Context(), b.Pods[0].IPv4); err != nil {
		t.Errorf("pod a → pod b after the impostor records:\n%s", out)
	}
}

// TestEstablishedPeerClaim: a newcomer claiming an established peer's
// block (the same block, and an overlapping one) does not get it — even
// though its name sorts first and its record says it is older — and keeps
// its other block; the same holds after node a's daemon restarts with
// both records present.
func TestEstablishedPeerClaim(t *testing.T) {
	flags := append([]string{"--encapsulation=vxlan"}, healthArgs...)
	c := newCluster(t, flags...)
	c.checkAll("vxlan")
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	rec := state.Node{Name: "a0-newcomer", HostIPv4: "10.0.1.78", Blocks: []string{"10.244.2.0/24", "fd00:244:2::/121", "10.244.78.0/24"},
		VTEPMAC: "02:00:00:00:78:04", TunnelIPv4: "10.244.78.0", Updated: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	putRecord(t, a, rec)
	want := expected(a, "vxlan", []*node{b, cn})
	want.Routes4 = append(want.Routes4, fmt.Sprintf("10.244.78.0/24 via 10.244.78.0 dev vxlan.calico onlink mtu %d", mtuV4))
	want.Neigh4 = append(want.Neigh4, "10.244.78.0 lladdr 02:00:00:00:78:04")
	want.FDB4 = append(want.FDB4, "02:00:00:00:78:04 dst 10.0.1.78")
	for _, s := range []*[]string{&want.Routes4, &want.Neigh4, &want.FDB4} {
		slices.Sort(*s)
	}
	check := func(when string) {
		t.Helper()
		c.waitDataplane(a, 10*time.Second, when, want)
		for _, v := range []string{"10.244.2.0/24", "fd00:244:2::/121"} {
			line := refusedMetric("a0-newcomer", "block", v)
			netnstest.Eventually(t, 5*time.Second, when+": "+line, func() bool { return a.metricLine(line) })
		}
		if out, err := a.Pods[0].Ping(t.Context(), b.Pods[0].IPv4); err != nil {
			t.Errorf("%s: pod a → pod b:\n%s", when, out)
		}
	}
	check("newcomer claiming b's block")
	if err := c.c.Restart(context.Background(), a.Node, append(slices.Clone(baseArgs), flags...)...); err != nil {
		t.Fatal(err)
	}
	check("after node a's daemon restarted with both records present")
	if _, err := os.Stat(filepath.Join(a.StateDir, "peer-claims.json")); err != nil {
		t.Errorf("claim ledger: %v", err)
	}
}

// startLone builds a one-node cluster (node a of specs, IPv4 only) whose
// daemon is not started, and returns it with a handle inside the node.
func startLone(t testing.TB) (*cluster.Cluster, *node) {
	t.Helper()
	netnstest.SkipUnlessRoot(t, whyRoot)
	clusterSeq++
	spec := specs[0]
	spec.Host6, spec.Gw6, spec.Block6 = "", "", ""
	c, err := cluster.New(cluster.Options{Prefix: fmt.Sprintf("%s%d-", nsPrefix, clusterSeq), PluginDir: binDir,
		Daemon: filepath.Join(binDir, "routeletd"), WorkDir: t.TempDir(), Nodes: []cluster.NodeSpec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("cluster cleanup: %v", err)
		}
	})
	return c, newNode(t, c.Nodes[0])
}

// runDaemon starts routeletd in n with args (after the node's identity
// flags); it is stopped at cleanup and its log shown if t failed.
func runDaemon(t testing.TB, n *node, args ...string) *netnstest.Buffer {
	t.Helper()
	return startDaemon(t, n, append([]string{"--pod-cidr=" + n.Spec.Block4}, args...)...)
}

// startDaemon starts routeletd in n with its node name, state dir, debug
// logs and a test-sized device check period, then args; it is stopped at
// cleanup and its log shown if t failed.
func startDaemon(t testing.TB, n *node, args ...string) *netnstest.Buffer {
	t.Helper()
	log := &netnstest.Buffer{}
	all := append([]string{"--node-name=" + n.Spec.Name, "--state-dir=" + n.StateDir,
		"--log-level=debug", "--device-check-period=500ms"}, args...)
	d, err := netnstest.StartIn(n.CNI.NS, log, filepath.Join(binDir, "routeletd"), all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.StopOrKill(10 * time.Second)
		if t.Failed() {
			t.Logf("routeletd log:\n%s", log.String())
		}
	})
	return log
}

// waitNotReady waits until n's daemon reports not ready with a reason
// containing want, both in daemon.json and in /readyz (503, reason in the
// body), and returns the reason.
func waitNotReady(t *testing.T, n *node, want string) string {
	t.Helper()
	var reason string
	netnstest.Eventually(t, 30*time.Second, "daemon.json not ready with a reason naming "+want, func() bool {
		st, err := n.Store.ReadDaemonStatus()
		if err != nil {
			return false
		}
		reason = st.Reason
		return !st.Ready && strings.Contains(st.Reason, want)
	})
	netnstest.Eventually(t, 10*time.Second, "/readyz 503 naming "+want, func() bool {
		code, body, err := httpGet(n.CNI.NS, "http://127.0.0.1:9099/readyz")
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, want)
	})
	return reason
}

// TestIPIPWithoutKernelSupport: with --encapsulation ipip on a kernel that
// cannot create ipip links, routeletd is not ready, and says why (naming
// ipip) in daemon.json and /readyz, instead of retrying while reporting
// ready. On a kernel with ipip the same daemon is ready.
func TestIPIPWithoutKernelSupport(t *testing.T) {
	_, n := startLone(t)
	runDaemon(t, n, append([]string{"--encapsulation=ipip"}, healthArgs...)...)
	if err := netnstest.IPIPSupported(); err == nil {
		netnstest.Eventually(t, 30*time.Second, "routeletd ready in ipip mode on a kernel with ipip", func() bool {
			code, _, err := httpGet(n.CNI.NS, "http://127.0.0.1:9099/readyz")
			return err == nil && code == http.StatusOK
		})
		return
	}
	reason := waitNotReady(t, n, "ipip")
	if !strings.Contains(reason, "kernel cannot create ipip links") {
		t.Errorf("not-ready reason %q does not say the kernel lacks ipip", reason)
	}
	// It stays so: later passes do not report ready.
	time.Sleep(2 * time.Second)
	if st, err := n.Store.ReadDaemonStatus(); err != nil || st.Ready {
		t.Errorf("daemon.json after more passes = %+v, %v; want still not ready", st, err)
	}
}

// TestForeignVXLANDevice: a VXLAN device routelet does not own (flannel's
// flannel.1) on our VNI and port makes routeletd not ready with an error
// naming it in daemon.json, /readyz and the log; the device is left alone.
// Once the operator removes it, routeletd creates vxlan.calico and becomes
// ready without a restart.
func TestForeignVXLANDevice(t *testing.T) {
	_, n := startLone(t)
	if out, err := netnstest.Exec(context.Background(), n.CNI.NS, "ip", "link", "add", "flannel.1", "type", "vxlan",
		"id", "4096", "dstport", "4789", "dev", "eth0", "local", "10.0.1.10"); err != nil {
		t.Fatalf("ip link add flannel.1: %v\n%s", err, out)
	}
	log := runDaemon(t, n, append([]string{"--encapsulation=vxlan"}, healthArgs...)...)
	reason := waitNotReady(t, n, "flannel.1")
	if !strings.Contains(reason, "VNI 4096") || !strings.Contains(reason, "4789") {
		t.Errorf("reason %q does not name the VNI and port", reason)
	}
	if !strings.Contains(log.String(), "flannel.1") {
		t.Errorf("log does not name flannel.1:\n%s", log.String())
	}
	l, err := n.nl.LinkByName("flannel.1")
	if err != nil {
		t.Fatalf("flannel.1 gone: %v", err)
	}
	if v, ok := l.(*netlink.Vxlan); !ok || v.VxlanId != 4096 {
		t.Fatalf("flannel.1 changed: %+v", l)
	}
	if err := n.nl.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 30*time.Second, "routeletd ready once flannel.1 was removed", func() bool {
		code, _, err := httpGet(n.CNI.NS, "http://127.0.0.1:9099/readyz")
		st, serr := n.Store.ReadDaemonStatus()
		return err == nil && code == http.StatusOK && serr == nil && st.Ready
	})
	if _, err := n.nl.LinkByName("vxlan.calico"); err != nil {
		t.Errorf("vxlan.calico after flannel.1 was removed: %v", err)
	}
}

// TestVXLANPortInUse: a socket of another program bound to our VXLAN port
// makes routeletd not ready with an error naming the port (the kernel
// refuses to bring vxlan.calico up); once the socket is closed the daemon
// brings the device up and becomes ready without a restart.
func TestVXLANPortInUse(t *testing.T) {
	_, n := startLone(t)
	var conn net.PacketConn
	if err := n.CNI.NS.Do(func(ns.NetNS) error {
		var err error
		conn, err = net.ListenPacket("udp4", "0.0.0.0:4789")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	runDaemon(t, n, append([]string{"--encapsulation=vxlan"}, healthArgs...)...)
	reason := waitNotReady(t, n, "UDP port 4789 is already in use")
	if !strings.Contains(reason, "vxlan.calico") {
		t.Errorf("reason %q does not name our device", reason)
	}
	conn.Close()
	netnstest.Eventually(t, 30*time.Second, "routeletd ready once the port is free", func() bool {
		code, _, err := httpGet(n.CNI.NS, "http://127.0.0.1:9099/readyz")
		l, lerr := n.nl.LinkByName("vxlan.calico")
		return err == nil && code == http.StatusOK && lerr == nil && l.Attrs().Flags&net.FlagUp != 0
	})
}
