package rules

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/pkg/ipset"
)

// quiet discards the logs of the code under test.
var quiet = slog.New(slog.DiscardHandler)

var fullCfg = Config{VXLAN: true, IPIP: true, NATOutgoing: true}

// wantInstalled fails unless the fake holds exactly the rendered chains of
// cfg, each jumped to once, first in its built-in chain, and the built-in
// chains otherwise hold exactly others (table/chain → specs after the jump).
func wantInstalled(t *testing.T, f *FakeTable, cfg Config, family ipset.Family, others map[string][]string) {
	t.Helper()
	for _, ch := range Render(cfg, family) {
		got, ok := f.Rules(ch.Table, ch.Name)
		if !ok {
			t.Fatalf("chain %s/%s missing", ch.Table, ch.Name)
		}
		if !slices.Equal(got, ch.Rules) && !(len(got) == 0 && len(ch.Rules) == 0) {
			t.Fatalf("chain %s/%s = %q, want %q", ch.Table, ch.Name, got, ch.Rules)
		}
		hook, _ := f.Rules(ch.Table, ch.Hook)
		want := append([]string{"-j " + ch.Name}, others[ch.Table+"/"+ch.Hook]...)
		if !slices.Equal(hook, want) {
			t.Fatalf("built-in %s/%s = %q, want %q", ch.Table, ch.Hook, hook, want)
		}
	}
}

func TestChainsApplyThenNoChange(t *testing.T) {
	f := NewFakeTable()
	f.SetRules("filter", "INPUT", "-p tcp --dport 22 -j ACCEPT") // someone else's rule
	c := New(f, ipset.IPv4, quiet)
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
	if f.Calls("List") != 6 || f.Execs() != 6 {
		t.Fatalf("clean Check: %d Lists, %d execs; want one List per chain (6) and nothing else", f.Calls("List"), f.Execs())
	}

	// Config change: only the chains whose rules change are read and
	// rewritten; the jumps, known good, are not read.
	f.ResetCalls()
	if err := c.SetConfig(Config{VXLAN: true, NATOutgoing: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	wantInstalled(t, f, Config{VXLAN: true, NATOutgoing: true}, ipset.IPv4, others)
	if f.Calls("List") != 3 || f.Calls("Insert") != 0 {
		t.Fatalf("config change: %d Lists, %d Inserts; want 3 (the changed chains) and 0", f.Calls("List"), f.Calls("Insert"))
	}
}

func TestChainsCheckRepairsTampering(t *testing.T) {
	docker := "-o docker0 -j DOCKER"
	f := NewFakeTable()
	f.SetRules("filter", "FORWARD", docker)
	c := New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(fullCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		do   func()
	}{
		{"ROUTELET-INPUT flushed", func() { f.SetRules("filter", InputChain) }},
		{"rule added to ROUTELET-FORWARD", func() {
			r, _ := f.Rules("filter", ForwardChain)
			f.SetRules("filter", ForwardChain, append(r, "-j DROP")...)
		}},
		{"ROUTELET-POSTROUTING reordered", func() {
			r, _ := f.Rules("nat", PostroutingChain)
			slices.Reverse(r)
			f.SetRules("nat", PostroutingChain, r...)
		}},
		{"jump deleted", func() { f.SetRules("filter", "INPUT") }},
		{"rule put above the jump", func() { f.SetRules("filter", "FORWARD", docker, "-j "+ForwardChain) }},
		{"duplicate jumps", func() {
			_ = f.Append("nat", "POSTROUTING", "-j", PostroutingChain)
			_ = f.Append("nat", "POSTROUTING", "-j", PostroutingChain)
		}},
		{"chain deleted with its jump", func() {
			f.SetRules("filter", "INPUT")
			f.RemoveChain("filter", InputChain)
		}},
	} {
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

// TestChainsStaleJumpRaceIsSafe: INPUT holds [ACCEPT, jump]; routelet
// inserts a jump first and would delete the stale one at position 3. Another
// program rewrites INPUT in between, so position 3 now holds its ACCEPT:
// routelet must notice and not delete it.
func TestChainsStaleJumpRaceIsSafe(t *testing.T) {
	f := NewFakeTable()
	f.SetRules("filter", "INPUT", "-j ACCEPT", "-j "+InputChain)
	c := New(f, ipset.IPv4, quiet)
	f.Inject = func(method, table, chain string) error {
		if method == "Insert" && chain == "INPUT" {
			f.Inject = nil
			// Runs with the fake's lock held: write the map directly.
			f.chains["filter/INPUT"] = []string{"-j " + InputChain, "-j ACCEPT", "-j LOG"}
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
	if want := []string{"-j " + InputChain, "-j ACCEPT", "-j LOG"}; !slices.Equal(r, want) {
		t.Fatalf("INPUT after retry = %q, want %q", r, want)
	}
}

// TestChainsFailureMatrixConverges fails each iptables exec of a first Apply
// in turn (on a table with stale state to repair): Apply reports it and stays
// dirty, and the next Apply converges.
func TestChainsFailureMatrixConverges(t *testing.T) {
	setup := func() (*FakeTable, *Chains) {
		f := NewFakeTable()
		f.SetRules("filter", "FORWARD", "-j DOCKER-USER", "-j "+ForwardChain, "-j "+ForwardChain)
		f.SetRules("filter", ForwardChain, "-j DROP")
		c := New(f, ipset.IPv4, quiet)
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
					return &FakeExitError{4, "injected failure of " + method + " " + table + "/" + chain}
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
	f := NewFakeTable()
	f.SetRules("nat", "POSTROUTING", "-j KUBE-POSTROUTING")
	c := New(f, ipset.IPv4, quiet)
	_ = c.SetConfig(fullCfg)
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	_ = f.Append("filter", "INPUT", "-j", InputChain) // a duplicate too
	if err := Cleanup(f, quiet); err != nil {
		t.Fatal(err)
	}
	for _, ch := range Render(fullCfg, ipset.IPv4) {
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
	if err := Cleanup(f, quiet); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
}
