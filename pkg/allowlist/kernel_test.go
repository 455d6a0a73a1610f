package allowlist

import (
	"context"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
)

// TestManagerKernel runs the Manager against the real kernel in a fresh
// namespace: a set a live rule uses is destroyed only after the rule is
// gone, and Cleanup leaves nothing of routelet behind.
func TestManagerKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "network namespaces, ipsets, iptables")
	netnstest.SkipUnlessInstalled(t, "iptables, ipset", "iptables", "ipset")
	n := netnstest.NewFor(t, "rlallow-")
	k, err := ipset.NewNetlinkAt(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ipt4, err := firewall.NewIPTables(ipset.IPv4, firewall.BackendDefault)
	if err != nil {
		t.Fatal(err)
	}
	ipt6, err := firewall.NewIPTables(ipset.IPv6, firewall.BackendDefault)
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := firewall.NetNS{T: ipt4, Path: n.Path()}, firewall.NetNS{T: ipt6, Path: n.Path()}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := netnstest.Exec(context.Background(), n, name, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	m := New(k, v4, v6, quiet)
	_ = m.SetConfig(firewall.Config{VXLAN: true, IPIP: true, WireGuard: true, NATOutgoing: true})
	_ = m.SetVXLANPeers(pfx("192.0.2.1/32", "2001:db8::1/128"))
	_ = m.SetIPIPPeers(pfx("192.0.2.1/32"))
	_ = m.SetWireGuardPeers(pfx("192.0.2.1/32", "2001:db8::1/128"))
	_ = m.SetPools(pfx("10.244.0.0/16", "fd00:10:244::/48"))
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if out := run("iptables", "-S", firewall.InputChain); !strings.Contains(out, "routelet-ipip-peers") {
		t.Fatalf("IPIP rule missing:\n%s", out)
	}
	if out := run("ip6tables", "-t", "nat", "-S", firewall.PostroutingChain); !strings.Contains(out, "routelet-pools-v6") {
		t.Fatalf("IPv6 masquerade rule missing:\n%s", out)
	}
	// The longest name routelet uses (its scratch set is at the kernel's
	// limit): created, used by the IPv6 WireGuard rule, a flushed member
	// put back by the check.
	const wg6 = ipset.WireGuardPeers + ipset.V6Suffix
	if out := run("ip6tables", "-S", firewall.InputChain); !strings.Contains(out, "--dport 51820 -m pkttype --pkt-type unicast -m set --match-set "+wg6+" src -j ACCEPT") {
		t.Fatalf("IPv6 WireGuard rule missing:\n%s", out)
	}
	run("ipset", "flush", wg6)
	if n, err := m.Check(); n != 1 || err != nil {
		t.Fatalf("Check after flushing %s = %d, %v; want 1 repair", wg6, n, err)
	}
	if out := run("ipset", "list", wg6); !strings.Contains(out, "2001:db8::1") {
		t.Fatalf("%s not repaired:\n%s", wg6, out)
	}

	// IPIP off: the rule goes first, then the set (the kernel would refuse
	// the other order).
	_ = m.SetConfig(firewall.Config{VXLAN: true, NATOutgoing: true})
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if out := run("ipset", "list", "-n"); strings.Contains(out, ipset.IPIPPeers) {
		t.Fatalf("IPIP set still present after IPIP was turned off:\n%s", out)
	}
	if n, err := m.Check(); n != 0 || err != nil {
		t.Fatalf("Check after Apply = %d, %v; want nothing to repair", n, err)
	}

	if err := Cleanup(k, v4, v6, quiet); err != nil {
		t.Fatal(err)
	}
	if out := run("ipset", "list", "-n"); strings.TrimSpace(out) != "" {
		t.Fatalf("sets left after Cleanup:\n%s", out)
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat"} {
			if out := run(bin, "-t", table, "-S"); strings.Contains(out, "ROUTELET") {
				t.Fatalf("%s -t %s still mentions routelet after Cleanup:\n%s", bin, table, out)
			}
		}
	}
}
