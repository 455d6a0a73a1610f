package allowlist

import (
	"fmt"
	"net/netip"
	"os/exec"
	"testing"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
)

// benchPeers is the size of the VXLAN peer set in the benchmarks.
const benchPeers = 5000

// peers returns n distinct /32 peers in 10.0.0.0/8, the first one shifted by
// shift to make a one-member change.
func peers(n, shift int) []netip.Prefix {
	out := make([]netip.Prefix, n)
	for i := range n {
		j := i
		if i == 0 {
			j += shift
		}
		j += 1 << 20 // avoid 10.0.0.0
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(j >> 16), byte(j >> 8), byte(j)}), 32)
	}
	return out
}

// benchNode is a fresh namespace with a Manager over real netlink and
// backend's iptables binary, VXLAN + NAT outgoing, IPv4 only, with
// benchPeers VXLAN peers.
type benchNode struct {
	m    *Manager
	k    *ipset.Netlink
	done func()
}

func newBenchNode(b *testing.B, backend string) *benchNode {
	b.Helper()
	return newBenchNodeN(b, backend, benchPeers)
}

// newBenchNodeN is newBenchNode with n VXLAN peers.
func newBenchNodeN(b *testing.B, backend string, n int) *benchNode {
	b.Helper()
	netnstest.SkipUnlessRoot(b, "network namespaces, ipsets, iptables")
	bin, err := firewall.Binary(ipset.IPv4, backend)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := exec.LookPath(bin); err != nil {
		b.Skipf("%s not installed", bin)
	}
	ns, err := netnstest.New("rlbench-")
	if err != nil {
		b.Fatal(err)
	}
	k, err := ipset.NewNetlinkAt(ns.Path())
	if err != nil {
		netnstest.Remove(ns)
		b.Fatal(err)
	}
	ipt, err := firewall.NewIPTables(ipset.IPv4, backend)
	if err != nil {
		k.Close()
		netnstest.Remove(ns)
		b.Fatal(err)
	}
	m := New(k, firewall.NetNS{T: ipt, Path: ns.Path()}, nil, quiet)
	_ = m.SetConfig(firewall.Config{VXLAN: true, NATOutgoing: true})
	_ = m.SetVXLANPeers(peers(n, 0))
	_ = m.SetPools([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")})
	return &benchNode{m: m, k: k, done: func() { k.Close(); netnstest.Remove(ns) }}
}

// report adds the kernel calls made between before and now, per op.
func report(b *testing.B, m *Manager, before Stats) {
	after := m.Stats()
	n := float64(b.N)
	b.ReportMetric(float64(after.NetlinkWrites-before.NetlinkWrites)/n, "netlink-writes/op")
	b.ReportMetric(float64(after.NetlinkReads-before.NetlinkReads)/n, "netlink-reads/op")
	b.ReportMetric(float64(after.IptablesExecs-before.IptablesExecs-(after.IptablesReads-before.IptablesReads))/n, "iptables-writes/op")
	b.ReportMetric(float64(after.IptablesReads-before.IptablesReads)/n, "iptables-reads/op")
}

// BenchmarkAllowlist measures a 5,000-member peer set: the first full
// Apply (sets built and swapped in, chains created), a one-member change, a
// no-change Apply and a no-drift Check (the periodic tamper check / resync)
// with each backend.
func BenchmarkAllowlist(b *testing.B) {
	b.Run("full-apply", func(b *testing.B) {
		var total Stats
		for range b.N {
			b.StopTimer()
			node := newBenchNode(b, firewall.BackendDefault)
			before := node.m.Stats()
			b.StartTimer()
			if err := node.m.Apply(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			after := node.m.Stats()
			total.NetlinkWrites += after.NetlinkWrites - before.NetlinkWrites
			total.NetlinkReads += after.NetlinkReads - before.NetlinkReads
			total.IptablesExecs += after.IptablesExecs - before.IptablesExecs
			total.IptablesReads += after.IptablesReads - before.IptablesReads
			node.done()
		}
		n := float64(b.N)
		b.ReportMetric(float64(total.NetlinkWrites)/n, "netlink-writes/op")
		b.ReportMetric(float64(total.NetlinkReads)/n, "netlink-reads/op")
		b.ReportMetric(float64(total.IptablesExecs-total.IptablesReads)/n, "iptables-writes/op")
		b.ReportMetric(float64(total.IptablesReads)/n, "iptables-reads/op")
	})

	steady := func(b *testing.B, backend string, check bool, op func(m *Manager, i int) error) {
		steadyN(b, backend, benchPeers, check, op)
	}
	b.Run("one-member-change", func(b *testing.B) {
		steady(b, firewall.BackendDefault, false, func(m *Manager, i int) error {
			if err := m.SetVXLANPeers(peers(benchPeers, 1<<19+i)); err != nil {
				return err
			}
			return m.Apply()
		})
	})
	b.Run("no-change-apply", func(b *testing.B) {
		steady(b, firewall.BackendDefault, false, func(m *Manager, _ int) error {
			if err := m.SetVXLANPeers(peers(benchPeers, 0)); err != nil {
				return err
			}
			return m.Apply()
		})
	})
	// A no-drift Check after a clean one: legacy reads both tables each
	// time; nft finds the nf_tables generation unchanged and reads none.
	// With 5 peers (a small cluster) the check is mostly the fixed cost of
	// its netlink exchanges.
	check := func(m *Manager, _ int) error {
		n, err := m.Check()
		if err == nil && n != 0 {
			return fmt.Errorf("check repaired %d things in a steady state", n)
		}
		return err
	}
	for _, backend := range []string{firewall.BackendNFT, firewall.BackendLegacy} {
		b.Run("check-no-drift/"+backend, func(b *testing.B) { steady(b, backend, true, check) })
	}
	b.Run("check-no-drift-5-peers/"+firewall.BackendNFT, func(b *testing.B) { steadyN(b, firewall.BackendNFT, 5, true, check) })
}

// steadyN measures op with n VXLAN peers after a full Apply and, with
// check, one clean Check (the state of a daemon between changes).
func steadyN(b *testing.B, backend string, n int, check bool, op func(m *Manager, i int) error) {
	node := newBenchNodeN(b, backend, n)
	defer node.done()
	if err := node.m.Apply(); err != nil {
		b.Fatal(err)
	}
	if check {
		if _, err := node.m.Check(); err != nil {
			b.Fatal(err)
		}
	}
	before := node.m.Stats()
	b.ResetTimer()
	for i := range b.N {
		if err := op(node.m, i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, node.m, before)
}
