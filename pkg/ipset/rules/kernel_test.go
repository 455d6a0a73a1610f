package rules

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/coreos/go-iptables/iptables"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/ipset"
)

// nsTable is the NetNS Table of a test namespace, with the packet counters
// read through the same go-iptables handle.
type nsTable struct {
	NetNS
	ipt *iptables.IPTables
	n   ns.NetNS
}

func (t nsTable) do(f func() error) error { return t.n.Do(func(ns.NetNS) error { return f() }) }

// packets returns the packet counters of chain's rules, in order.
func (t nsTable) packets(table, chain string) (out []uint64, err error) {
	err = t.do(func() error {
		stats, err := t.ipt.StructuredStats(table, chain)
		for _, s := range stats {
			out = append(out, s.Packets)
		}
		return err
	})
	return out, err
}

// fixture is one fresh namespace with routelet's sets and an iptables handle
// for one backend and family inside it.
type fixture struct {
	n    ns.NetNS
	bin  string
	tab  nsTable
	sets *ipset.Sets
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, ipsets and iptables rules")
	}
}

// newFixture creates the namespace (removed at cleanup) and the sets cfg's
// rules use, with members.
func newFixture(t *testing.T, backend string, family ipset.Family, cfg Config, members map[string][]string) *fixture {
	t.Helper()
	needRoot(t)
	bin, err := Binary(family, backend)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("%s not installed (apt-get install iptables): %v", bin, err)
	}
	n, err := netnstest.New("rlrules-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netnstest.Remove(n); err != nil {
			t.Errorf("remove netns: %v", err)
		}
	})
	ipt, err := NewIPTables(family, backend)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ipset.NewNetlinkAt(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	f := &fixture{n: n, bin: bin, tab: nsTable{NetNS: NetNS{T: ipt, Path: n.Path()}, ipt: ipt, n: n}, sets: ipset.NewSets(k, quiet)}
	for _, base := range Sets(cfg, family) {
		var ms []netip.Prefix
		for _, m := range members[base] {
			ms = append(ms, mustPrefix(t, m))
		}
		if err := f.sets.Set(ipset.Name(base, family), family, ms); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.sets.Apply(); err != nil {
		t.Fatal(err)
	}
	return f
}

// run execs the fixture's iptables binary in its namespace.
func (f *fixture) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := netnstest.Exec(context.Background(), f.n, f.bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantKernel checks with the iptables binary, as an operator would, that
// each chain holds the rendered rules and is jumped to exactly once, first.
func (f *fixture) wantKernel(t *testing.T, cfg Config, family ipset.Family) {
	t.Helper()
	for _, ch := range Render(cfg, family) {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(f.run(t, "-t", ch.Table, "-S", ch.Name)), "\n") {
			got = append(got, canonical(l))
		}
		if want := ch.Lines(); !slices.Equal(got, want) {
			t.Fatalf("%s -t %s -S %s =\n%s\nwant\n%s", f.bin, ch.Table, ch.Name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		hook := strings.Split(strings.TrimSpace(f.run(t, "-t", ch.Table, "-S", ch.Hook)), "\n")
		if len(hook) < 2 || hook[1] != "-A "+ch.Hook+" -j "+ch.Name {
			t.Fatalf("%s -t %s -S %s: jump to %s not first:\n%s", f.bin, ch.Table, ch.Hook, ch.Name, strings.Join(hook, "\n"))
		}
		if pos := jumpPositions(hook, ch.Hook, ch.Name); len(pos) != 1 {
			t.Fatalf("%s/%s jumps to %s %d times, want once", ch.Table, ch.Hook, ch.Name, len(pos))
		}
	}
}

func TestChainsKernelBothBackends(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		for _, family := range []ipset.Family{ipset.IPv4, ipset.IPv6} {
			t.Run(backend+"/"+family.String(), func(t *testing.T) {
				testChainsKernel(t, backend, family)
			})
		}
	}
}

func testChainsKernel(t *testing.T, backend string, family ipset.Family) {
	cfg := fullCfg
	f := newFixture(t, backend, family, cfg, nil)
	// Someone else's rules in the built-in chains stay untouched.
	f.run(t, "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
	c := New(f.tab, family, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.wantKernel(t, cfg, family)

	before := c.Stats()
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("clean Check = %d, %v (a rendered rule reads back differently?)", n, err)
	}
	d := c.Stats()
	if d.Writes != before.Writes || d.Reads-before.Reads != 6 {
		t.Fatalf("no-change Apply + clean Check: %d reads, %d writes; want 6 reads (one per chain), 0 writes",
			d.Reads-before.Reads, d.Writes-before.Writes)
	}

	for _, tamper := range [][]string{
		{"-F", InputChain},
		{"-D", "INPUT", "-j", InputChain},
		{"-I", "FORWARD", "1", "-s", docAddr(family), "-j", "DROP"},
		{"-t", "nat", "-A", "POSTROUTING", "-j", PostroutingChain},
		{"-A", ForwardChain, "-j", "DROP"},
	} {
		f.run(t, tamper...)
		n, err := c.Check()
		if err != nil || n == 0 {
			t.Fatalf("after %s %v: Check = %d, %v; want a repair", f.bin, tamper, n, err)
		}
		f.wantKernel(t, cfg, family)
	}
	if got := f.run(t, "-S", "INPUT"); !strings.Contains(got, "--dport 22 -j ACCEPT") {
		t.Fatalf("foreign INPUT rule lost:\n%s", got)
	}

	// Switching encapsulation rewrites the input chain as a whole.
	cfg2 := Config{VXLAN: true, VXLANPort: 8472, NATOutgoing: true}
	if err := c.SetConfig(cfg2); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.wantKernel(t, cfg2, family)

	if err := Cleanup(f.tab, quiet); err != nil {
		t.Fatal(err)
	}
	for _, ch := range Render(cfg2, family) {
		if out := f.run(t, "-t", ch.Table, "-S"); strings.Contains(out, "ROUTELET") {
			t.Fatalf("after Cleanup table %s still mentions routelet:\n%s", ch.Table, out)
		}
	}
	if got := f.run(t, "-S", "INPUT"); !strings.Contains(got, "--dport 22 -j ACCEPT") {
		t.Fatalf("Cleanup removed a foreign INPUT rule:\n%s", got)
	}
	// With the rules gone the sets can go too.
	k, err := ipset.NewNetlinkAt(f.n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := ipset.Cleanup(k, quiet); err != nil {
		t.Fatalf("ipset cleanup after rules cleanup: %v", err)
	}
}

// docAddr returns a documentation address of family.
func docAddr(family ipset.Family) string {
	if family == ipset.IPv6 {
		return "2001:db8::99"
	}
	return "192.0.2.99"
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
