package firewalltest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/fakekernel"
	"github.com/routelet/routelet/pkg/firewall"
)

// FakeTable is an in-memory firewall.Table for tests: tables of chains of
// rule specs, listed the way `iptables -S` prints them. It counts calls
// per method and can fail chosen calls. The raw, filter and nat tables exist from the
// start, their built-in chains with policy ACCEPT (SetPolicy changes one);
// DropTable removes a table, and any call naming a missing table but
// HasTable creates it again, as iptables-legacy does (so a test sees
// whether code reads a table it should leave alone). With NFT a built-in
// chain can be missing, as an nf_tables base chain can: DeleteBaseChain
// removes one, the listing still shows it with policy ACCEPT, and a rule
// or policy written to it creates it again, as iptables-nft does.
type FakeTable struct {
	mu sync.Mutex
	// chains maps "table/chain" to its rule specs; builtin marks built-in
	// chains. Guarded by mu.
	chains  map[string][]string
	builtin map[string]bool
	// policy holds the built-in chains' policies other than ACCEPT, by
	// "table/chain"; guarded by mu.
	policy map[string]string
	calls  fakekernel.Calls
	// gen is the ruleset generation, bumped by every change; guarded by mu.
	gen uint32
	// NFT makes Generation report gen, as iptables-nft does; without it
	// the fake has no generation, like iptables-legacy. Set it before use.
	NFT bool
	// Inject, when set, is called before every method with its name
	// ("ListTable", "Append", "Generation", …), table and chain ("" where
	// the method has none); a non-nil result fails the call unchanged. It
	// runs with the FakeTable's lock held, so it must not call the
	// FakeTable but for its …InInject methods.
	Inject func(method, table, chain string) error
}

var _ firewall.Table = (*FakeTable)(nil)

// FakeExitError is the error FakeTable returns where iptables would exit
// with a status: 1 for a missing chain or rule.
type FakeExitError struct {
	Status int    // the exit status iptables would have
	Msg    string // what it would print on stderr
}

// Error implements error.
func (e *FakeExitError) Error() string { return fmt.Sprintf("exit status %d: %s", e.Status, e.Msg) }

// ExitStatus returns the simulated exit status.
func (e *FakeExitError) ExitStatus() int { return e.Status }

// builtinChains are the built-in chains of the raw, filter and nat tables,
// as table/chain, in the order iptables lists them.
var builtinChains = []string{"raw/PREROUTING", "raw/OUTPUT", "filter/INPUT", "filter/FORWARD", "filter/OUTPUT",
	"nat/PREROUTING", "nat/INPUT", "nat/OUTPUT", "nat/POSTROUTING"}

// NewFakeTable returns a FakeTable with the raw, filter and nat tables.
func NewFakeTable() *FakeTable {
	f := &FakeTable{chains: map[string][]string{}, builtin: map[string]bool{}, policy: map[string]string{}}
	for _, k := range builtinChains {
		f.builtin[k] = true
	}
	for _, t := range []string{firewall.TableRaw, firewall.TableFilter, firewall.TableNAT} {
		f.instantiate(t)
	}
	return f
}

// instantiate creates table with its built-in chains when it is missing.
func (f *FakeTable) instantiate(table string) {
	if f.hasTable(table) {
		return
	}
	for _, k := range builtinChains {
		if t, _, _ := strings.Cut(k, "/"); t == table {
			f.chains[k] = nil
		}
	}
}

// hasTable reports whether any chain of table exists.
func (f *FakeTable) hasTable(table string) bool {
	for k := range f.chains {
		if t, _, _ := strings.Cut(k, "/"); t == table {
			return true
		}
	}
	return false
}

// DropTable removes table and everything in it, as a namespace where
// nobody ever used it.
func (f *FakeTable) DropTable(table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.chains {
		if t, _, _ := strings.Cut(k, "/"); t == table {
			delete(f.chains, k)
			delete(f.policy, k)
		}
	}
	f.changed()
}

// DeleteTable implements firewall.Table: with NFT and gen current it
// removes the table; it is counted as a call.
func (f *FakeTable) DeleteTable(table string, gen uint32) error {
	return f.calls.Do(&f.mu, "DeleteTable", func() error {
		if err := f.inject("DeleteTable", table, ""); err != nil {
			return err
		}
		if !f.NFT {
			return fmt.Errorf("fake legacy cannot remove table %s: %w", table, errors.ErrUnsupported)
		}
		if gen != f.gen {
			return firewall.ErrGenerationChanged
		}
		for k := range f.chains {
			if t, _, _ := strings.Cut(k, "/"); t == table {
				delete(f.chains, k)
				delete(f.policy, k)
			}
		}
		f.changed()
		return nil
	})
}

// DeleteBaseChain implements firewall.Table: with NFT and gen current it
// removes the built-in chain unless it holds a rule (EBUSY, as the kernel
// answers); a missing chain is success. It is counted as a call.
func (f *FakeTable) DeleteBaseChain(table, chain string, gen uint32) error {
	return f.calls.Do(&f.mu, "DeleteBaseChain", func() error {
		if err := f.inject("DeleteBaseChain", table, chain); err != nil {
			return err
		}
		if !f.NFT {
			return fmt.Errorf("fake legacy cannot remove built-in chain %s/%s: %w", table, chain, errors.ErrUnsupported)
		}
		if gen != f.gen {
			return firewall.ErrGenerationChanged
		}
		k := table + "/" + chain
		r, ok := f.chains[k]
		if !ok {
			return nil
		}
		if len(r) > 0 {
			return fmt.Errorf("fake delete built-in chain %s: %w", k, unix.EBUSY)
		}
		delete(f.chains, k)
		delete(f.policy, k)
		f.changed()
		return nil
	})
}

// SetPolicy sets the policy of the built-in chain table/chain directly (and
// so creates it where missing), as `iptables -P` by another program would.
func (f *FakeTable) SetPolicy(table, chain, policy string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := table + "/" + chain
	if _, ok := f.chains[k]; !ok {
		f.chains[k] = nil
	}
	f.policy[k] = policy
	if policy == "ACCEPT" {
		delete(f.policy, k)
	}
	f.changed()
}

// HasTable implements firewall.Table. It is not counted as a call: it is
// no exec.
func (f *FakeTable) HasTable(table string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inject("HasTable", table, ""); err != nil {
		return false, err
	}
	return f.hasTable(table), nil
}

// Calls returns how often method was called.
func (f *FakeTable) Calls(method string) int { return f.calls.Count(method) }

// Execs returns the total number of calls (each would be one exec).
func (f *FakeTable) Execs() int { return f.calls.Total() }

// ResetCalls zeroes the counters.
func (f *FakeTable) ResetCalls() { f.calls.Reset() }

// Rules returns the rule specs of table/chain and whether it exists.
func (f *FakeTable) Rules(table, chain string) ([]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.chains[table+"/"+chain]
	return slices.Clone(r), ok
}

// Policy returns the policy of the built-in chain table/chain.
func (f *FakeTable) Policy(table, chain string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.policy[table+"/"+chain]; p != "" {
		return p
	}
	return "ACCEPT"
}

// SetRules replaces (creating if needed) the rules of table/chain directly,
// as another program would.
func (f *FakeTable) SetRules(table, chain string, rules ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.chains[table+"/"+chain] = slices.Clone(rules)
	f.changed()
}

// SetRulesInInject is SetRules for Inject, which runs with the lock held:
// another program rewriting table/chain between two of the calls.
func (f *FakeTable) SetRulesInInject(table, chain string, rules ...string) {
	f.chains[table+"/"+chain] = slices.Clone(rules)
	f.changed()
}

// ChangeInInject, for Inject, which runs with the lock held, changes the
// generation as another program's write between two of the calls would,
// leaving the rules as they are.
func (f *FakeTable) ChangeInInject() { f.changed() }

// RemoveChain deletes table/chain directly.
func (f *FakeTable) RemoveChain(table, chain string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.chains, table+"/"+chain)
	f.changed()
}

// inject returns Inject's answer for a call, nil without Inject. Caller
// holds mu.
func (f *FakeTable) inject(method, table, chain string) error {
	if f.Inject == nil {
		return nil
	}
	return f.Inject(method, table, chain)
}

// do runs fn as a call of method on table/chain with f.mu held: counted,
// failed without running fn when Inject fails it, and with table created
// first when it is missing, as iptables-legacy does.
func (f *FakeTable) do(method, table, chain string, fn func() error) error {
	return f.calls.Do(&f.mu, method, func() error {
		if err := f.inject(method, table, chain); err != nil {
			return err
		}
		f.instantiate(table)
		return fn()
	})
}

// changed bumps the generation: every write method calls it once it has
// changed something, as a committed nf_tables transaction would.
func (f *FakeTable) changed() { f.gen++ }

// Generation implements firewall.Table. It is not counted as a call: it
// is no exec.
func (f *FakeTable) Generation() (uint32, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inject("Generation", "", ""); err != nil {
		return 0, false, err
	}
	return f.gen, f.NFT, nil
}

// get returns the rules of table/chain; with NFT a missing built-in chain
// of an existing table has none (a write creates it). Caller holds mu.
func (f *FakeTable) get(table, chain string) ([]string, error) {
	r, ok := f.chains[table+"/"+chain]
	if !ok && f.NFT && f.builtin[table+"/"+chain] && f.hasTable(table) {
		return nil, nil
	}
	if !ok {
		return nil, &FakeExitError{1, "No chain/target/match by that name."}
	}
	return r, nil
}

// ListTable implements firewall.Table. It prints the table the way `iptables -t
// table -S` does: the built-in chains' policies, the other chains' -N lines,
// then every chain's rules, chains in the same order (built-in chains in
// their kernel order, then the others sorted by name).
func (f *FakeTable) ListTable(table string) (out []string, err error) {
	err = f.do("ListTable", table, "", func() error {
		out = f.listTable(table)
		return nil
	})
	return out, err
}

// listTable is ListTable once counted. Caller holds mu.
func (f *FakeTable) listTable(table string) []string {
	var builtin, user []string
	for _, k := range builtinChains {
		if t, ch, _ := strings.Cut(k, "/"); t == table {
			if _, ok := f.chains[k]; ok || f.NFT {
				builtin = append(builtin, ch)
			}
		}
	}
	for k := range f.chains {
		if t, ch, _ := strings.Cut(k, "/"); t == table && !f.builtin[k] {
			user = append(user, ch)
		}
	}
	slices.Sort(user)
	var out []string
	for _, ch := range builtin {
		policy := f.policy[table+"/"+ch]
		if policy == "" {
			policy = "ACCEPT"
		}
		out = append(out, "-P "+ch+" "+policy)
	}
	for _, ch := range user {
		out = append(out, "-N "+ch)
	}
	for _, ch := range append(builtin, user...) {
		for _, spec := range f.chains[table+"/"+ch] {
			out = append(out, "-A "+ch+" "+spec)
		}
	}
	return out
}

// ListById implements firewall.Table.
func (f *FakeTable) ListById(table, chain string, id int) (rule string, err error) {
	err = f.do("ListById", table, chain, func() error {
		r, err := f.get(table, chain)
		if err != nil {
			return err
		}
		if id < 1 || id > len(r) {
			return &FakeExitError{1, "Index of deletion too big."}
		}
		rule = "-A " + chain + " " + r[id-1]
		return nil
	})
	return rule, err
}

// NewChain implements firewall.Table.
func (f *FakeTable) NewChain(table, chain string) error {
	return f.do("NewChain", table, chain, func() error {
		if _, ok := f.chains[table+"/"+chain]; ok {
			return &FakeExitError{1, "Chain already exists."}
		}
		f.chains[table+"/"+chain] = []string{}
		f.changed()
		return nil
	})
}

// Append implements firewall.Table.
func (f *FakeTable) Append(table, chain string, rulespec ...string) error {
	return f.do("Append", table, chain, func() error {
		r, err := f.get(table, chain)
		if err != nil {
			return err
		}
		f.chains[table+"/"+chain] = append(r, strings.Join(rulespec, " "))
		f.changed()
		return nil
	})
}

// Insert implements firewall.Table.
func (f *FakeTable) Insert(table, chain string, pos int, rulespec ...string) error {
	return f.do("Insert", table, chain, func() error {
		r, err := f.get(table, chain)
		if err != nil {
			return err
		}
		if pos < 1 || pos > len(r)+1 {
			return &FakeExitError{2, "Index of insertion too big."}
		}
		f.chains[table+"/"+chain] = slices.Insert(slices.Clone(r), pos-1, strings.Join(rulespec, " "))
		f.changed()
		return nil
	})
}

// DeleteById implements firewall.Table.
func (f *FakeTable) DeleteById(table, chain string, id int) error {
	return f.do("DeleteById", table, chain, func() error {
		r, err := f.get(table, chain)
		if err != nil {
			return err
		}
		if id < 1 || id > len(r) {
			return &FakeExitError{1, "Index of deletion too big."}
		}
		f.chains[table+"/"+chain] = slices.Delete(slices.Clone(r), id-1, id)
		f.changed()
		return nil
	})
}

// ClearChain implements firewall.Table.
func (f *FakeTable) ClearChain(table, chain string) error {
	return f.do("ClearChain", table, chain, func() error {
		f.chains[table+"/"+chain] = []string{}
		f.changed()
		return nil
	})
}

// DeleteChain implements firewall.Table.
func (f *FakeTable) DeleteChain(table, chain string) error {
	return f.do("DeleteChain", table, chain, func() error {
		r, err := f.get(table, chain)
		if err != nil {
			return err
		}
		if len(r) > 0 {
			return &FakeExitError{1, "Directory not empty."}
		}
		for k, rules := range f.chains {
			for _, spec := range rules {
				if strings.HasSuffix(spec, "-j "+chain) {
					return &FakeExitError{1, "Too many links (referenced by " + k + ")."}
				}
			}
		}
		delete(f.chains, table+"/"+chain)
		f.changed()
		return nil
	})
}
