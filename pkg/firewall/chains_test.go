package firewall_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/firewall/firewalltest"
	"github.com/routelet/routelet/pkg/ipset"
)

// quiet discards the logs of the code under test.
var quiet = slog.New(slog.DiscardHandler)

var fullCfg = firewall.Config{VXLAN: true, IPIP: true, WireGuard: true, NATOutgoing: true}

// plainCfg is fullCfg without encryption: ROUTELET-FORWARD is kept only
// while FORWARD can drop (with encryption it holds the guard's jump and
// stays).
var plainCfg = firewall.Config{VXLAN: true, IPIP: true, NATOutgoing: true}

// wantInstalled fails unless the fake holds exactly the rendered chains of
// cfg, each jumped to once, first in its built-in chain, and the built-in
// chains otherwise hold exactly others (table/chain → specs after the jump).
// An OnlyWhileHookCanDrop chain is wanted only where others holds a rule in
// its built-in chain or that chain's policy is not ACCEPT; otherwise it and
// its jump must be absent.
func wantInstalled(t *testing.T, f *firewalltest.FakeTable, cfg firewall.Config, family ipset.Family, others map[string][]string) {
	t.Helper()
	for _, ch := range firewall.Render(cfg, family) {
		hook, _ := f.Rules(ch.Table, ch.Hook)
		foreign := others[ch.Table+"/"+ch.Hook]
		if ch.OnlyWhileHookCanDrop && len(foreign) == 0 && f.Policy(ch.Table, ch.Hook) == "ACCEPT" {
			if _, ok := f.Rules(ch.Table, ch.Name); ok || len(hook) != 0 {
				t.Fatalf("nothing in %s/%s can drop, yet chain %s exists %v, %s holds %q; want neither", ch.Table, ch.Hook, ch.Name, ok, ch.Hook, hook)
			}
			continue
		}
		got, ok := f.Rules(ch.Table, ch.Name)
		if !ok {
			t.Fatalf("chain %s/%s missing", ch.Table, ch.Name)
		}
		if !slices.Equal(got, ch.Rules) && !(len(got) == 0 && len(ch.Rules) == 0) {
			t.Fatalf("chain %s/%s = %q, want %q", ch.Table, ch.Name, got, ch.Rules)
		}
		want := append([]string{strings.TrimPrefix(ch.JumpLine(), "-A "+ch.Hook+" ")}, foreign...)
		if !slices.Equal(hook, want) {
			t.Fatalf("built-in %s/%s = %q, want %q", ch.Table, ch.Hook, hook, want)
		}
	}
}

func TestChainsApplyThenNoChange(t *testing.T) {
	f := firewalltest.NewFakeTable()
	f.SetRules("filter", "INPUT", "-p tcp --dport 22 -j ACCEPT") // someone else's rule
	c := firewall.New(f, ipset.IPv4, quiet)
	if err := c.SetConfig(fullCfg); err != nil {
		t.Fatal(err)
	}
	if f.Execs() != 0 {
		t.Fatal("SetConfig ran iptables")
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	others := map[string][]string{"filter/INPUT": {"-p tcp --dport 22 -j ACCEPT"}}
	wantInstalled(t, f, fullCfg, ipset.IPv4, others)

	f.ResetCalls()
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetConfig(fullCfg) // same config: still nothing to do
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if n := f.Execs(); n != 0 {
		t.Fatalf("no-change Apply ran iptables %d times, want 0", n)
	}
	if n, err := c.Check(); n != 0 || err != nil {
		t.Fatalf("clean Check = %d, %v", n, err)
	}
	if f.Calls("ListTable") != 3 || f.Execs() != 3 {
		t.Fatalf("clean Check: %d table reads, %d execs; want one read per table (filter, nat and raw, which exists in the fake and may hold an older routelet's chain) and nothing else", f.Calls("ListTable"), f.Execs())
	}

	// Config change: only the tables of the chains whose rules change are
	// read, once each, and only those chains rewritten; the jumps, known
	// good, are not touched.
	f.ResetCalls()
	if err := c.SetConfig(firewall.Config{VXLAN: true, NATOutgoing: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	wantInstalled(t, f, firewall.Config{VXLAN: true, NATOutgoing: true}, ipset.IPv4, others)
	if f.Calls("ListTable") != 2 || f.Calls("Insert") != 0 {
		t.Fatalf("config change: %d table reads, %d Inserts; want 2 (filter and nat, each once) and 0", f.Calls("ListTable"), f.Calls("Insert"))
	}
}

// TestChainsCheckRepairsTampering tampers after a clean Check, with and
// without a ruleset generation (nft, legacy): each tamper is repaired by the
// next Check.
func TestChainsCheckRepairsTampering(t *testing.T) {
	for _, nft := range []bool{true, false} {
		t.Run(fmt.Sprintf("nft=%v", nft), func(t *testing.T) { testChainsCheckRepairsTampering(t, nft) })
	}
}

func testChainsCheckRepairsTampering(t *testing.T, nft bool) {
	docker := "-o docker0 -j DOCKER"
	f := firewalltest.NewFakeTable()
	f.NFT = nft
	f.SetRules("filter", "FORWARD", docker)
	c := firewall.New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(fullCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func()
	}{
		{"ROUTELET-INPUT flushed", func() { f.SetRules("filter", firewall.InputChain) }},
		{"rule added to ROUTELET-FORWARD", func() {
			r, _ := f.Rules("filter", firewall.ForwardChain)
			f.SetRules("filter", firewall.ForwardChain, append(r, "-j DROP")...)
		}},
		{"ROUTELET-POSTROUTING reordered", func() {
			r, _ := f.Rules("nat", firewall.PostroutingChain)
			slices.Reverse(r)
			f.SetRules("nat", firewall.PostroutingChain, r...)
		}},
		{"jump deleted", func() { f.SetRules("filter", "INPUT") }},
		{"rule put above the jump", func() { f.SetRules("filter", "FORWARD", docker, "-j "+firewall.ForwardChain) }},
		{"duplicate jumps", func() {
			_ = f.Append("nat", "POSTROUTING", "-j", firewall.PostroutingChain)
			_ = f.Append("nat", "POSTROUTING", "-j", firewall.PostroutingChain)
		}},
		{"chain deleted with its jump", func() {
			f.SetRules("filter", "INPUT")
			f.RemoveChain("filter", firewall.InputChain)
		}},
		{"ROUTELET-ENCRYPT flushed", func() { f.SetRules("filter", firewall.EncryptChain) }},
		{"the guard's drop deleted", func() {
			r, _ := f.Rules("filter", firewall.EncryptChain)
			f.SetRules("filter", firewall.EncryptChain, r[:len(r)-1]...)
		}},
		{"the guard's jump deleted from OUTPUT", func() { f.SetRules("filter", "OUTPUT") }},
		{"the guard's jump deleted from ROUTELET-FORWARD", func() {
			r, _ := f.Rules("filter", firewall.ForwardChain)
			f.SetRules("filter", firewall.ForwardChain, r[1:]...)
		}},
	} {
		if n, err := c.Check(); n != 0 || err != nil {
			t.Fatalf("before %s: clean Check = %d, %v", tc.name, n, err)
		}
		tc.do()
		n, err := c.Check()
		if err != nil || n == 0 {
			t.Fatalf("%s: Check = %d, %v; want a repair", tc.name, n, err)
		}
		wantInstalled(t, f, fullCfg, ipset.IPv4, map[string][]string{"filter/FORWARD": {docker}})
		if n, err := c.Check(); n != 0 || err != nil {
			t.Fatalf("%s: second Check = %d, %v; want nothing to repair", tc.name, n, err)
		}
	}
}

// TestChainsCheckExecs: a clean Check is one `iptables -t <table> -S` per
// table, each table once, whatever the number of chains in it; with an
// nf_tables generation (nft) a Check after a clean one reads nothing until
// the ruleset changes. A Check that repairs adds only the writes.
func TestChainsCheckExecs(t *testing.T) {
	for _, tc := range []struct {
		nft bool
		// execs of each clean Check after the first
		later int
	}{{nft: false, later: 3}, {nft: true, later: 0}} {
		t.Run(fmt.Sprintf("nft=%v", tc.nft), func(t *testing.T) {
			f := firewalltest.NewFakeTable()
			f.NFT = tc.nft
			var tables []string
			f.Inject = func(method, table, chain string) error {
				if method == "ListTable" {
					tables = append(tables, table)
				}
				return nil
			}
			c := firewall.New(f, ipset.IPv4, quiet)
			_ = c.SetConfig(fullCfg)
			if err := c.Apply(); err != nil {
				t.Fatal(err)
			}
			tableReads := []string{"filter", "nat", "raw"}
			if !slices.Equal(tables, tableReads) {
				t.Fatalf("first Apply read tables %q, want %q", tables, tableReads)
			}
			for i := range 3 {
				tables = nil
				f.ResetCalls()
				if n, err := c.Check(); n != 0 || err != nil {
					t.Fatalf("clean Check = %d, %v", n, err)
				}
				want, execs := tableReads, 3
				if i > 0 && tc.later == 0 {
					want, execs = nil, 0
				}
				if !slices.Equal(tables, want) || f.Execs() != execs {
					t.Fatalf("clean Check %d: read tables %q in %d execs, want %q in %d", i+1, tables, f.Execs(), want, execs)
				}
			}
			if s := c.Stats(); tc.nft != (s.Unchanged == 2) {
				t.Fatalf("Stats.Unchanged = %d after 3 clean Checks (nft %v)", s.Unchanged, tc.nft)
			}
			// A flushed chain and its deleted jump: still one read of
			// the table; the repair appends the rules and inserts the
			// jump.
			f.SetRules("filter", firewall.InputChain)
			f.SetRules("filter", "INPUT")
			f.ResetCalls()
			if n, err := c.Check(); n != 2 || err != nil {
				t.Fatalf("Check = %d, %v; want 2 repairs", n, err)
			}
			in := firewall.Render(fullCfg, ipset.IPv4)[slices.IndexFunc(firewall.Render(fullCfg, ipset.IPv4), func(c firewall.Chain) bool { return c.Name == firewall.InputChain })]
			if f.Calls("ListTable") != 3 || f.Calls("Append") != len(in.Rules) || f.Calls("Insert") != 1 || f.Execs() != 3+len(in.Rules)+1 {
				t.Fatalf("repairing Check: %d table reads, %d appends, %d inserts, %d execs; want 3, %d, 1, %d",
					f.Calls("ListTable"), f.Calls("Append"), f.Calls("Insert"), f.Execs(), len(in.Rules), 3+len(in.Rules)+1)
			}
			wantInstalled(t, f, fullCfg, ipset.IPv4, nil)
			// The repair changed the ruleset: the next Check reads again
			// (and, clean, arms the shortcut once more).
			f.ResetCalls()
			if n, err := c.Check(); n != 0 || err != nil || f.Execs() != 3 {
				t.Fatalf("Check after a repair = %d, %v in %d execs; want a clean read of the three tables", n, err, f.Execs())
			}
		})
	}
}

// TestChainsCheckGenerationShortcut: the nf_tables shortcut is taken only
// while nothing could have changed: a config change, an Apply or an
// unreadable generation make the next Check read the tables.
func TestChainsCheckGenerationShortcut(t *testing.T) {
	f := firewalltest.NewFakeTable()
	f.NFT = true
	c := firewall.New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(fullCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, wantExecs int) {
		t.Helper()
		f.ResetCalls()
		if n, err := c.Check(); n != 0 || err != nil || f.Execs() != wantExecs {
			t.Fatalf("%s: Check = %d, %v in %d execs, want 0, nil in %d", what, n, err, f.Execs(), wantExecs)
		}
	}
	check("first clean Check", 3)
	check("unchanged ruleset", 0)

	// A foreign rule in a chain routelet does not own still changes the
	// generation: the Check reads (and leaves it alone).
	_ = f.Append("filter", "OUTPUT", "-j", "ACCEPT")
	check("foreign change", 3)
	check("unchanged again", 0)

	// New config, kernel unchanged: Apply rewrites the chains, and even
	// when nothing would need writing the next Check reads.
	cfg := firewall.Config{VXLAN: true, NATOutgoing: true}
	_ = c.SetConfig(cfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	check("after a config change", 3)
	_ = c.SetConfig(fullCfg)
	_ = c.SetConfig(cfg) // back: nothing to write, but Apply still runs
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	check("after an Apply", 3)

	f.Inject = func(method, table, chain string) error {
		if method == "Generation" {
			return &firewalltest.FakeExitError{Status: 1, Msg: "injected: no netlink"}
		}
		return nil
	}
	check("generation unreadable", 3)
	check("generation still unreadable", 3)
	f.Inject = nil
	check("generation back", 3)
	check("generation back, unchanged", 0)
}

// TestChainsCheckReadFailure: a table that cannot be read fails the Check
// (once, naming the table), leaves the chains dirty, and the chains of the
// other table are still checked.
func TestChainsCheckReadFailure(t *testing.T) {
	f := firewalltest.NewFakeTable()
	c := firewall.New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(fullCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.SetRules("nat", "POSTROUTING") // jump deleted
	f.Inject = func(method, table, chain string) error {
		if method == "ListTable" && table == "filter" {
			return &firewalltest.FakeExitError{Status: 4, Msg: "injected: filter unreadable"}
		}
		return nil
	}
	n, err := c.Check()
	if err == nil || strings.Count(err.Error(), "injected") != 1 || !strings.Contains(err.Error(), "table filter") {
		t.Fatalf("Check = %d, %v; want one error for table filter", n, err)
	}
	if n != 1 || !c.Dirty() {
		t.Fatalf("Check = %d repairs, dirty %v; want the nat jump repaired and dirty", n, c.Dirty())
	}
	f.Inject = nil
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	wantInstalled(t, f, fullCfg, ipset.IPv4, nil)
}

// TestChainsStaleJumpRaceIsSafe: INPUT holds [ACCEPT, jump]; routelet
// inserts a jump first and would delete the stale one at position 3. Another
// program rewrites INPUT in between, so position 3 now holds its ACCEPT:
// routelet must notice and not delete it.
func TestChainsStaleJumpRaceIsSafe(t *testing.T) {
	f := firewalltest.NewFakeTable()
	f.SetRules("filter", "INPUT", "-j ACCEPT", "-j "+firewall.InputChain)
	c := firewall.New(f, ipset.IPv4, quiet)
	f.Inject = func(method, table, chain string) error {
		if method == "Insert" && chain == "INPUT" {
			f.Inject = nil
			f.SetRulesInInject("filter", "INPUT", "-j "+firewall.InputChain, "-j ACCEPT", "-j LOG")
		}
		return nil
	}
	err := c.Apply()
	if err == nil || !strings.Contains(err.Error(), "changed while removing") {
		t.Fatalf("Apply = %v, want the concurrent change detected", err)
	}
	r, _ := f.Rules("filter", "INPUT")
	if !slices.Contains(r, "-j ACCEPT") || !slices.Contains(r, "-j LOG") {
		t.Fatalf("someone else's rule was deleted: %q", r)
	}
	if err := c.Apply(); err != nil {
		t.Fatalf("retry: %v", err)
	}
	r, _ = f.Rules("filter", "INPUT")
	if want := []string{"-j " + firewall.InputChain, "-j ACCEPT", "-j LOG"}; !slices.Equal(r, want) {
		t.Fatalf("INPUT after retry = %q, want %q", r, want)
	}
}

// TestChainsFailureMatrixConverges fails each iptables exec of a first Apply
// in turn (on a table with stale state to repair): Apply reports it and stays
// dirty, and the next Apply converges.
func TestChainsFailureMatrixConverges(t *testing.T) {
	setup := func() (*firewalltest.FakeTable, *firewall.Chains) {
		f := firewalltest.NewFakeTable()
		f.SetRules("filter", "FORWARD", "-j DOCKER-USER", "-j "+firewall.ForwardChain, "-j "+firewall.ForwardChain)
		f.SetRules("filter", firewall.ForwardChain, "-j DROP")
		c := firewall.New(f, ipset.IPv4, quiet)
		_ = c.SetConfig(fullCfg)
		return f, c
	}
	f, c := setup()
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	total := f.Execs()
	others := map[string][]string{"filter/FORWARD": {"-j DOCKER-USER"}}
	wantInstalled(t, f, fullCfg, ipset.IPv4, others)
	for i := 1; i <= total; i++ {
		t.Run(fmt.Sprintf("fail-exec-%d", i), func(t *testing.T) {
			f, c := setup()
			n := 0
			f.Inject = func(method, table, chain string) error {
				n++
				if n == i {
					return &firewalltest.FakeExitError{Status: 4, Msg: "injected failure of " + method + " " + table + "/" + chain}
				}
				return nil
			}
			if err := c.Apply(); err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("Apply = %v, want the injected failure", err)
			}
			if !c.Dirty() {
				t.Fatal("not dirty after a failure")
			}
			f.Inject = nil
			if err := c.Apply(); err != nil {
				t.Fatalf("retry: %v", err)
			}
			wantInstalled(t, f, fullCfg, ipset.IPv4, others)
		})
	}
}

func TestCleanup(t *testing.T) {
	f := firewalltest.NewFakeTable()
	f.SetRules("nat", "POSTROUTING", "-j KUBE-POSTROUTING")
	c := firewall.New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(fullCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	_ = f.Append("filter", "INPUT", "-j", firewall.InputChain) // a duplicate too
	if err := firewall.Cleanup(f, quiet); err != nil {
		t.Fatal(err)
	}
	for _, ch := range firewall.Render(fullCfg, ipset.IPv4) {
		if _, ok := f.Rules(ch.Table, ch.Name); ok {
			t.Fatalf("chain %s/%s still present", ch.Table, ch.Name)
		}
	}
	if r, _ := f.Rules("filter", "INPUT"); len(r) != 0 {
		t.Fatalf("INPUT = %q, want the jumps gone", r)
	}
	if r, _ := f.Rules("nat", "POSTROUTING"); !slices.Equal(r, []string{"-j KUBE-POSTROUTING"}) {
		t.Fatalf("POSTROUTING = %q, want only the foreign rule", r)
	}
	if err := firewall.Cleanup(f, quiet); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
}

// TestChainsNATOffLeavesNATTableAlone: without NAT outgoing, Apply and
// Check never read, write or create the nat table of a namespace that has
// none (the fake, like iptables-legacy, instantiates a table on any
// access), with and without a ruleset generation.
func TestChainsNATOffLeavesNATTableAlone(t *testing.T) {
	for _, nft := range []bool{true, false} {
		t.Run(fmt.Sprintf("nft=%v", nft), func(t *testing.T) {
			f := firewalltest.NewFakeTable()
			f.NFT = nft
			f.DropTable(firewall.TableNAT)
			var touched []string
			f.Inject = func(method, table, chain string) error {
				if table == firewall.TableNAT && method != "HasTable" {
					touched = append(touched, method)
				}
				return nil
			}
			c := firewall.New(f, ipset.IPv4, quiet)
			cfg := firewall.Config{VXLAN: true}
			_ = c.SetConfig(cfg)
			if err := c.Apply(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if n, err := c.Check(); n != 0 || err != nil {
					t.Fatalf("clean Check = %d, %v", n, err)
				}
			}
			if ok, _ := f.HasTable(firewall.TableNAT); ok || len(touched) > 0 {
				t.Fatalf("NAT off: nat table exists %v, calls on it %q; want none", ok, touched)
			}
			wantInstalled(t, f, cfg, ipset.IPv4, nil)
		})
	}
}

// TestChainsNATSwitchedOff: NAT outgoing turned off removes the nat chain
// and its jump and leaves everyone else's nat rules alone; with nf_tables a
// nat table left empty by that is removed (its hooks would keep conntrack
// on), one that holds someone else's rule stays; legacy cannot remove a
// table and leaves it empty. A chain recreated by someone is removed again
// by the next Check.
func TestChainsNATSwitchedOff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		nft       bool
		foreign   bool
		wantTable bool
	}{
		{"nft, nat table only routelet's", true, false, false},
		{"nft, someone else's nat rule", true, true, true},
		{"legacy", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := firewalltest.NewFakeTable()
			f.NFT = tc.nft
			if tc.foreign {
				f.SetRules(firewall.TableNAT, "PREROUTING", "-j KUBE-SERVICES")
			}
			c := firewall.New(f, ipset.IPv4, quiet)
			_ = c.SetConfig(firewall.Config{VXLAN: true, NATOutgoing: true})
			if err := c.Apply(); err != nil {
				t.Fatal(err)
			}
			off := firewall.Config{VXLAN: true}
			_ = c.SetConfig(off)
			if err := c.Apply(); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.Rules(firewall.TableNAT, firewall.PostroutingChain); ok {
				t.Fatal("ROUTELET-POSTROUTING still there with NAT off")
			}
			if r, _ := f.Rules(firewall.TableNAT, "POSTROUTING"); len(r) != 0 {
				t.Fatalf("nat POSTROUTING = %q, want no jump", r)
			}
			if ok, _ := f.HasTable(firewall.TableNAT); ok != tc.wantTable {
				t.Fatalf("nat table exists = %v, want %v", ok, tc.wantTable)
			}
			if r, _ := f.Rules(firewall.TableNAT, "PREROUTING"); tc.foreign && !slices.Equal(r, []string{"-j KUBE-SERVICES"}) {
				t.Fatalf("someone else's nat rule = %q, want it kept", r)
			}
			wantInstalled(t, f, off, ipset.IPv4, nil)

			// Someone recreates the chain and the jump: the next Check
			// removes both.
			f.SetRules(firewall.TableNAT, firewall.PostroutingChain, "-j MASQUERADE")
			f.SetRules(firewall.TableNAT, "POSTROUTING", "-j "+firewall.PostroutingChain)
			if n, err := c.Check(); n != 1 || err != nil {
				t.Fatalf("Check = %d, %v; want the recreated chain removed (1 repair)", n, err)
			}
			if _, ok := f.Rules(firewall.TableNAT, firewall.PostroutingChain); ok {
				t.Fatal("recreated ROUTELET-POSTROUTING survived a Check with NAT off")
			}
		})
	}
}

// TestCleanupLeavesMissingTablesAlone: cleanup does not create a table it
// has nothing to remove from.
func TestCleanupLeavesMissingTablesAlone(t *testing.T) {
	f := firewalltest.NewFakeTable()
	f.DropTable(firewall.TableNAT)
	f.DropTable(firewall.TableRaw)
	if err := firewall.Cleanup(f, quiet); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{firewall.TableNAT, firewall.TableRaw} {
		if ok, _ := f.HasTable(table); ok {
			t.Fatalf("cleanup created table %s", table)
		}
	}
}

// TestCleanupDropsTablesItEmptied: with nf_tables, cleanup deletes the
// tables that held nothing but routelet's chains (raw: an older routelet's
// ROUTELET-PREROUTING) and keeps a table with someone else's rule.
func TestCleanupDropsTablesItEmptied(t *testing.T) {
	f := firewalltest.NewFakeTable()
	f.NFT = true
	f.SetRules(firewall.TableFilter, "INPUT", "-p tcp --dport 22 -j ACCEPT")
	olderPrerouting(f)
	if err := firewall.Cleanup(f, quiet); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.HasTable(firewall.TableRaw); ok {
		t.Errorf("after cleanup the raw table of an older routelet's chain exists")
	}
	c := firewall.New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(fullCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if err := firewall.Cleanup(f, quiet); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]bool{firewall.TableRaw: false, firewall.TableNAT: false, firewall.TableFilter: true} {
		if ok, _ := f.HasTable(table); ok != want {
			t.Errorf("after cleanup table %s exists = %v, want %v", table, ok, want)
		}
	}
	if r, _ := f.Rules(firewall.TableFilter, "INPUT"); !slices.Equal(r, []string{"-p tcp --dport 22 -j ACCEPT"}) {
		t.Errorf("filter INPUT = %q, want someone else's rule kept", r)
	}
}

// olderPrerouting gives f the raw-table anti-spoofing chain of earlier
// routelet versions and both forms of their jump.
func olderPrerouting(f *firewalltest.FakeTable) {
	f.SetRules(firewall.TableRaw, firewall.PreroutingChain, "-i cali+ -m rpfilter --invert -j DROP", "-i cali+ -p udp -m udp --dport 4789 -j DROP")
	f.SetRules(firewall.TableRaw, "PREROUTING", "-i cali+ -j "+firewall.PreroutingChain, "-j "+firewall.PreroutingChain)
}

// TestChainsRemoveOlderPrerouting: on a node upgraded from a routelet that
// kept the pod source check in raw PREROUTING, Apply removes that chain and
// both forms of its jump (someone else's rule kept) and never renders it;
// with nf_tables a raw table left empty is deleted, one with someone
// else's rule stays.
func TestChainsRemoveOlderPrerouting(t *testing.T) {
	for _, other := range []bool{false, true} {
		f := firewalltest.NewFakeTable()
		f.NFT = true
		olderPrerouting(f)
		if other {
			f.SetRules(firewall.TableRaw, "PREROUTING", "-i cali+ -j "+firewall.PreroutingChain, "-s 192.0.2.1/32 -j DROP", "-j "+firewall.PreroutingChain)
		}
		c := firewall.New(f, ipset.IPv4, quiet)
		if err := c.SetConfig(fullCfg); err != nil {
			t.Fatal(err)
		}
		if err := c.Apply(); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Rendered() {
			if ch.Table == firewall.TableRaw {
				t.Errorf("rendered a raw chain: %+v", ch)
			}
		}
		exists, _ := f.HasTable(firewall.TableRaw)
		if exists != other {
			t.Fatalf("with someone else's rule %v: raw table exists %v after Apply", other, exists)
		}
		if !other {
			continue
		}
		if hook, _ := f.Rules(firewall.TableRaw, "PREROUTING"); !slices.Equal(hook, []string{"-s 192.0.2.1/32 -j DROP"}) {
			t.Errorf("raw PREROUTING = %q, want only the other rule", hook)
		}
		if _, ok := f.Rules(firewall.TableRaw, firewall.PreroutingChain); ok {
			t.Errorf("%s still exists", firewall.PreroutingChain)
		}
	}
}

// TestChainsForwardOnlyWhereItCanDrop: ROUTELET-FORWARD and its jump exist
// only while filter FORWARD can drop — a policy other than ACCEPT, or
// someone else's rule — and are removed again when it no longer can; with
// nf_tables the FORWARD base chain that removal leaves empty is deleted
// (it would keep its hook registered). A steady state, either way, makes
// no repair, and with nf_tables no read. Each flip is logged once.
func TestChainsForwardOnlyWhereItCanDrop(t *testing.T) {
	for _, nft := range []bool{true, false} {
		t.Run(fmt.Sprintf("nft=%v", nft), func(t *testing.T) { testForwardOnlyWhereItCanDrop(t, nft) })
	}
}

func testForwardOnlyWhereItCanDrop(t *testing.T, nft bool) {
	f := firewalltest.NewFakeTable()
	f.NFT = nft
	var logs strings.Builder
	c := firewall.New(f, ipset.IPv4, slog.New(slog.NewTextHandler(&logs, nil)))
	_ = c.SetConfig(plainCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	wantGone := func(what string, baseDeleted bool) {
		t.Helper()
		if _, ok := f.Rules(firewall.TableFilter, firewall.ForwardChain); ok {
			t.Fatalf("%s: %s exists", what, firewall.ForwardChain)
		}
		r, exists := f.Rules(firewall.TableFilter, "FORWARD")
		if len(r) != 0 {
			t.Fatalf("%s: FORWARD = %q, want it empty", what, r)
		}
		if exists == baseDeleted {
			t.Fatalf("%s: FORWARD base chain exists %v, want %v", what, exists, !baseDeleted)
		}
		wantInstalled(t, f, plainCfg, ipset.IPv4, nil)
	}
	// steady runs clean Checks: no repair, and with a generation no read
	// after the first.
	steady := func(what string) {
		t.Helper()
		for i := range 3 {
			f.ResetCalls()
			if n, err := c.Check(); n != 0 || err != nil {
				t.Fatalf("%s: clean Check %d = %d, %v; want 0 repairs", what, i+1, n, err)
			}
			if nft && i > 0 && f.Execs() != 0 {
				t.Fatalf("%s: clean Check %d with an unchanged generation ran %d execs", what, i+1, f.Execs())
			}
		}
	}
	// flip changes FORWARD as someone else would, and wants the next Check
	// to follow it (checked by the callers) without calling that a repair:
	// the host's firewall changed, nobody tampered with routelet's rules.
	flip := func(what string, change func()) {
		t.Helper()
		change()
		if n, err := c.Check(); n != 0 || err != nil {
			t.Fatalf("%s: Check = %d, %v; want the change followed and 0 repairs", what, n, err)
		}
	}

	// The fake's FORWARD exists from the start: not routelet's to delete.
	wantGone("policy ACCEPT, FORWARD empty", false)
	steady("policy ACCEPT")

	flip("policy DROP", func() { f.SetPolicy(firewall.TableFilter, "FORWARD", "DROP") })
	wantInstalled(t, f, plainCfg, ipset.IPv4, nil)
	steady("policy DROP")

	flip("policy ACCEPT again", func() { f.SetPolicy(firewall.TableFilter, "FORWARD", "ACCEPT") })
	wantGone("policy ACCEPT again", nft)
	steady("policy ACCEPT again")

	docker := "-o docker0 -j DOCKER"
	flip("someone else's rule", func() { f.SetRules(firewall.TableFilter, "FORWARD", docker) })
	wantInstalled(t, f, plainCfg, ipset.IPv4, map[string][]string{"filter/FORWARD": {docker}})
	steady("someone else's rule")

	flip("that rule deleted", func() {
		r, _ := f.Rules(firewall.TableFilter, "FORWARD")
		f.SetRules(firewall.TableFilter, "FORWARD", slices.DeleteFunc(r, func(s string) bool { return s == docker })...)
	})
	wantGone("that rule deleted", nft)
	steady("that rule deleted")

	for msg, want := range map[string]int{
		"FORWARD can drop (policy DROP): ROUTELET-FORWARD wanted":                       1,
		`FORWARD can drop (rule \"-A FORWARD -o docker0 -j DOCKER\"): ROUTELET-FORWARD`: 1,
		"nothing in iptables FORWARD can drop":                                          3,
	} {
		if got := strings.Count(logs.String(), msg); got != want {
			t.Errorf("log %q %d times, want %d:\n%s", msg, got, want, logs.String())
		}
	}
}

// TestChainsForwardUpgrade: a node upgraded from a routelet that always
// kept ROUTELET-FORWARD, FORWARD policy ACCEPT and nothing else in it: the
// first Apply removes the chain and its jump and, with nf_tables, the
// FORWARD base chain left empty; someone else's rule added at the same
// time (the ruleset changed under the deletion) keeps the chain in place.
func TestChainsForwardUpgrade(t *testing.T) {
	for _, nft := range []bool{true, false} {
		t.Run(fmt.Sprintf("nft=%v", nft), func(t *testing.T) {
			f := firewalltest.NewFakeTable()
			f.NFT = nft
			f.SetRules(firewall.TableFilter, firewall.ForwardChain, "-i cali+ -j ACCEPT", "-o cali+ -j ACCEPT")
			f.SetRules(firewall.TableFilter, "FORWARD", "-j "+firewall.ForwardChain)
			c := firewall.New(f, ipset.IPv4, quiet)
			_ = c.SetConfig(plainCfg)
			if err := c.Apply(); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.Rules(firewall.TableFilter, firewall.ForwardChain); ok {
				t.Fatalf("%s kept with nothing in FORWARD that can drop", firewall.ForwardChain)
			}
			if r, exists := f.Rules(firewall.TableFilter, "FORWARD"); len(r) != 0 || exists == nft {
				t.Fatalf("FORWARD = %q, exists %v; want it empty, and deleted with nf_tables", r, exists)
			}
			wantInstalled(t, f, plainCfg, ipset.IPv4, nil)
		})
	}
	// The ruleset changes between the re-read and the deletion: nothing
	// is deleted then, and the next Check tries again.
	f := firewalltest.NewFakeTable()
	f.NFT = true
	f.SetRules(firewall.TableFilter, firewall.ForwardChain, "-i cali+ -j ACCEPT")
	f.SetRules(firewall.TableFilter, "FORWARD", "-j "+firewall.ForwardChain)
	raced := false
	f.Inject = func(method, table, chain string) error {
		if method == "DeleteBaseChain" && !raced {
			raced = true
			f.ChangeInInject()
		}
		return nil
	}
	c := firewall.New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(plainCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if _, exists := f.Rules(firewall.TableFilter, "FORWARD"); !exists || !raced {
		t.Fatalf("FORWARD deleted although the ruleset changed under the deletion (raced %v)", raced)
	}
	if _, err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if _, exists := f.Rules(firewall.TableFilter, "FORWARD"); exists {
		t.Fatal("the next Check did not delete the empty FORWARD base chain")
	}

	// The re-read before the deletion fails, in the Check that removes
	// routelet's chain and again in the next one, which writes nothing:
	// nothing is deleted then, and the Check after tries again although
	// the ruleset did not change since.
	f = firewalltest.NewFakeTable()
	f.NFT = true
	f.SetRules(firewall.TableFilter, "FORWARD", "-o docker0 -j DOCKER")
	reads, armed, failed := 0, false, false
	f.Inject = func(method, table, chain string) error {
		if armed && method == "ListTable" && table == firewall.TableFilter {
			// Each Check reads to decide, then re-reads before the
			// deletion.
			if reads++; reads == 2 || reads == 4 {
				failed = true
				return errors.New("injected read failure")
			}
		}
		return nil
	}
	c = firewall.New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(plainCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.SetRules(firewall.TableFilter, "FORWARD", "-j "+firewall.ForwardChain)
	armed = true
	for range 2 {
		if _, err := c.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if _, exists := f.Rules(firewall.TableFilter, "FORWARD"); !exists || !failed || reads != 4 {
		t.Fatalf("FORWARD deleted although its re-read failed (failed %v, %d reads)", failed, reads)
	}
	if _, err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if _, exists := f.Rules(firewall.TableFilter, "FORWARD"); exists {
		t.Fatal("the next Check, the ruleset unchanged, did not delete the empty FORWARD base chain")
	}
}

// TestChainsEncryptionGuard: with encryption (WireGuard) ROUTELET-ENCRYPT
// is jumped to first from OUTPUT and from the first rule of
// ROUTELET-FORWARD, which is then kept although nothing in FORWARD can
// drop (the guard must hold for forwarded pod traffic too); steady Checks
// repair nothing. Encryption switched off removes the guard, its jump
// from OUTPUT and (FORWARD unable to drop) ROUTELET-FORWARD, and with a
// FORWARD policy DROP keeps ROUTELET-FORWARD without the guard's jump;
// switched on again, all is back.
func TestChainsEncryptionGuard(t *testing.T) {
	for _, nft := range []bool{true, false} {
		t.Run(fmt.Sprintf("nft=%v", nft), func(t *testing.T) {
			f := firewalltest.NewFakeTable()
			f.NFT = nft
			c := firewall.New(f, ipset.IPv4, quiet)
			apply := func(cfg firewall.Config) {
				t.Helper()
				if err := c.SetConfig(cfg); err != nil {
					t.Fatal(err)
				}
				if err := c.Apply(); err != nil {
					t.Fatal(err)
				}
			}
			steady := func(what string) {
				t.Helper()
				for i := range 2 {
					if n, err := c.Check(); n != 0 || err != nil {
						t.Fatalf("%s: clean Check %d = %d, %v; want no repair", what, i+1, n, err)
					}
				}
			}
			wantGuard := func(what string) {
				t.Helper()
				wantInstalled(t, f, fullCfg, ipset.IPv4, nil)
				fwd, ok := f.Rules(firewall.TableFilter, firewall.ForwardChain)
				if !ok || len(fwd) == 0 || fwd[0] != "-j "+firewall.EncryptChain {
					t.Fatalf("%s: %s = %q (exists %v), want the guard's jump first", what, firewall.ForwardChain, fwd, ok)
				}
				enc, _ := f.Rules(firewall.TableFilter, firewall.EncryptChain)
				if want := "-m set --match-set routelet-pools dst -j DROP"; len(enc) == 0 || enc[len(enc)-1] != want {
					t.Fatalf("%s: %s = %q, want it to end in %q", what, firewall.EncryptChain, enc, want)
				}
			}
			wantNoGuard := func(what string) {
				t.Helper()
				if _, ok := f.Rules(firewall.TableFilter, firewall.EncryptChain); ok {
					t.Fatalf("%s: %s exists", what, firewall.EncryptChain)
				}
				if r, _ := f.Rules(firewall.TableFilter, "OUTPUT"); len(r) != 0 {
					t.Fatalf("%s: OUTPUT = %q, want it empty", what, r)
				}
				if r, _ := f.Rules(firewall.TableFilter, firewall.ForwardChain); slices.Contains(r, "-j "+firewall.EncryptChain) {
					t.Fatalf("%s: %s = %q still jumps to the guard", what, firewall.ForwardChain, r)
				}
			}

			// Policy ACCEPT, FORWARD empty: ROUTELET-FORWARD stays, for
			// the guard.
			apply(fullCfg)
			wantGuard("encryption on, FORWARD policy ACCEPT")
			steady("encryption on")

			apply(plainCfg)
			wantNoGuard("encryption off")
			wantInstalled(t, f, plainCfg, ipset.IPv4, nil) // and no ROUTELET-FORWARD
			steady("encryption off")

			apply(fullCfg)
			wantGuard("encryption on again")

			f.SetPolicy(firewall.TableFilter, "FORWARD", "DROP")
			steady("FORWARD policy DROP") // a flip of nothing: the chain was wanted anyway
			apply(plainCfg)
			wantNoGuard("encryption off, FORWARD policy DROP")
			wantInstalled(t, f, plainCfg, ipset.IPv4, nil)
			steady("encryption off, FORWARD policy DROP")

			if err := firewall.Cleanup(f, quiet); err != nil {
				t.Fatal(err)
			}
			apply(fullCfg)
			if err := firewall.Cleanup(f, quiet); err != nil {
				t.Fatalf("Cleanup with the guard installed: %v", err)
			}
			for _, ch := range firewall.Known() {
				if _, ok := f.Rules(ch.Table, ch.Name); ok {
					t.Fatalf("Cleanup left %s/%s", ch.Table, ch.Name)
				}
			}
			if r, _ := f.Rules(firewall.TableFilter, "OUTPUT"); len(r) != 0 {
				t.Fatalf("Cleanup left OUTPUT = %q", r)
			}
		})
	}
}
