package rules

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/coreos/go-iptables/iptables"

	"github.com/routelet/routelet/pkg/ipset"
)

// Table is the narrow seam between Chains and iptables: the methods of
// *iptables.IPTables that Chains calls. Each call is one exec of the iptables
// binary.
type Table interface {
	// List returns `iptables -t table -S chain`.
	List(table, chain string) ([]string, error)
	// ListById returns `iptables -t table -S chain id`: one rule.
	ListById(table, chain string, id int) (string, error)
	NewChain(table, chain string) error
	Append(table, chain string, rulespec ...string) error
	Insert(table, chain string, pos int, rulespec ...string) error
	DeleteById(table, chain string, id int) error
	// ClearChain flushes chain, creating it when missing.
	ClearChain(table, chain string) error
	DeleteChain(table, chain string) error
}

var _ Table = (*iptables.IPTables)(nil)

// Stats counts the iptables execs a Chains made, by kind.
type Stats struct {
	Reads  int // List and ListById
	Writes int // everything else
}

// Chains keeps routelet's chains for one IP family in the kernel in line
// with a Config, and the jump to each chain first in its built-in chain.
//
// SetConfig touches memory only. Apply reconciles when the Config changed
// since the last successful Apply and otherwise makes no exec at all: the
// rules it last wrote are cached. Check forgets the cache, reads every chain
// and built-in chain once and repairs what differs: that is the tamper check
// and the full resync. A failed Apply or Check leaves Chains dirty. All
// methods are safe for concurrent use.
type Chains struct {
	t      Table
	family ipset.Family
	log    *slog.Logger

	mu sync.Mutex
	// cfg and chains are the desired state; guarded by mu.
	cfg    Config
	chains []Chain
	// applied caches, per chain name, the lines last written or read back
	// equal; a missing entry means unknown. hookOK records jumps known to be
	// first and single. Both guarded by mu.
	applied map[string][]string
	hookOK  map[string]bool
	// dirty is set by SetConfig and by failures; guarded by mu.
	dirty bool
	// stats counts execs; guarded by mu.
	stats Stats
}

// New returns a Chains for family (ipset.IPv4 for iptables, ipset.IPv6 for
// ip6tables) that starts from the zero Config: empty allow rules, pod
// forwarding accepted, no NAT. log may be nil.
func New(t Table, family ipset.Family, log *slog.Logger) *Chains {
	if log == nil {
		log = slog.Default()
	}
	return &Chains{
		t:       t,
		family:  family,
		log:     log.With("component", "iptables", "family", family.String()),
		chains:  Render(Config{}, family),
		applied: map[string][]string{},
		hookOK:  map[string]bool{},
		dirty:   true,
	}
}

// SetConfig makes cfg the desired rule set; it is validated first.
func (c *Chains) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cfg == c.cfg && !c.dirty {
		return nil
	}
	c.cfg = cfg
	c.chains = Render(cfg, c.family)
	c.dirty = true
	return nil
}

// Rendered returns the desired chains.
func (c *Chains) Rendered() []Chain {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.chains)
}

// Stats returns the execs made so far.
func (c *Chains) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Dirty reports whether an Apply is pending.
func (c *Chains) Dirty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirty
}

// Apply brings the chains and jumps in line with the Config when something
// changed (or failed) since the last success. Chains whose cached content
// already matches are not read again.
func (c *Chains) Apply() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty {
		return nil
	}
	_, err := c.sync(true)
	return err
}

// Check reads each routelet chain and each built-in chain that jumps to one
// (six execs), repairs whatever differs and returns how many chains or jumps
// needed repair.
func (c *Chains) Check() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sync(false)
}

// sync reconciles every chain, then its jump (a jump needs its target to
// exist). With useCache, chains and jumps known good are skipped unread.
func (c *Chains) sync(useCache bool) (int, error) {
	var errs []error
	repaired := 0
	for _, ch := range c.chains {
		want := ch.Lines()
		if !useCache || !slices.Equal(c.applied[ch.Name], want) {
			fixed, err := c.syncChain(ch, want)
			if err != nil {
				delete(c.applied, ch.Name)
				errs = append(errs, err)
				continue // no jump to a chain in an unknown state
			}
			c.applied[ch.Name] = want
			if fixed {
				repaired++
			}
		}
		if !useCache || !c.hookOK[ch.Name] {
			fixed, err := c.syncHook(ch)
			if err != nil {
				delete(c.hookOK, ch.Name)
				errs = append(errs, err)
				continue
			}
			c.hookOK[ch.Name] = true
			if fixed {
				repaired++
			}
		}
	}
	err := errors.Join(errs...)
	c.dirty = err != nil
	if err != nil {
		c.log.Warn("iptables sync failed", "err", err)
	}
	return repaired, err
}

func (c *Chains) list(table, chain string) ([]string, error) {
	c.stats.Reads++
	return c.t.List(table, chain)
}

// exitStatus1 reports whether err is iptables exiting with status 1, which is
// how both backends report a missing chain to -S (the message differs).
func exitStatus1(err error) bool {
	var e interface{ ExitStatus() int }
	return errors.As(err, &e) && e.ExitStatus() == 1
}

// syncChain reads one chain and, when it differs from want, replaces its
// rules as a whole: the new rules are appended after the old ones, then the
// old ones deleted from the top, so the chain is never empty and never edited
// rule by rule. It reports whether it wrote anything.
func (c *Chains) syncChain(ch Chain, want []string) (bool, error) {
	lines, err := c.list(ch.Table, ch.Name)
	created := false
	if err != nil {
		if !exitStatus1(err) {
			return false, fmt.Errorf("iptables read %s/%s: %w", ch.Table, ch.Name, err)
		}
		// Missing (or unreadable: then creating it fails too).
		c.stats.Writes++
		if cerr := c.t.NewChain(ch.Table, ch.Name); cerr != nil {
			return false, fmt.Errorf("iptables chain %s/%s: cannot read (%w) nor create: %w", ch.Table, ch.Name, err, cerr)
		}
		c.log.Debug("iptables chain created", "table", ch.Table, "chain", ch.Name)
		lines = []string{"-N " + ch.Name}
		created = true
	}
	got := make([]string, 0, len(lines))
	old := 0
	for _, l := range lines {
		got = append(got, canonical(l))
		if strings.HasPrefix(l, "-A ") {
			old++
		}
	}
	if slices.Equal(got, want) {
		return created, nil
	}
	if !created {
		c.log.Info("iptables chain differs from desired; replacing it", "table", ch.Table, "chain", ch.Name,
			"rules", old, "want", len(ch.Rules))
	}
	for _, r := range ch.Rules {
		c.stats.Writes++
		if err := c.t.Append(ch.Table, ch.Name, strings.Fields(r)...); err != nil {
			return true, fmt.Errorf("iptables append to %s/%s %q: %w", ch.Table, ch.Name, r, err)
		}
	}
	for range old {
		c.stats.Writes++
		if err := c.t.DeleteById(ch.Table, ch.Name, 1); err != nil {
			return true, fmt.Errorf("iptables delete old rule 1 of %s/%s: %w", ch.Table, ch.Name, err)
		}
	}
	c.log.Debug("iptables chain replaced", "table", ch.Table, "chain", ch.Name, "rules", len(ch.Rules))
	return true, nil
}

// jumpPositions returns the 1-based positions of the rules in a built-in
// chain's -S listing that are exactly a jump to target.
func jumpPositions(lines []string, hook, target string) []int {
	jump := "-A " + hook + " -j " + target
	var pos []int
	n := 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "-A ") {
			continue
		}
		n++
		if l == jump {
			pos = append(pos, n)
		}
	}
	return pos
}

// syncHook makes the jump to ch the first rule of its built-in chain, present
// once: a missing or displaced jump is inserted at position 1 first, then the
// stale copies are deleted (add before delete: traffic always passes a jump).
// Each deletion is by position, re-checked with a one-rule read just before,
// so a concurrent change to the built-in chain never costs someone else's
// rule. It reports whether it wrote anything.
func (c *Chains) syncHook(ch Chain) (bool, error) {
	lines, err := c.list(ch.Table, ch.Hook)
	if err != nil {
		return false, fmt.Errorf("iptables read %s/%s: %w", ch.Table, ch.Hook, err)
	}
	pos := jumpPositions(lines, ch.Hook, ch.Name)
	if len(pos) == 1 && pos[0] == 1 {
		return false, nil
	}
	stale := pos
	if len(pos) == 0 || pos[0] != 1 {
		c.stats.Writes++
		if err := c.t.Insert(ch.Table, ch.Hook, 1, "-j", ch.Name); err != nil {
			return true, fmt.Errorf("iptables insert jump %s/%s -> %s: %w", ch.Table, ch.Hook, ch.Name, err)
		}
		for i := range stale {
			stale[i]++
		}
		c.log.Info("iptables jump inserted first", "table", ch.Table, "chain", ch.Hook, "target", ch.Name, "stale_copies", len(stale))
	} else {
		stale = pos[1:]
		c.log.Info("iptables duplicate jumps removed", "table", ch.Table, "chain", ch.Hook, "target", ch.Name, "copies", len(stale))
	}
	jump := "-A " + ch.Hook + " -j " + ch.Name
	for i := len(stale) - 1; i >= 0; i-- {
		c.stats.Reads++
		rule, err := c.t.ListById(ch.Table, ch.Hook, stale[i])
		if err != nil {
			return true, fmt.Errorf("iptables read %s/%s rule %d: %w", ch.Table, ch.Hook, stale[i], err)
		}
		if strings.TrimSpace(rule) != jump {
			return true, fmt.Errorf("iptables %s/%s changed while removing stale jumps (rule %d is %q); will retry", ch.Table, ch.Hook, stale[i], rule)
		}
		c.stats.Writes++
		if err := c.t.DeleteById(ch.Table, ch.Hook, stale[i]); err != nil {
			return true, fmt.Errorf("iptables delete stale jump %s/%s rule %d: %w", ch.Table, ch.Hook, stale[i], err)
		}
	}
	return true, nil
}

// Cleanup removes every jump to routelet's chains from the built-in chains,
// then flushes and deletes the chains, for the daemon's cleanup command. Run
// it before destroying the ipsets the rules use. Missing chains are fine.
// Jumps are deleted by position from one read, highest first; it is meant
// for a stopped daemon, not to race with other programs editing the same
// built-in chain (Chains.Check re-reads before each positional delete).
func Cleanup(t Table, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	var errs []error
	for _, ch := range Render(Config{}, ipset.IPv4) {
		lines, err := t.List(ch.Table, ch.Hook)
		if err != nil {
			errs = append(errs, fmt.Errorf("iptables cleanup: read %s/%s: %w", ch.Table, ch.Hook, err))
			continue
		}
		pos := jumpPositions(lines, ch.Hook, ch.Name)
		for i := len(pos) - 1; i >= 0; i-- {
			if err := t.DeleteById(ch.Table, ch.Hook, pos[i]); err != nil {
				errs = append(errs, fmt.Errorf("iptables cleanup: delete jump %s/%s rule %d: %w", ch.Table, ch.Hook, pos[i], err))
			}
		}
		if _, err := t.List(ch.Table, ch.Name); err != nil {
			if !exitStatus1(err) {
				errs = append(errs, fmt.Errorf("iptables cleanup: read %s/%s: %w", ch.Table, ch.Name, err))
			}
			continue // already gone
		}
		if err := t.ClearChain(ch.Table, ch.Name); err != nil {
			errs = append(errs, fmt.Errorf("iptables cleanup: flush %s/%s: %w", ch.Table, ch.Name, err))
			continue
		}
		if err := t.DeleteChain(ch.Table, ch.Name); err != nil {
			errs = append(errs, fmt.Errorf("iptables cleanup: delete %s/%s: %w", ch.Table, ch.Name, err))
			continue
		}
		log.Debug("iptables chain removed", "component", "iptables", "table", ch.Table, "chain", ch.Name)
	}
	return errors.Join(errs...)
}
