package allowlist

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/ipset/rules"
)

// snapshot is what a user would look at to see routelet's firewall state in
// the node: the chains and jumps (IPv4 and IPv6) and the members of every
// ipset.
func (c *cluster) snapshot() string {
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
	return b.String()
}

// TestTamperRepair: with routeletd running (default check period, 1 s), a
// flushed ROUTELET-INPUT, a deleted jump, a deleted peer member and a
// destroyed set are each counted as a repair and put back (the time it took
// is logged), without anyone touching a record.
func TestTamperRepair(t *testing.T) { eachBackend(t, testTamperRepair) }

func testTamperRepair(t *testing.T, backend string) {
	c := newCluster(t, backend)
	c.writeNode("node-b", peerIP, peerBlock)
	c.startDaemon("--encapsulation=vxlan")
	netnstest.Eventually(t, 5*time.Second, "peer in routelet-vxlan-peers", func() bool {
		m, _ := c.setMembers("routelet-vxlan-peers")
		return slices.Contains(m, peerIP+"/32")
	})
	want := c.snapshot()
	for _, s := range []string{"-A INPUT -j ROUTELET-INPUT", "-A ROUTELET-INPUT ! -i cali+ -p udp", "-A ROUTELET-POSTROUTING -m set --match-set routelet-nat-pools src",
		"-A PREROUTING -i cali+ -j ROUTELET-PREROUTING", "-A ROUTELET-PREROUTING -i cali+ -m rpfilter --invert -j DROP",
		"# set routelet-pools: [" + nodeBlock + " " + peerBlock + "]", "# set routelet-vxlan-peers: [" + peerIP + "/32]"} {
		if !strings.Contains(want, s) {
			t.Fatalf("routeletd's firewall state lacks %q:\n%s", s, want)
		}
	}
	// Left alone, the checks run and change nothing. With legacy each one
	// runs `iptables -t raw -S`, `-t filter -S` and `-t nat -S` per family;
	// with nft, once one check has read the tables, none runs iptables
	// while the nf_tables ruleset stays unchanged.
	writes, execs := c.metric("routelet_allowlist_netlink_writes_total"), c.metric("routelet_allowlist_iptables_execs_total")
	checks := c.metric("routelet_allowlist_check_duration_seconds_count")
	netnstest.Eventually(t, 5*time.Second, "two allowlist checks", func() bool {
		return c.metric("routelet_allowlist_check_duration_seconds_count") >= checks+2
	})
	if w := c.metric("routelet_allowlist_netlink_writes_total"); w != writes || c.snapshot() != want {
		t.Fatalf("clean checks changed something: netlink writes %v → %v", writes, w)
	}
	grew := c.metric("routelet_allowlist_iptables_execs_total") - execs
	if backend == rules.BackendNFT && grew > 6 || backend == rules.BackendLegacy && grew < 12 {
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
		{"flush ROUTELET-INPUT", func() { c.mustIptables("-F", rules.InputChain) }},
		{"flush ROUTELET-PREROUTING", func() { c.mustIptables("-t", "raw", "-F", rules.PreroutingChain) }},
		{"delete the raw PREROUTING jump", func() { c.mustIptables("-t", "raw", "-D", "PREROUTING", "-i", "cali+", "-j", rules.PreroutingChain) }},
		{"delete the INPUT jump", func() { c.mustIptables("-D", "INPUT", "-j", rules.InputChain) }},
		{"delete the FORWARD jump", func() { c.mustIptables("-D", "FORWARD", "-j", rules.ForwardChain) }},
		{"delete a peer from the set", func() { ipsetCmd("del", "routelet-vxlan-peers", peerIP) }},
		{"destroy routelet-pools", func() {
			// The kernel refuses to destroy a set a rule uses: flush the
			// chain that uses it first. The daemon may restore the rule
			// (or nf_tables may release it late) before the destroy, so
			// try again.
			var err error
			for range 20 {
				c.mustIptables("-t", "nat", "-F", rules.PostroutingChain)
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
	if r := c.metric("routelet_allowlist_repairs_total"); r < 7 {
		t.Errorf("routelet_allowlist_repairs_total = %v after 7 repaired tamperings", r)
	}
}

// TestCleanup: `routeletd cleanup` after the daemon stopped removes the
// jumps, the ROUTELET-* chains (IPv4 and IPv6) and the routelet- sets, and
// leaves everyone else's rules, chains and sets exactly as they were.
func TestCleanup(t *testing.T) { eachBackend(t, testCleanup) }

func testCleanup(t *testing.T, backend string) {
	c := newCluster(t, backend)
	ctx := context.Background()
	// Someone else's state: rules in the built-in chains (one jumping to
	// their own chain), a NAT rule, and sets, one with a look-alike name.
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
	d := c.startDaemon("--encapsulation=vxlan")
	during := c.snapshot()
	for _, s := range []string{"-A INPUT -j ROUTELET-INPUT", "-N ROUTELET-FORWARD", "-A POSTROUTING -j ROUTELET-POSTROUTING", "-A PREROUTING -i cali+ -j ROUTELET-PREROUTING",
		"# set routelet-pools:", "# set routelet-nat-pools:", "# set routelet-vxlan-peers-v6:"} {
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
