package allowlist

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netiptest"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/firewall/firewalltest"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/ipset/ipsettest"
)

var quiet = slog.New(slog.DiscardHandler)

// pfx parses CIDRs.
var pfx = netiptest.Prefixes

// kernelLike makes the fake ipset kernel refuse, as the real one does, to
// destroy a set that a rule in one of the fake tables still names.
func kernelLike(k *ipsettest.Fake, tables ...*firewalltest.FakeTable) {
	k.Inject = func(op, name string) error {
		if op != "destroy" {
			return nil
		}
		for _, t := range tables {
			for _, ch := range []string{firewall.InputChain, firewall.ForwardChain} {
				r, _ := t.Rules("filter", ch)
				for _, spec := range r {
					if strings.Contains(spec, " "+name+" ") {
						return fmt.Errorf("destroy %q: %w", name, ipset.ErrReferenced)
					}
				}
			}
			r, _ := t.Rules("nat", firewall.PostroutingChain)
			for _, spec := range r {
				if strings.Contains(spec, " "+name+" ") {
					return fmt.Errorf("destroy %q: %w", name, ipset.ErrReferenced)
				}
			}
		}
		return nil
	}
}

// setupCfg is what setup configures: every rule on.
var setupCfg = firewall.Config{VXLAN: true, IPIP: true, WireGuard: true, NATOutgoing: true}

func setup(t *testing.T) (*ipsettest.Fake, *firewalltest.FakeTable, *firewalltest.FakeTable, *Manager) {
	t.Helper()
	k, v4, v6 := ipsettest.NewFake(), firewalltest.NewFakeTable(), firewalltest.NewFakeTable()
	kernelLike(k, v4, v6)
	m := New(k, v4, v6, quiet)
	if err := m.SetConfig(setupCfg); err != nil {
		t.Fatal(err)
	}
	if err := m.SetWireGuardPeers(pfx("192.0.2.2/32", "2001:db8::1/128")); err != nil {
		t.Fatal(err)
	}
	peers := pfx("192.0.2.1/32", "192.0.2.2/32", "2001:db8::1/128")
	if err := m.SetVXLANPeers(peers); err != nil {
		t.Fatal(err)
	}
	if err := m.SetIPIPPeers(peers); err != nil {
		t.Fatal(err)
	}
	if err := m.SetPools(pfx("10.244.0.0/16", "fd00:10:244::/48")); err != nil {
		t.Fatal(err)
	}
	return k, v4, v6, m
}

func TestManagerApply(t *testing.T) {
	k, v4, v6, m := setup(t)
	if k.Writes()+v4.Execs()+v6.Execs() != 0 {
		t.Fatal("setters touched the kernel")
	}
	// IPv4 FORWARD drops (as with Docker), IPv6 FORWARD accepts all:
	// ROUTELET-FORWARD only where it matters.
	v4.SetPolicy("filter", "FORWARD", "DROP")
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]netip.Prefix{
		"routelet-vxlan-peers":        pfx("192.0.2.1/32", "192.0.2.2/32"),
		"routelet-vxlan-peers-v6":     pfx("2001:db8::1/128"),
		"routelet-ipip-peers":         pfx("192.0.2.1/32", "192.0.2.2/32"),
		"routelet-wireguard-peers":    pfx("192.0.2.2/32"),
		"routelet-wireguard-peers-v6": pfx("2001:db8::1/128"),
		"routelet-pools":              pfx("10.244.0.0/16"),
		"routelet-pools-v6":           pfx("fd00:10:244::/48"),
		"routelet-nat-pools":          pfx("10.244.0.0/16"),
		"routelet-nat-pools-v6":       pfx("fd00:10:244::/48"),
	}
	if got := k.Snapshot(); len(got) != len(want) {
		t.Fatalf("sets = %v, want %v", got, want)
	} else {
		for name, w := range want {
			if !slices.Equal(got[name], w) {
				t.Fatalf("set %s = %v, want %v", name, got[name], w)
			}
		}
	}
	for _, tc := range []struct {
		tab *firewalltest.FakeTable
		f   ipset.Family
	}{{v4, ipset.IPv4}, {v6, ipset.IPv6}} {
		for _, ch := range firewall.Render(setupCfg, tc.f) {
			got, ok := tc.tab.Rules(ch.Table, ch.Name)
			if ch.OnlyWhileHookCanDrop && tc.f == ipset.IPv6 {
				if ok {
					t.Fatalf("%s %s exists with nothing in %s that can drop", tc.f, ch.Name, ch.Hook)
				}
				continue
			}
			if !ok || !slices.Equal(got, ch.Rules) {
				t.Fatalf("%s %s = %q (exists %v), want %q", tc.f, ch.Name, got, ok, ch.Rules)
			}
		}
	}

	// Nothing changed: no write, no exec.
	before := m.Stats()
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if after := m.Stats(); after != before {
		t.Fatalf("no-change Apply: stats %+v → %+v, want unchanged", before, after)
	}
}

// TestManagerDisableIPIPOrder: turning IPIP off rewrites the input chain
// before the IPIP set is destroyed; while the chain cannot be rewritten the
// set stays.
func TestManagerDisableIPIPOrder(t *testing.T) {
	k, v4, _, m := setup(t)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if err := m.SetConfig(firewall.Config{VXLAN: true, WireGuard: true, NATOutgoing: true}); err != nil {
		t.Fatal(err)
	}
	v4.Inject = func(method, table, chain string) error {
		if method == "Append" {
			return &firewalltest.FakeExitError{Status: 4, Msg: "injected"}
		}
		return nil
	}
	if err := m.Apply(); err == nil {
		t.Fatal("Apply succeeded with iptables failing")
	}
	if _, ok := k.Snapshot()[ipset.IPIPPeers]; !ok {
		t.Fatal("IPIP set destroyed although the chain using it was not rewritten")
	}
	v4.Inject = nil
	if err := m.Apply(); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if _, ok := k.Snapshot()[ipset.IPIPPeers]; ok {
		t.Fatal("IPIP set still present after IPIP was disabled")
	}
	if r, _ := v4.Rules("filter", firewall.InputChain); slices.ContainsFunc(r, func(s string) bool { return strings.Contains(s, "-p 4") }) {
		t.Fatalf("IPIP rules still in %s: %q", firewall.InputChain, r)
	}
}

// TestManagerEncryptionOff: with the WireGuard rules switched off both
// families' WireGuard rules go and then both WireGuard sets; the other
// sets and rules stay.
func TestManagerEncryptionOff(t *testing.T) {
	k, v4, v6, m := setup(t)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	off := setupCfg
	off.WireGuard = false
	if err := m.SetConfig(off); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	got := k.Snapshot()
	for _, name := range []string{ipset.WireGuardPeers, ipset.WireGuardPeers + ipset.V6Suffix} {
		if _, ok := got[name]; ok {
			t.Errorf("set %s still present with the WireGuard rules off", name)
		}
	}
	if _, ok := got[ipset.VXLANPeers]; !ok {
		t.Errorf("sets = %v: the VXLAN peers went too", got)
	}
	for _, tc := range []struct {
		tab *firewalltest.FakeTable
		f   ipset.Family
	}{{v4, ipset.IPv4}, {v6, ipset.IPv6}} {
		r, _ := tc.tab.Rules("filter", firewall.InputChain)
		if want := firewall.Render(off, tc.f)[0].Rules; !slices.Equal(r, want) {
			t.Errorf("%s %s = %q, want %q", tc.f, firewall.InputChain, r, want)
		}
	}
}

// TestManagerPrunesLeftovers: sets an earlier run or configuration left
// (and a crash's scratch set) go on the first Apply; foreign sets stay.
func TestManagerPrunesLeftovers(t *testing.T) {
	k, _, _, m := setup(t)
	if err := m.SetConfig(firewall.Config{VXLAN: true}); err != nil {
		t.Fatal(err)
	}
	k.Put(ipset.IPIPPeers, "", ipset.IPv4)
	k.Put(ipset.WireGuardPeers+ipset.V6Suffix+ipset.TmpSuffix, "", ipset.IPv6)
	k.Put(ipset.Pools+ipset.V6Suffix, "", ipset.IPv6)
	k.Put(ipset.VXLANPeers+ipset.TmpSuffix, "", ipset.IPv4)
	k.Put("kube-proxy-set", "", ipset.IPv4)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(k.Snapshot()))
	if want := []string{"kube-proxy-set", "routelet-vxlan-peers", "routelet-vxlan-peers-v6"}; !slices.Equal(got, want) {
		t.Fatalf("sets = %v, want %v", got, want)
	}
	// Later no-change Applies do not look again.
	before := m.Stats()
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if m.Stats() != before {
		t.Fatal("a no-change Apply read or wrote the kernel")
	}
}

func TestManagerCheckRepairs(t *testing.T) {
	k, v4, _, m := setup(t)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	k.Inject = nil
	_ = k.Destroy(ipset.Pools)
	v4.SetRules("filter", firewall.InputChain)
	n, err := m.Check()
	if err != nil || n != 2 {
		t.Fatalf("Check = %d, %v; want 2 repairs (a set and a chain)", n, err)
	}
	if got := k.Snapshot()[ipset.Pools]; !slices.Equal(got, pfx("10.244.0.0/16")) {
		t.Fatalf("pools after Check = %v", got)
	}
	if n, err := m.Check(); n != 0 || err != nil {
		t.Fatalf("second Check = %d, %v", n, err)
	}
}

// TestManagerCleanCheckExecs: the periodic tamper check of an IPv4 + IPv6
// node costs four iptables execs, one `-S` of the filter and one of the nat
// table per family, and nothing else; with iptables-nft, none at all while
// the nf_tables ruleset is unchanged since the last clean check.
func TestManagerCleanCheckExecs(t *testing.T) {
	for _, tc := range []struct {
		nft   bool
		later int // execs of the clean checks after the first
	}{{false, 6}, {true, 0}} {
		t.Run(fmt.Sprintf("nft=%v", tc.nft), func(t *testing.T) {
			_, v4, v6, m := setup(t)
			v4.NFT, v6.NFT = tc.nft, tc.nft
			if err := m.Apply(); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				before := m.Stats()
				v4.ResetCalls()
				v6.ResetCalls()
				if n, err := m.Check(); n != 0 || err != nil {
					t.Fatalf("clean Check = %d, %v", n, err)
				}
				after := m.Stats()
				want := 6 // raw, filter and nat, per family
				if i > 0 {
					want = tc.later
				}
				execs, reads := after.IptablesExecs-before.IptablesExecs, after.IptablesReads-before.IptablesReads
				if execs != want || reads != want || v4.Calls("ListTable")+v6.Calls("ListTable") != want {
					t.Fatalf("clean Check %d: %d iptables execs (%d reads, %d table reads), want %d table reads",
						i+1, execs, reads, v4.Calls("ListTable")+v6.Calls("ListTable"), want)
				}
			}
		})
	}
}

func TestManagerRejectsBadInput(t *testing.T) {
	k := ipsettest.NewFake()
	m := New(k, firewalltest.NewFakeTable(), nil, quiet)
	if err := m.SetPools([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}); err == nil || !strings.Contains(err.Error(), "0.0.0.0/0") {
		t.Fatalf("SetPools(/0) = %v, want an error naming it", err)
	}
	if err := m.SetConfig(firewall.Config{VXLANPort: 99999}); err == nil || !strings.Contains(err.Error(), "99999") {
		t.Fatalf("SetConfig(port 99999) = %v, want an error naming it", err)
	}
	if err := m.SetConfig(firewall.Config{WireGuard: true, WireGuardPort: 70000}); err == nil || !strings.Contains(err.Error(), "WireGuard port 70000") {
		t.Fatalf("SetConfig(WireGuard port 70000) = %v, want an error naming it", err)
	}
	if err := m.SetWireGuardPeers(pfx("192.0.2.1/32", "::/0")); err == nil || !strings.Contains(err.Error(), "::/0") {
		t.Fatalf("SetWireGuardPeers(::/0) = %v, want an error naming it", err)
	}
	if err := m.SetPeers(ipset.Pools, pfx("192.0.2.1/32")); err == nil || !strings.Contains(err.Error(), `"routelet-pools" is not a peers set`) {
		t.Fatalf("SetPeers(%s) = %v, want it refused, named", ipset.Pools, err)
	}
	// IPv4-only manager: v6 peers are ignored, no -v6 set appears. A nil
	// *FakeTable (typed nil) means "no IPv6" just like a nil interface.
	var noV6 *firewalltest.FakeTable
	m = New(k, firewalltest.NewFakeTable(), noV6, quiet)
	_ = m.SetConfig(firewall.Config{VXLAN: true})
	_ = m.SetVXLANPeers(pfx("2001:db8::1/128", "192.0.2.1/32"))
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	got := k.Snapshot()
	if len(got) != 1 || !slices.Equal(got[ipset.VXLANPeers], pfx("192.0.2.1/32")) {
		t.Fatalf("IPv4-only sets = %v, want only %s with the IPv4 peer", got, ipset.VXLANPeers)
	}
}

func TestCleanup(t *testing.T) {
	k, v4, v6, m := setup(t)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	k.Put("kube-ipvs", "", ipset.IPv4)
	if err := Cleanup(k, v4, v6, quiet); err != nil {
		t.Fatal(err)
	}
	if got := k.Snapshot(); len(got) != 1 {
		t.Fatalf("sets after Cleanup = %v, want only kube-ipvs", got)
	}
	for _, tab := range []*firewalltest.FakeTable{v4, v6} {
		if r, _ := tab.Rules("filter", "INPUT"); len(r) != 0 {
			t.Fatalf("INPUT after Cleanup = %q", r)
		}
	}
}
