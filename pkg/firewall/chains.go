package firewall

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/routelet/routelet/pkg/ipset"
)

// Table is the narrow seam between Chains and iptables: the methods Chains
// and Cleanup call, those of go-iptables' *iptables.IPTables plus ListTable
// and Generation (see IPTables). Each call but Generation is one exec of
// the iptables binary.
type Table interface {
	// ListTable returns `iptables -t table -S`: every chain of the table,
	// its policy or -N line first, then the rules of each chain in order.
	ListTable(table string) ([]string, error)
	// Generation returns the nf_tables ruleset generation of the
	// namespace, which the kernel changes on every ruleset change and only
	// then; ok is false when the backend keeps none (iptables-legacy).
	// It is a netlink request, not an exec.
	Generation() (gen uint32, ok bool, err error)
	// HasTable reports whether table exists in the namespace, without
	// creating it: reading a table with the iptables binary instantiates
	// it on iptables-legacy, and a nat table costs every packet conntrack
	// and the NAT hooks. It is a netlink request or a /proc read, not an
	// exec.
	HasTable(table string) (bool, error)
	// DeleteTable deletes table in one transaction committed only while
	// the nf_tables ruleset generation is still gen (ErrGenerationChanged
	// otherwise, with nothing deleted); iptables-legacy cannot remove a
	// table (errors.ErrUnsupported). A netlink request, not an exec.
	DeleteTable(table string, gen uint32) error
	// DeleteBaseChain deletes the built-in chain of table, under the
	// same generation guard as DeleteTable: with iptables-nft a built-in
	// chain is an nf_tables base chain that registers its hook even when
	// empty. A missing chain is success; the kernel refuses one that holds
	// a rule (EBUSY). iptables-legacy: errors.ErrUnsupported, nothing
	// done. A netlink request, not an exec.
	DeleteBaseChain(table, chain string, gen uint32) error
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

// Stats counts the iptables execs a Chains made, by kind.
type Stats struct {
	Reads  int // ListTable and ListById
	Writes int // everything else
	// Unchanged counts the Checks that read nothing because the nf_tables
	// generation was the one of the last clean Check (no exec).
	Unchanged int
}

// Chains keeps routelet's chains for one IP family in the kernel in line
// with a Config, and the jump to each chain first in its built-in chain.
//
// SetConfig touches memory only. Apply reconciles when the Config changed
// since the last successful Apply and otherwise makes no exec at all: the
// rules it last wrote are cached. Check forgets the cache, reads each table
// of a wanted chain once (`iptables -t raw -S`, `-t filter -S`, with NAT
// outgoing `-t nat -S`: every chain and built-in chain, one exec per table)
// and repairs what differs: that is the tamper
// check and the full resync. A chain marked OnlyWhileHookCanDrop is wanted
// or kept absent as its built-in chain can drop or not, judged from its
// table as read by every Apply with work to do and every Check not cut
// short by an unchanged generation; so after someone adds a drop there,
// the chain is installed by the next Check. A failed Apply or Check leaves
// Chains dirty. All methods are safe for concurrent use.
type Chains struct {
	t      Table
	family ipset.Family
	log    *slog.Logger

	mu sync.Mutex
	// cfg and chains are the desired state, absent the known chains the
	// Config leaves out (kept absent); guarded by mu.
	cfg    Config
	chains []Chain
	absent []Chain
	// applied caches, per chain name, the lines last written or read back
	// equal; a missing entry means unknown. hookOK records jumps known to be
	// first and single, goneOK absent chains known gone with their jumps.
	// All guarded by mu.
	applied map[string][]string
	hookOK  map[string]bool
	goneOK  map[string]bool
	// canDrop holds, per OnlyWhileHookCanDrop chain, whether its built-in
	// chain could drop when last read (so the chain is wanted).
	// dropHook marks such a chain whose built-in chain routelet's removal
	// left to be deleted (nf_tables), retried while the ruleset changes
	// under it. Guarded by mu.
	canDrop  map[string]bool
	dropHook map[string]bool
	// dirty is set by SetConfig and by failures; guarded by mu.
	dirty bool
	// cleanGen is the nf_tables generation read just before the last
	// Check that read both tables, found everything as desired and wrote
	// nothing; cleanGenOK says there is one. While the generation is still
	// cleanGen the kernel holds exactly what that Check read, so a Check
	// has nothing to read. SetConfig and Apply clear it. Guarded by mu.
	cleanGen   uint32
	cleanGenOK bool
	// retry says the last sync left a built-in chain to delete that a
	// failed read kept in place: the next Check syncs again even if the
	// generation did not move. Guarded by mu.
	retry bool
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
	chains := Render(Config{}, family)
	return &Chains{
		t:        t,
		family:   family,
		log:      log.With("component", "iptables", "family", family.String()),
		chains:   chains,
		absent:   absent(chains),
		applied:  map[string][]string{},
		hookOK:   map[string]bool{},
		goneOK:   map[string]bool{},
		canDrop:  map[string]bool{},
		dropHook: map[string]bool{},
		dirty:    true,
	}
}

// absent returns the known chains that rendered leaves out.
func absent(rendered []Chain) []Chain {
	var out []Chain
	for _, k := range Known() {
		if !slices.ContainsFunc(rendered, func(c Chain) bool { return c.Name == k.Name }) {
			out = append(out, k)
		}
	}
	return out
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
	c.absent = absent(c.chains)
	// What is known of a chain holds only while it stays wanted, or
	// absent: one the Config leaves out is removed, and one it brings back
	// must be read again.
	for _, ch := range c.absent {
		delete(c.applied, ch.Name)
		delete(c.hookOK, ch.Name)
	}
	for _, ch := range c.chains {
		delete(c.goneOK, ch.Name)
	}
	c.dirty = true
	c.cleanGenOK = false
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
	c.cleanGenOK = false
	_, err := c.sync(true)
	return err
}

// Check reads the tables of the wanted chains (one exec each, listing every
// chain of the table: routelet's chains and the built-in chains that jump
// to them), repairs whatever differs, removes a chain the Config no longer
// wants (its table is read only when HasTable finds one), installs or
// removes an OnlyWhileHookCanDrop chain whose built-in chain someone made
// able to drop or no longer, and returns how many chains or jumps needed
// repair. The writes that follow such a flip are not repairs (the host's
// firewall changed; nobody tampered with routelet's rules), so a node
// whose chains nobody tampers with shows none.
//
// On nf_tables it first reads the ruleset generation (one netlink request):
// when it is still the one read before the last clean Check, nobody has
// changed any rule since that Check found everything as desired, and Check
// returns without an exec. Any write to the ruleset — a flush, a deleted,
// inserted or moved rule, in any chain, by anyone — changes the generation,
// so nothing that a read would detect is missed. If the generation cannot
// be read, Check reads the tables.
func (c *Chains) Check() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen, hasGen, err := c.t.Generation()
	if err != nil {
		c.log.Debug("nf_tables generation unreadable; reading the tables", "err", err)
		hasGen = false
	}
	if hasGen && c.cleanGenOK && gen == c.cleanGen && !c.dirty {
		c.stats.Unchanged++
		return 0, nil
	}
	c.cleanGenOK = false
	n, err := c.sync(false)
	if hasGen && n == 0 && err == nil && !c.retry {
		c.cleanGen, c.cleanGenOK = gen, true
	}
	return n, err
}

// sync reconciles every chain, then its jump (a jump needs its target to
// exist). With useCache, chains and jumps known good are skipped unread.
// Each table is read at most once, on first need, and that one listing
// serves all its chains: a write to one chain never changes another's
// lines, and each built-in chain holds the jump of one routelet chain only.
func (c *Chains) sync(useCache bool) (int, error) {
	var errs []error
	repaired := 0
	tables := map[string]map[string][]string{}
	failed := map[string]bool{}
	// read returns table's chains, reading the table on first use; a
	// failed read is reported once and not retried in this sync.
	read := func(table string) (map[string][]string, bool) {
		if chains, ok := tables[table]; ok {
			return chains, true
		}
		if failed[table] {
			return nil, false
		}
		c.stats.Reads++
		lines, err := c.t.ListTable(table)
		if err != nil {
			failed[table] = true
			errs = append(errs, fmt.Errorf("iptables read table %s: %w", table, err))
			return nil, false
		}
		tables[table] = splitTable(lines)
		return tables[table], true
	}
	c.retry = false
	for _, ch := range c.chains {
		want := ch.Lines()
		// count says whether ch's writes are repairs: those that follow a
		// flipped decision are the host's firewall changing, not tampering.
		count := true
		if !ch.OnlyWhileHookCanDrop {
			// Wanted whatever its built-in chain holds (ROUTELET-FORWARD
			// with the encryption guard): an earlier decision is moot, and
			// a built-in chain left to delete is needed now.
			delete(c.canDrop, ch.Name)
			delete(c.dropHook, ch.Name)
		}
		if ch.OnlyWhileHookCanDrop {
			chains, ok := read(ch.Table)
			if !ok {
				delete(c.applied, ch.Name)
				delete(c.hookOK, ch.Name)
				continue
			}
			wanted, flipped := c.decide(ch, chains[ch.Hook])
			count = !flipped
			if !wanted {
				fixed, err := c.keepRemoved(ch, chains)
				if err != nil {
					errs = append(errs, err)
				} else if fixed && count {
					repaired++
				}
				c.retry = c.retry || c.dropHook[ch.Name]
				continue
			}
		}
		if !useCache || !slices.Equal(c.applied[ch.Name], want) {
			chains, ok := read(ch.Table)
			if !ok {
				delete(c.applied, ch.Name)
				continue
			}
			lines, exists := chains[ch.Name]
			fixed, err := c.syncChain(ch, want, lines, exists)
			if err != nil {
				delete(c.applied, ch.Name)
				errs = append(errs, err)
				continue // no jump to a chain in an unknown state
			}
			c.applied[ch.Name] = want
			if fixed && count {
				repaired++
			}
		}
		if !useCache || !c.hookOK[ch.Name] {
			chains, ok := read(ch.Table)
			if !ok {
				delete(c.hookOK, ch.Name)
				continue
			}
			fixed, err := c.syncHook(ch, chains[ch.Hook])
			if err != nil {
				delete(c.hookOK, ch.Name)
				errs = append(errs, err)
				continue
			}
			c.hookOK[ch.Name] = true
			if fixed && count {
				repaired++
			}
		}
	}
	for _, ch := range c.absent {
		if useCache && c.goneOK[ch.Name] {
			continue
		}
		delete(c.goneOK, ch.Name)
		exists, err := c.t.HasTable(ch.Table)
		if err != nil {
			errs = append(errs, fmt.Errorf("iptables table %s: %w", ch.Table, err))
			continue
		}
		if exists {
			chains, ok := read(ch.Table)
			if !ok {
				continue
			}
			fixed, err := c.removeChain(ch, chains)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if fixed {
				repaired++
				c.dropIfEmpty(ch.Table, "")
			}
		}
		c.goneOK[ch.Name] = true
	}
	err := errors.Join(errs...)
	c.dirty = err != nil
	if err != nil {
		c.log.Warn("iptables sync failed", "err", err)
	}
	return repaired, err
}

// decide reports whether ch, an OnlyWhileHookCanDrop chain, is wanted:
// hookCanDrop of its built-in chain's lines as read. Every sync reads
// them, Apply's too: only a read shows whether someone changed the
// built-in chain since (Apply runs only after a change of Config or a
// failure, and its table is mostly read anyway). flipped says the decision
// differs from the last one (or is the first): it is logged with its
// reason, and ch's caches are dropped.
func (c *Chains) decide(ch Chain, hook []string) (wanted, flipped bool) {
	last, known := c.canDrop[ch.Name]
	wanted, why := hookCanDrop(ch, hook)
	if known && wanted == last {
		return wanted, false
	}
	c.canDrop[ch.Name] = wanted
	delete(c.applied, ch.Name)
	delete(c.hookOK, ch.Name)
	if wanted {
		c.log.Info(fmt.Sprintf("iptables %s can drop (%s): %s wanted", ch.Hook, why, ch.Name),
			"table", ch.Table, "chain", ch.Hook, "target", ch.Name)
	} else {
		c.log.Info(fmt.Sprintf("nothing in iptables %s can drop: %s not wanted", ch.Hook, ch.Name),
			"table", ch.Table, "chain", ch.Hook, "target", ch.Name)
	}
	return wanted, true
}

// hookCanDrop reports whether ch's built-in chain, given its lines as read
// from its table (none: no such chain, which drops nothing), can drop a
// packet — its policy is not ACCEPT, or it holds a rule other than a jump
// to ch (someone else's rule may drop, or jump to a chain that does) —
// and why.
func hookCanDrop(ch Chain, lines []string) (bool, string) {
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "-P" && f[2] != "ACCEPT":
			return true, "policy " + f[2]
		case len(f) > 1 && f[0] == "-A" && !isJump(l, ch.Hook, ch.Name):
			return true, fmt.Sprintf("rule %q", l)
		}
	}
	return false, ""
}

// keepRemoved removes an unwanted OnlyWhileHookCanDrop chain and its jumps
// (removeChain) given its table's chains as read, and with nf_tables then
// its built-in chain, left empty by that (dropIfEmpty; retried by the
// next sync when the ruleset changed in between). It reports whether it
// removed anything.
func (c *Chains) keepRemoved(ch Chain, chains map[string][]string) (bool, error) {
	fixed, err := c.removeChain(ch, chains)
	if err != nil {
		return fixed, err
	}
	if fixed {
		c.dropHook[ch.Name] = true
	}
	if c.dropHook[ch.Name] {
		c.dropHook[ch.Name] = c.dropIfEmpty(ch.Table, ch.Hook)
	}
	return fixed, nil
}

// dropIfEmpty deletes table, or with chain set only that built-in chain
// of it, once removing routelet's rules left it empty (the package
// function dropIfEmpty):
// with iptables-nft an empty table or base chain still registers its
// hooks. It reports whether to try again.
func (c *Chains) dropIfEmpty(table, chain string) (retry bool) {
	c.stats.Reads++
	return dropIfEmpty(c.t, table, chain, c.log)
}

// dropIfEmpty deletes table when it holds nothing but its built-in chains,
// empty and with policy ACCEPT, or with chain set only that built-in chain
// when it is empty with policy ACCEPT: with iptables-nft an empty table or
// base chain still registers its hooks (a nat table keeps conntrack and
// NAT on for every packet, a FORWARD chain costs every forwarded one). The
// deletion is committed only if the ruleset is still the one just read (no
// one added anything since). iptables-legacy cannot unregister a table or
// a built-in chain; it stays, empty. Failures are logged, not returned:
// routelet's chain or jump is gone, which is what was asked. It reports
// whether trying again may succeed (the read failed, or the ruleset
// changed in between), and makes one exec (the read).
func dropIfEmpty(t Table, table, chain string, log *slog.Logger) (retry bool) {
	what := "iptables table"
	if chain != "" {
		what = "iptables built-in chain"
	}
	gen, ok, err := t.Generation()
	if err != nil || !ok {
		log.Debug(what+" left in place (no nf_tables generation)", "table", table, "chain", chain, "err", err)
		return false
	}
	lines, err := t.ListTable(table)
	if err != nil {
		log.Warn(what+" not re-read after removing routelet's rules; left in place", "table", table, "chain", chain, "err", err)
		return true
	}
	if chain != "" {
		lines = splitTable(lines)[chain]
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 3 || f[0] != "-P" || f[2] != "ACCEPT" {
			return false // someone else's chain, rule or policy: theirs to keep
		}
	}
	if chain == "" {
		err = t.DeleteTable(table, gen)
	} else {
		err = t.DeleteBaseChain(table, chain, gen)
	}
	if err != nil {
		log.Warn("empty "+what+" not removed", "table", table, "chain", chain, "err", err)
		return errors.Is(err, ErrGenerationChanged)
	}
	log.Info(what+" empty after removing routelet's rules, removed", "table", table, "chain", chain)
	return false
}

// removeChain deletes every jump to ch from its built-in chain, each
// re-read by position just before (so a concurrent change never costs
// someone else's rule), then flushes and deletes ch, given the table's
// chains as read. It reports whether it wrote anything.
func (c *Chains) removeChain(ch Chain, chains map[string][]string) (bool, error) {
	pos, rules := jumpPositions(chains[ch.Hook], ch.Hook, ch.Name)
	_, exists := chains[ch.Name]
	if len(pos) == 0 && !exists {
		return false, nil
	}
	if err := c.deleteJumps(ch, pos, rules, "jumps to "+ch.Name, "jump"); err != nil {
		return true, err
	}
	if exists {
		c.stats.Writes += 2
		if err := c.t.ClearChain(ch.Table, ch.Name); err != nil {
			return true, fmt.Errorf("iptables flush %s/%s: %w", ch.Table, ch.Name, err)
		}
		if err := c.t.DeleteChain(ch.Table, ch.Name); err != nil {
			return true, fmt.Errorf("iptables delete %s/%s: %w", ch.Table, ch.Name, err)
		}
	}
	c.log.Info("iptables chain no longer wanted, removed", "table", ch.Table, "chain", ch.Name, "jumps", len(pos))
	return true, nil
}

// syncChain compares one chain's lines, as read from its table (exists
// false: the chain is missing), with want and, when they differ, replaces
// its rules as a whole: the new rules are appended after the old ones, then
// the old ones deleted from the top, so the chain is never empty and never
// edited rule by rule. It reports whether it wrote anything.
func (c *Chains) syncChain(ch Chain, want, lines []string, exists bool) (bool, error) {
	created := false
	if !exists {
		c.stats.Writes++
		if err := c.t.NewChain(ch.Table, ch.Name); err != nil {
			return false, fmt.Errorf("iptables chain %s/%s: missing, and cannot create it: %w", ch.Table, ch.Name, err)
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
// chain's -S listing that jump to target, whatever they match (routelet's
// own jump, one of an older form, or a copy someone added), and those
// rules' lines.
func jumpPositions(lines []string, hook, target string) (pos []int, rules []string) {
	n := 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "-A ") {
			continue
		}
		n++
		if isJump(l, hook, target) {
			pos, rules = append(pos, n), append(rules, l)
		}
	}
	return pos, rules
}

// isJump reports whether line, as `iptables -S` prints it, is a rule of
// built-in chain hook that jumps to target, in any form.
func isJump(line, hook, target string) bool {
	return strings.HasPrefix(line, "-A "+hook+" ") && strings.HasSuffix(line, " -j "+target)
}

// syncHook makes the jump to ch the first rule of its built-in chain, present
// once, given the built-in chain's lines as read from its table (none: the
// table lists no such chain, so it holds no jump). A missing or displaced
// jump is inserted at position 1 first, then the stale copies are deleted
// (add before delete: traffic always passes a jump). Each deletion is by
// position, re-checked with a one-rule read just before, so a concurrent
// change to the built-in chain never costs someone else's rule. It reports
// whether it wrote anything.
func (c *Chains) syncHook(ch Chain, lines []string) (bool, error) {
	pos, rules := jumpPositions(lines, ch.Hook, ch.Name)
	want := ch.JumpLine()
	if len(pos) == 1 && pos[0] == 1 && rules[0] == want {
		return false, nil
	}
	stale, staleRules := pos, rules
	if len(pos) == 0 || pos[0] != 1 || rules[0] != want {
		c.stats.Writes++
		args := append(strings.Fields(ch.Jump), "-j", ch.Name)
		if err := c.t.Insert(ch.Table, ch.Hook, 1, args...); err != nil {
			return true, fmt.Errorf("iptables insert jump %s/%s -> %s: %w", ch.Table, ch.Hook, ch.Name, err)
		}
		for i := range stale {
			stale[i]++
		}
		c.log.Info("iptables jump inserted first", "table", ch.Table, "chain", ch.Hook, "target", ch.Name, "stale_copies", len(stale))
	} else {
		stale, staleRules = pos[1:], rules[1:]
		c.log.Info("iptables duplicate jumps removed", "table", ch.Table, "chain", ch.Hook, "target", ch.Name, "copies", len(stale))
	}
	return true, c.deleteJumps(ch, stale, staleRules, "stale jumps", "stale jump")
}

// deleteJumps deletes the rules at positions pos (ascending) of ch's
// built-in chain, highest first, each re-read just before and compared
// with rules (what was read there), so a concurrent change to the chain
// never costs someone else's rule. Errors name the rules as what (plural)
// and one of them as kind.
func (c *Chains) deleteJumps(ch Chain, pos []int, rules []string, what, kind string) error {
	for i := len(pos) - 1; i >= 0; i-- {
		c.stats.Reads++
		rule, err := c.t.ListById(ch.Table, ch.Hook, pos[i])
		if err != nil {
			return fmt.Errorf("iptables read %s/%s rule %d: %w", ch.Table, ch.Hook, pos[i], err)
		}
		if strings.TrimSpace(rule) != rules[i] {
			return fmt.Errorf("iptables %s/%s changed while removing %s (rule %d is %q); will retry", ch.Table, ch.Hook, what, pos[i], rule)
		}
		c.stats.Writes++
		if err := c.t.DeleteById(ch.Table, ch.Hook, pos[i]); err != nil {
			return fmt.Errorf("iptables delete %s %s/%s rule %d: %w", kind, ch.Table, ch.Hook, pos[i], err)
		}
	}
	return nil
}

// Cleanup removes every jump to routelet's chains from the built-in chains,
// then flushes and deletes the chains, for the daemon's cleanup command. Run
// it before destroying the ipsets the rules use. Missing chains are fine,
// and a table that does not exist is not read (so not created); with
// nf_tables a table left empty by the removal is deleted. Each table
// is read once; jumps are deleted by position from that read, highest
// first. It is meant for a stopped daemon, not to race with other programs
// editing the same built-in chain (Chains.Check re-reads before each
// positional delete).
func Cleanup(t Table, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	var errs []error
	tables := map[string]map[string][]string{}
	emptied := map[string]bool{}
	for _, ch := range Known() {
		chains, ok := tables[ch.Table]
		if !ok {
			exists, err := t.HasTable(ch.Table)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("iptables cleanup: table %s: %w", ch.Table, err))
			case exists:
				lines, err := t.ListTable(ch.Table)
				if err != nil {
					errs = append(errs, fmt.Errorf("iptables cleanup: read table %s: %w", ch.Table, err))
				} else {
					chains = splitTable(lines)
				}
			default:
				chains = map[string][]string{} // no table: nothing of ours in it
			}
			tables[ch.Table] = chains
		}
		if chains == nil {
			continue // the read failed, reported above
		}
		pos, _ := jumpPositions(chains[ch.Hook], ch.Hook, ch.Name)
		for i := len(pos) - 1; i >= 0; i-- {
			if err := t.DeleteById(ch.Table, ch.Hook, pos[i]); err != nil {
				errs = append(errs, fmt.Errorf("iptables cleanup: delete jump %s/%s rule %d: %w", ch.Table, ch.Hook, pos[i], err))
			}
		}
		if len(pos) > 0 {
			emptied[ch.Table] = true
		}
		if _, exists := chains[ch.Name]; !exists {
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
		emptied[ch.Table] = true
		log.Debug("iptables chain removed", "component", "iptables", "table", ch.Table, "chain", ch.Name)
	}
	// A table routelet's chains were the only content of goes too (nft),
	// so no hook of it stays registered.
	for _, ch := range Known() {
		if emptied[ch.Table] {
			delete(emptied, ch.Table)
			dropIfEmpty(t, ch.Table, "", log)
		}
	}
	return errors.Join(errs...)
}
