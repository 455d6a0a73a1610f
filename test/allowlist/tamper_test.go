package allowlist

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/podguard"
)

// snapshot is what a user would look at to see routelet's firewall state in
// the node: the chains and jumps (IPv4 and IPv6), the members of every
// ipset and the pod guards (chains of `table netdev routelet`).
func (c *lan) snapshot() string {
	c.t.Helper()
	var b strings.Builder
	for _, v6 := range []bool{false, true} {
		for _, table := range []string{"raw", "filter", "nat"} {
			out, err := c.iptables(v6, "-t", table, "-S")
			if err != nil {
				c.t.Fatal(err)
			}
			fmt.Fprintf(&b, "# v6=%v %s\n%s", v6, table, out)
		}
	}
	for _, name := range c.setNames() {
		m, _ := c.setMembers(name)
		fmt.Fprintf(&b, "# set %s: %v\n", name, m)
	}
	fmt.Fprintf(&b, "# pod guards: %v\n", c.guardNames())
	return b.String()
}

// guardNames lists the pod guards' chains, sorted.
func (c *lan) guardNames() []string {
	c.t.Helper()
	g, err := c.guards()
	if err != nil {
		c.t.Fatal(err)
	}
	have, err := g.Chains()
	if err != nil {
		c.t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(have))
}

// TestTamperRepair: with routeletd running (default check period, 1 s), a
// flushed ROUTELET-INPUT, a deleted jump, a deleted peer member and a
// destroyed set are each counted as a repair and put back (the time it took
// is logged), without anyone touching a record.
func TestTamperRepair(t *testing.T) { eachBackend(t, testTamperRepair) }

func testTamperRepair(t *testing.T, backend string) {
	c := newLAN(t, backend)
	// IPv4 FORWARD policy DROP, as Docker sets it: routeletd keeps
	// ROUTELET-FORWARD (and its jump, tampered with below) only where
	// FORWARD can drop.
	c.mustIptables("-P", "FORWARD", "DROP")
	c.writeNode("node-b", peerIP, peerBlock)
	c.startDaemon("--encapsulation=vxlan")
	netnstest.Eventually(t, 5*time.Second, "peer in routelet-vxlan-peers", func() bool {
		m, _ := c.setMembers("routelet-vxlan-peers")
		return slices.Contains(m, peerIP+"/32")
	})
	want := c.snapshot()
	for _, s := range []string{"-A INPUT -j ROUTELET-INPUT", "-A ROUTELET-INPUT ! -i cali+ -p udp", "-A FORWARD -j ROUTELET-FORWARD", "-A ROUTELET-POSTROUTING -m set --match-set routelet-nat-pools src",
		"# set routelet-pools: [" + nodeBlock + " " + peerBlock + "]", "# set routelet-vxlan-peers: [" + peerIP + "/32]"} {
		if !strings.Contains(want, s) {
			t.Fatalf("routeletd's firewall state lacks %q:\n%s", s, want)
		}
	}
	if strings.Contains(want, firewall.PreroutingChain) {
		t.Fatalf("routeletd made %s; the pod source check is on each pod veth's ingress hook:\n%s", firewall.PreroutingChain, want)
	}
	// Left alone, the checks run and change nothing. With legacy each one
	// runs `iptables -t filter -S`, `-t nat -S` and, since the snapshot's
	// read made a raw table, `-t raw -S` per family; with nft, once one
	// check has read the tables, none runs iptables while the nf_tables
	// ruleset stays unchanged.
	writes, execs := c.metric("routelet_allowlist_netlink_writes_total"), c.metric("routelet_allowlist_iptables_execs_total")
	checks := c.metric("routelet_allowlist_check_duration_seconds_count")
	netnstest.Eventually(t, 5*time.Second, "two allowlist checks", func() bool {
		return c.metric("routelet_allowlist_check_duration_seconds_count") >= checks+2
	})
	if w := c.metric("routelet_allowlist_netlink_writes_total"); w != writes || c.snapshot() != want {
		t.Fatalf("clean checks changed something: netlink writes %v → %v", writes, w)
	}
	grew := c.metric("routelet_allowlist_iptables_execs_total") - execs
	if backend == firewall.BackendNFT && grew > 6 || backend == firewall.BackendLegacy && grew < 12 {
		t.Fatalf("two clean checks with %s ran iptables %v times; want at most 6 (nft: one read of the three tables per family) or at least 12 (legacy: 6 per check)", backend, grew)
	}
	t.Logf("two or more clean checks with %s: %v iptables execs", backend, grew)
	if r := c.metric("routelet_allowlist_repairs_total"); r != 0 {
		t.Fatalf("routelet_allowlist_repairs_total = %v before any tampering", r)
	}

	ipsetCmd := func(args ...string) {
		t.Helper()
		if _, err := netnstest.Exec(context.Background(), c.node.NS, "ipset", args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		tamper func()
	}{
		{"flush ROUTELET-INPUT", func() { c.mustIptables("-F", firewall.InputChain) }},
		{"delete the INPUT jump", func() { c.mustIptables("-D", "INPUT", "-j", firewall.InputChain) }},
		{"delete the FORWARD jump", func() { c.mustIptables("-D", "FORWARD", "-j", firewall.ForwardChain) }},
		{"delete a peer from the set", func() { ipsetCmd("del", "routelet-vxlan-peers", peerIP) }},
		{"destroy routelet-pools", func() {
			// The kernel refuses to destroy a set a rule uses: flush the
			// chain that uses it first. The daemon may restore the rule
			// (or nf_tables may release it late) before the destroy, so
			// try again.
			var err error
			for range 20 {
				c.mustIptables("-t", "nat", "-F", firewall.PostroutingChain)
				if _, err = netnstest.Exec(context.Background(), c.node.NS, "ipset", "destroy", "routelet-pools"); err == nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Fatalf("could not destroy routelet-pools: %v", err)
		}},
	} {
		// The repair can come before a snapshot after the tamper could be
		// taken (a snapshot runs iptables and ipset several times), so the
		// tamper shows in the repairs metric rather than in a snapshot.
		repairs := c.metric("routelet_allowlist_repairs_total")
		tc.tamper()
		took := netnstest.Eventually(t, 2*time.Second, tc.name+": repaired", func() bool {
			return c.metric("routelet_allowlist_repairs_total") > repairs && c.snapshot() == want
		})
		t.Logf("%s: repaired after %s", tc.name, took.Round(10*time.Millisecond))
	}
	if r := c.metric("routelet_allowlist_repairs_total"); r < 5 {
		t.Errorf("routelet_allowlist_repairs_total = %v after 5 repaired tamperings", r)
	}
}

// TestCleanup: `routeletd cleanup` after the daemon stopped removes the
// jumps, the ROUTELET-* chains (IPv4 and IPv6), the routelet- sets and a
// pod's guard (the netdev table), and leaves everyone else's rules, chains
// and sets exactly as they were.
func TestCleanup(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) { testCleanup(t, backend, nil, nil) })
}

// TestCleanupWireGuard: the same with encryption on, whose WireGuard
// peers sets (both families) and rules, and the encryption guard with its
// jumps from OUTPUT and ROUTELET-FORWARD, cleanup removes too.
func TestCleanupWireGuard(t *testing.T) {
	eachBackend(t, func(t *testing.T, backend string) {
		testCleanup(t, backend, []string{"--encryption=wireguard"}, []string{"# set routelet-wireguard-peers: [" + peerIP + "/32]", "# set routelet-wireguard-peers-v6:",
			"--dport 51820 -m pkttype --pkt-type unicast -m set --match-set routelet-wireguard-peers src -j ACCEPT",
			"-A OUTPUT -j ROUTELET-ENCRYPT", "-A ROUTELET-FORWARD -j ROUTELET-ENCRYPT",
			"-A ROUTELET-ENCRYPT -o wireguard.cali -j RETURN", "-A ROUTELET-ENCRYPT -m set --match-set routelet-pools-v6 dst -j DROP"})
	})
}

// testCleanup runs the cleanup scenario with routeletd given the extra
// flags, wanting every line of want set up besides the usual ones.
func testCleanup(t *testing.T, backend string, extra, want []string) {
	c := newLAN(t, backend)
	ctx := context.Background()
	// Someone else's state: rules in the built-in chains (one jumping to
	// their own chain; the FORWARD one makes routeletd keep
	// ROUTELET-FORWARD in IPv4), a NAT rule, and sets, one with a
	// look-alike name.
	c.mustIptables("-N", "OTHER-INPUT")
	c.mustIptables("-A", "OTHER-INPUT", "-s", "203.0.113.7/32", "-j", "RETURN")
	c.mustIptables("-A", "INPUT", "-j", "OTHER-INPUT")
	c.mustIptables("-A", "FORWARD", "-s", "203.0.113.0/24", "-j", "ACCEPT")
	c.mustIptables("-t", "nat", "-A", "POSTROUTING", "-s", "10.9.0.0/16", "-j", "MASQUERADE")
	for _, args := range [][]string{{"create", "other-hosts", "hash:ip"}, {"add", "other-hosts", "203.0.113.7"}, {"create", "routeletx", "hash:net"}} {
		if _, err := netnstest.Exec(ctx, c.node.NS, "ipset", args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.iptables(true, "-A", "INPUT", "-s", "2001:db8::7/128", "-j", "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	before := c.snapshot()

	c.writeNode("node-b", peerIP, peerBlock)
	d := c.startDaemon(append([]string{"--encapsulation=vxlan"}, extra...)...)
	c.addPod(t, "cleaned")
	during := c.snapshot()
	for _, s := range append([]string{"-A INPUT -j ROUTELET-INPUT", "-N ROUTELET-FORWARD", "-A POSTROUTING -j ROUTELET-POSTROUTING",
		"# set routelet-pools:", "# set routelet-nat-pools:", "# set routelet-vxlan-peers-v6:", "# pod guards: [cali"}, want...) {
		if !strings.Contains(during, s) {
			t.Fatalf("routeletd did not set up %q:\n%s", s, during)
		}
	}
	if err := d.stop(); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	if c.snapshot() != during {
		t.Fatal("stopping routeletd changed the firewall; it must leave the dataplane in place")
	}

	for i := range 2 { // the second run finds nothing to do and succeeds
		args := append([]string{"cleanup"}, c.routeletdArgs()...)
		if out, err := netnstest.Exec(ctx, c.node.NS, filepath.Join(binDir, "routeletd"), args...); err != nil {
			t.Fatalf("routeletd cleanup (run %d): %v\n%s", i+1, err, out)
		}
		if after := c.snapshot(); after != before {
			t.Fatalf("after routeletd cleanup (run %d) the firewall is not as before routeletd:\nbefore:\n%s\nafter:\n%s", i+1, before, after)
		}
	}
}

// TestPodGuardRepair: on a node upgraded from a routelet that kept the pod
// source check in raw PREROUTING (chain and jump, IPv4 and IPv6), routeletd
// removes them on start. A pod's guard, written by the plugin's ADD, is
// read back on every check: deleted, a rule deleted, an accept inserted
// above its rules or the chain made again as a regular chain, it is put
// back within the check period and counted in
// routelet_repairs_total{object="guard"}, after which it drops a spoofed
// source again. A guard left by a veth deleted without a CNI DEL (kept
// detached by newer kernels) is removed.
func TestPodGuardRepair(t *testing.T) { eachBackend(t, testPodGuardRepair) }

func testPodGuardRepair(t *testing.T, backend string) {
	c := newLAN(t, backend)
	c.rpfOff(t)
	for _, v6 := range []bool{false, true} {
		for _, args := range [][]string{
			{"-t", "raw", "-N", firewall.PreroutingChain},
			{"-t", "raw", "-A", firewall.PreroutingChain, "-i", "cali+", "-m", "rpfilter", "--invert", "-j", "DROP"},
			{"-t", "raw", "-I", "PREROUTING", "1", "-i", "cali+", "-j", firewall.PreroutingChain},
		} {
			if out, err := c.iptables(v6, args...); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
		}
	}
	c.writeNode("node-b", peerIP, peerBlock)
	c.startDaemon("--encapsulation=vxlan")
	netnstest.Eventually(t, 10*time.Second, "the older "+firewall.PreroutingChain+" removed, both families", func() bool {
		for _, v6 := range []bool{false, true} {
			out, err := c.iptables(v6, "-t", "raw", "-S")
			if err != nil || strings.Contains(out, firewall.PreroutingChain) {
				return false
			}
		}
		return true
	})

	pod, ip := c.addPod(t, "guarded")
	names := c.guardNames()
	if len(names) != 1 {
		t.Fatalf("pod guards after ADD: %v, want one", names)
	}
	spec := podguard.Spec{Device: names[0], Addrs: []netip.Addr{netip.MustParseAddr(ip)}}
	g, err := c.guards()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := g.Read(spec, nil); err != nil || st != podguard.OK {
		t.Fatalf("guard of %s after ADD: %v, %v", spec.Device, st, err)
	}
	out4 := listenUDPOn(t, c.outside, "udp4", "9100")
	spoofed := 0
	spoof := func(what string) {
		t.Helper()
		spoofed++
		payload := fmt.Sprintf("spoofed-%d", spoofed)
		before := c.countBefore(spoof4)
		remove := addAddr(t, pod, "198.51.100.7")
		sendUDPFrom(t, pod, "198.51.100.7", net.JoinHostPort(outsideIP, "9100"), []byte(payload))
		remove()
		if from := arrival(t, out4, payload, time.Second); from != "" {
			t.Fatalf("%s: a spoofed datagram reached the outside (from %s)", what, from)
		}
		c.waitDropped(t, spoof4, before, what)
	}
	spoof("before any tampering")

	conn, err := nftables.New(nftables.WithNetNSFd(int(c.node.NS.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Name: podguard.TableName, Family: nftables.TableFamilyNetdev}
	ch := &nftables.Chain{Name: spec.Device, Table: table}
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	const metric = `routelet_repairs_total{object="guard"}`
	for _, tc := range []struct {
		name   string
		tamper func() error
	}{
		{"chain deleted", func() error { conn.DelChain(ch); return conn.Flush() }},
		{"rule deleted", func() error {
			rs, err := conn.GetRules(table, ch)
			if err != nil {
				return err
			}
			if err := conn.DelRule(rs[len(rs)-1]); err != nil {
				return err
			}
			return conn.Flush()
		}},
		{"accept inserted first", func() error {
			conn.InsertRule(&nftables.Rule{Table: table, Chain: ch, Exprs: accept})
			return conn.Flush()
		}},
		{"made again as a regular chain", func() error {
			conn.DelChain(ch)
			conn.AddChain(ch)
			conn.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: accept})
			return conn.Flush()
		}},
	} {
		repairs := c.metric(metric)
		if err := tc.tamper(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		took := netnstest.Eventually(t, 3*time.Second, tc.name+": repaired", func() bool {
			st, err := g.Read(spec, nil)
			return err == nil && st == podguard.OK && c.metric(metric) > repairs
		})
		t.Logf("%s: repaired after %s", tc.name, took.Round(10*time.Millisecond))
		spoof("after " + tc.name)
	}

	// A veth gone without a DEL: its guard goes too (the kernel's doing on
	// 6.1, routeletd's on kernels that keep the chain).
	sh(t, c.node.NS, "ip link add calistale0 type veth peer name calistale1")
	if _, err := g.Ensure(podguard.Spec{Device: "calistale0"}); err != nil {
		t.Fatal(err)
	}
	sh(t, c.node.NS, "ip link del calistale0")
	netnstest.Eventually(t, 3*time.Second, "the guard of a deleted veth removed", func() bool {
		return slices.Equal(c.guardNames(), []string{spec.Device})
	})
}
