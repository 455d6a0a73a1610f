package firewall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/ipset"
)

// quiet discards the logs of the code under test.
var quiet = slog.New(slog.DiscardHandler)

var fullCfg = Config{VXLAN: true, IPIP: true, WireGuard: true, NATOutgoing: true}

// nsTable is the NetNS Table of a test namespace, with the packet counters
// read through the same go-iptables handle.
type nsTable struct {
	NetNS
	ipt *IPTables
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

// newFixture creates the namespace (removed at cleanup) and the sets cfg's
// rules use, with members.
func newFixture(t *testing.T, backend string, family ipset.Family, cfg Config, members map[string][]string) *fixture {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces, ipsets and iptables rules")
	bin, err := Binary(family, backend)
	if err != nil {
		t.Fatal(err)
	}
	netnstest.SkipUnlessInstalled(t, "iptables", bin)
	n := netnstest.NewFor(t, "rlrules-")
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
// each chain holds the rendered rules and is jumped to exactly once, first;
// an OnlyWhileHookCanDrop chain only where hookDrops (the test set up
// something in its built-in chain that can drop), else that neither it
// nor a jump to it exists.
func (f *fixture) wantKernel(t *testing.T, cfg Config, family ipset.Family, hookDrops bool) {
	t.Helper()
	for _, ch := range Render(cfg, family) {
		if ch.OnlyWhileHookCanDrop && !hookDrops {
			f.wantNoChain(t, ch)
			continue
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(f.run(t, "-t", ch.Table, "-S", ch.Name)), "\n") {
			got = append(got, canonical(l))
		}
		if want := ch.Lines(); !slices.Equal(got, want) {
			t.Fatalf("%s -t %s -S %s =\n%s\nwant\n%s", f.bin, ch.Table, ch.Name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		hook := strings.Split(strings.TrimSpace(f.run(t, "-t", ch.Table, "-S", ch.Hook)), "\n")
		if len(hook) < 2 || hook[1] != ch.JumpLine() {
			t.Fatalf("%s -t %s -S %s: jump to %s not first:\n%s", f.bin, ch.Table, ch.Hook, ch.Name, strings.Join(hook, "\n"))
		}
		if pos, _ := jumpPositions(hook, ch.Hook, ch.Name); len(pos) != 1 {
			t.Fatalf("%s/%s jumps to %s %d times, want once", ch.Table, ch.Hook, ch.Name, len(pos))
		}
	}
}

// wantNoChain checks with the iptables binary that ch does not exist and
// its built-in chain holds no jump to it.
func (f *fixture) wantNoChain(t *testing.T, ch Chain) {
	t.Helper()
	if out, err := netnstest.Exec(context.Background(), f.n, f.bin, "-t", ch.Table, "-S", ch.Name); err == nil {
		t.Fatalf("%s -t %s -S %s: the chain exists:\n%s", f.bin, ch.Table, ch.Name, out)
	}
	if hook := f.run(t, "-t", ch.Table, "-S", ch.Hook); strings.Contains(hook, "-j "+ch.Name) {
		t.Fatalf("%s -t %s -S %s holds a jump to %s:\n%s", f.bin, ch.Table, ch.Hook, ch.Name, hook)
	}
}

// wantTableMatchesChains checks that ListTable, split by chain, gives for
// every chain of the filter and nat tables exactly what `-S <chain>` prints:
// Check's one read per table sees what six per-chain reads would.
func (f *fixture) wantTableMatchesChains(t *testing.T) {
	t.Helper()
	for table, must := range map[string][]string{
		TableFilter: {"INPUT", "FORWARD", "OUTPUT", InputChain, ForwardChain, EncryptChain},
		TableNAT:    {"POSTROUTING", PostroutingChain},
	} {
		lines, err := f.tab.ListTable(table)
		if err != nil {
			t.Fatal(err)
		}
		chains := splitTable(lines)
		for _, ch := range must {
			if _, ok := chains[ch]; !ok {
				t.Fatalf("%s -t %s -S lists no chain %s:\n%s", f.bin, table, ch, strings.Join(lines, "\n"))
			}
		}
		for ch, got := range chains {
			want := strings.Split(strings.TrimSpace(f.run(t, "-t", table, "-S", ch)), "\n")
			if !slices.Equal(got, want) {
				t.Fatalf("%s -t %s -S, chain %s:\n%s\nbut -S %s:\n%s", f.bin, table, ch, strings.Join(got, "\n"), ch, strings.Join(want, "\n"))
			}
		}
	}
}

func TestChainsKernelBothBackends(t *testing.T) { eachBackendFamily(t, testChainsKernel) }

// eachBackendFamily runs test as a subtest per backend (nft, legacy) and
// IP family.
func eachBackendFamily(t *testing.T, test func(t *testing.T, backend string, family ipset.Family)) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		for _, family := range []ipset.Family{ipset.IPv4, ipset.IPv6} {
			t.Run(backend+"/"+family.String(), func(t *testing.T) { test(t, backend, family) })
		}
	}
}

func testChainsKernel(t *testing.T, backend string, family ipset.Family) {
	cfg := fullCfg
	f := newFixture(t, backend, family, cfg, nil)
	// Someone else's rules in the built-in chains stay untouched; a
	// FORWARD policy DROP, as Docker sets, makes ROUTELET-FORWARD wanted.
	f.run(t, "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
	f.run(t, "-P", "FORWARD", "DROP")
	c := New(f.tab, family, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.wantKernel(t, cfg, family, true)
	f.wantTableMatchesChains(t)

	before := c.Stats()
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("clean Check = %d, %v (a rendered rule reads back differently?)", n, err)
	}
	d := c.Stats()
	if d.Writes != before.Writes || d.Reads-before.Reads != 2 {
		t.Fatalf("no-change Apply + clean Check: %d reads, %d writes; want 2 reads (`-S` of filter and nat; no raw table exists), 0 writes",
			d.Reads-before.Reads, d.Writes-before.Writes)
	}

	// A second clean Check: nft's ruleset generation has not moved, so
	// nothing is read; legacy has none and reads the two tables again.
	before = c.Stats()
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("second clean Check = %d, %v", n, err)
	}
	d = c.Stats()
	wantReads, wantUnchanged := 2, 0
	if backend == BackendNFT {
		wantReads, wantUnchanged = 0, 1
	}
	if d.Reads-before.Reads != wantReads || d.Unchanged-before.Unchanged != wantUnchanged || d.Writes != before.Writes {
		t.Fatalf("second clean Check (%s): %d reads, %d unchanged, %d writes; want %d, %d, 0",
			backend, d.Reads-before.Reads, d.Unchanged-before.Unchanged, d.Writes-before.Writes, wantReads, wantUnchanged)
	}

	for _, tamper := range [][]string{
		{"-F", InputChain},
		{"-D", "INPUT", "-j", InputChain},
		{"-I", "FORWARD", "1", "-s", docAddr(family), "-j", "DROP"},
		{"-t", "nat", "-A", "POSTROUTING", "-j", PostroutingChain},
		{"-A", ForwardChain, "-j", "DROP"},
		{"-t", "nat", "-I", "POSTROUTING", "1", "-j", "RETURN"},
		{"-F", EncryptChain},
		{"-D", "OUTPUT", "-j", EncryptChain},
		{"-D", ForwardChain, "1"}, // the guard's jump
	} {
		// Each tamper follows a clean Check, so on nft the next Check
		// starts from an unchanged-generation shortcut it must not take.
		if n, err := c.Check(); n != 0 || err != nil {
			t.Fatalf("before %v: clean Check = %d, %v", tamper, n, err)
		}
		f.run(t, tamper...)
		n, err := c.Check()
		if err != nil || n == 0 {
			t.Fatalf("after %s %v: Check = %d, %v; want a repair", f.bin, tamper, n, err)
		}
		f.wantKernel(t, cfg, family, true)
	}
	if got := f.run(t, "-S", "INPUT"); !strings.Contains(got, "--dport 22 -j ACCEPT") {
		t.Fatalf("foreign INPUT rule lost:\n%s", got)
	}
	f.wantTableMatchesChains(t)

	// Switching encapsulation rewrites the input chain as a whole.
	cfg2 := Config{VXLAN: true, VXLANPort: 8472, NATOutgoing: true}
	if err := c.SetConfig(cfg2); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.wantKernel(t, cfg2, family, true)

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

// TestListTableRunsLikeGoIPTables: ListTable runs the binary go-iptables
// runs, with the lock-wait arguments it appends (compared on the command
// lines both report when iptables fails), on both backends.
func TestListTableRunsLikeGoIPTables(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			f := newFixture(t, backend, ipset.IPv4, Config{}, nil)
			_, err := f.tab.ListTable("nosuchtable")
			var ours *ExitError
			if !errors.As(err, &ours) || ours.Status == 0 {
				t.Fatalf("ListTable(nosuchtable) = %v, want an exit status", err)
			}
			var gerr error
			_ = f.tab.do(func() error { _, gerr = f.tab.ipt.IPTables.List("nosuchtable", "INPUT"); return nil })
			if gerr == nil {
				t.Fatal("go-iptables listed nosuchtable")
			}
			t.Logf("go-iptables: %v\nListTable:   %v", gerr, err)
			// go-iptables: "running [<path> -t nosuchtable -S INPUT <wait>…]: …"
			want := fmt.Sprintf("running %v:", append(slices.Clone(ours.Args[:4]), append([]string{"INPUT"}, ours.Args[4:]...)...))
			if !strings.HasPrefix(gerr.Error(), want) {
				t.Fatalf("go-iptables ran %q; ListTable ran %q (want the same binary and wait flags)", gerr, ours.Args)
			}
			if len(ours.Args) < 5 || ours.Args[4] != "--wait" {
				t.Fatalf("ListTable ran %q, want --wait", ours.Args)
			}
		})
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

// TestPairReadsItsNamespacesGeneration: the tables of NewIPTablesPair read
// the nf_tables generation of the namespace they were made in over their
// kept socket, from any thread: it is the value a fresh read there finds,
// and it changes when a rule is added there, of either family.
func TestPairReadsItsNamespacesGeneration(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces, ipsets and iptables rules")
	bin, err := Binary(ipset.IPv4, BackendNFT)
	if err != nil {
		t.Fatal(err)
	}
	netnstest.SkipUnlessInstalled(t, "iptables", bin)
	n := netnstest.NewFor(t, "rlrules-")
	var v4, v6 Table
	if err := n.Do(func(ns.NetNS) error { v4, v6, _, err = NewIPTablesPair(BackendNFT); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ClosePair(v4, v6) }) // the socket would keep the namespace alive
	// fresh reads the generation in n on a socket of its own.
	fresh := func() uint32 {
		t.Helper()
		var gen uint32
		if err := n.Do(func(ns.NetNS) error { gen, err = nlutil.NFTGeneration(nil); return err }); err != nil {
			t.Fatal(err)
		}
		return gen
	}
	kept := func(tab Table) uint32 {
		t.Helper()
		gen, ok, err := tab.Generation() // on this thread, outside n
		if err != nil || !ok {
			t.Fatalf("Generation: %d, %v, %v", gen, ok, err)
		}
		return gen
	}
	tables := []Table{v4}
	if v6 != nil {
		tables = append(tables, v6)
	}
	for i, args := range [][]string{{"-t", "filter", "-N", "RLGENTEST"}, {"-t", "filter", "-A", "RLGENTEST", "-j", "RETURN"}} {
		before := fresh()
		for _, tab := range tables {
			if g := kept(tab); g != before {
				t.Fatalf("step %d: kept socket reads generation %d, a fresh read in the namespace %d", i, g, before)
			}
		}
		if _, err := netnstest.Exec(context.Background(), n, bin, args...); err != nil {
			t.Fatal(err)
		}
		for _, tab := range tables {
			if g := kept(tab); g == before {
				t.Fatalf("step %d: generation still %d after %v in the namespace", i, g, args)
			}
		}
	}
}

// nftHasChain reports whether `nft list ruleset` in the fixture's
// namespace shows chain in table of family's nf_tables family (ip, ip6).
func (f *fixture) nftHasChain(t *testing.T, family ipset.Family, table, chain string) bool {
	t.Helper()
	out, err := netnstest.Exec(context.Background(), f.n, "nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	fam := "ip"
	if family == ipset.IPv6 {
		fam = "ip6"
	}
	in := false
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "table ") {
			in = l == "table "+fam+" "+table+" {"
		}
		if in && l == "chain "+chain+" {" {
			return true
		}
	}
	return false
}

// TestForwardOnlyWhereItCanDropKernel: with the FORWARD policy ACCEPT and
// nothing in FORWARD, routelet keeps no ROUTELET-FORWARD and no jump to it
// and, with iptables-nft, no FORWARD base chain (whose hook every
// forwarded packet would pass); an older routelet's chain and jump are
// removed by one Check, the base chain with them; `-P FORWARD DROP` makes
// the next Check install both, `-P FORWARD ACCEPT` the next remove them
// again. Both backends, both families.
func TestForwardOnlyWhereItCanDropKernel(t *testing.T) {
	eachBackendFamily(t, testForwardOnlyWhereItCanDropKernel)
}

func testForwardOnlyWhereItCanDropKernel(t *testing.T, backend string, family ipset.Family) {
	cfg := Config{VXLAN: true}
	f := newFixture(t, backend, family, cfg, nil)
	if backend == BackendNFT {
		netnstest.SkipUnlessInstalled(t, "nftables", "nft")
	}
	fwd := Render(cfg, family)[slices.IndexFunc(Render(cfg, family), func(c Chain) bool { return c.Name == ForwardChain })]
	// wantNone checks that no chain, no jump and (nft) no FORWARD base
	// chain is left.
	wantNone := func(what string) {
		t.Helper()
		f.wantKernel(t, cfg, family, false)
		if backend == BackendNFT && f.nftHasChain(t, family, TableFilter, "FORWARD") {
			out, _ := netnstest.Exec(context.Background(), f.n, "nft", "list", "ruleset")
			t.Fatalf("%s: nf_tables still has a FORWARD base chain:\n%s", what, out)
		}
	}
	c := New(f.tab, family, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	wantNone("policy ACCEPT, after Apply")

	// An older routelet's chain and jump, written with the binary.
	f.run(t, "-N", ForwardChain)
	for _, r := range fwd.Rules {
		f.run(t, append([]string{"-A", ForwardChain}, strings.Fields(r)...)...)
	}
	f.run(t, "-A", "FORWARD", "-j", ForwardChain)
	if n, err := c.Check(); n == 0 || err != nil {
		t.Fatalf("Check after an older routelet's chain = %d, %v; want it removed", n, err)
	}
	wantNone("older routelet's chain, after one Check")

	f.run(t, "-P", "FORWARD", "DROP")
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("Check after -P FORWARD DROP = %d, %v; want the chain installed, which is no repair", n, err)
	}
	f.wantKernel(t, cfg, family, true)
	if backend == BackendNFT && !f.nftHasChain(t, family, TableFilter, "FORWARD") {
		t.Fatal("nft list ruleset shows no FORWARD base chain with policy DROP: the check above proves nothing")
	}
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("Check with FORWARD DROP unchanged = %d, %v; want nothing to repair", n, err)
	}

	f.run(t, "-P", "FORWARD", "ACCEPT")
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("Check after -P FORWARD ACCEPT = %d, %v; want the chain removed, which is no repair", n, err)
	}
	wantNone("policy ACCEPT again")
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("Check with FORWARD ACCEPT unchanged = %d, %v; want nothing to repair", n, err)
	}
}
