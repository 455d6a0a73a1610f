package podguard

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// State is what Read found of one guard.
type State int

// The states Read reports.
const (
	OK         State = iota // chain and rules as desired
	Missing                 // no chain of that name in routelet's table
	WrongHook               // a chain of that name that is not the ingress base chain Ensure makes
	WrongRules              // the chain's rules differ from the rendered ones
)

// stateNames are the States' names, by value.
var stateNames = [...]string{OK: "ok", Missing: "missing", WrongHook: "wrong hook", WrongRules: "rules differ"}

// String names a State for logs and errors.
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state %d", int(s))
}

// Guards reads and writes the guards of one network namespace over an
// nf_tables netlink connection. It is not safe for concurrent use.
type Guards struct {
	c *nftables.Conn
}

// New opens a connection in the calling thread's network namespace (or
// the one nftables.WithNetNSFd names); nftables.AsLasting keeps one socket
// for every call, which Close then releases.
func New(opts ...nftables.ConnOption) (*Guards, error) {
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("pod guard: nf_tables connection: %w", err)
	}
	return &Guards{c: c}, nil
}

// Close releases a lasting connection; for others it does nothing.
func (g *Guards) Close() error { return g.c.CloseLasting() }

// Chains returns the chains of routelet's netdev table by name (one
// netlink dump of the family's chains; none when there is no table).
func (g *Guards) Chains() (map[string]*nftables.Chain, error) {
	all, err := g.c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return nil, fmt.Errorf("pod guard: list netdev chains: %w", err)
	}
	out := map[string]*nftables.Chain{}
	for _, ch := range all {
		if ch.Table != nil && ch.Table.Name == TableName {
			out[ch.Name] = ch
		}
	}
	return out, nil
}

// Chain reads the chain of device's guard by name (one GETCHAIN request,
// whatever the number of guards); ok is false when it or routelet's table
// does not exist.
func (g *Guards) Chain(device string) (ch *nftables.Chain, ok bool, err error) {
	ch, err = g.c.ListChain(table(), device)
	switch {
	case err == nil:
		return ch, true, nil
	case notFound(err):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("pod guard %s: read chain: %w", device, err)
}

// notFound reports whether err is the kernel's ENOENT. The nftables
// library formats the errno into its error text rather than wrapping it.
func notFound(err error) bool {
	return errors.Is(err, unix.ENOENT) || strings.HasSuffix(err.Error(), unix.ENOENT.Error())
}

// Read compares the guard of s.Device in the kernel with s: its chain is
// looked up in have (from Chains; nil: read by name) and its rules are
// read.
func (g *Guards) Read(s Spec, have map[string]*nftables.Chain) (State, error) {
	if err := s.Validate(); err != nil {
		return Missing, err
	}
	var ch *nftables.Chain
	var ok bool
	if have == nil {
		var err error
		if ch, ok, err = g.Chain(s.Device); err != nil {
			return Missing, err
		}
	} else {
		ch, ok = have[s.Device]
	}
	if !ok {
		return Missing, nil
	}
	if !rightHook(ch) {
		return WrongHook, nil
	}
	rules, err := g.rules(s.Device)
	if err != nil {
		return Missing, err
	}
	if !sameRules(Rules(s), rules) {
		return WrongRules, nil
	}
	return OK, nil
}

// rightHook reports whether ch is the base chain Ensure makes: type
// filter, ingress hook, priority 0, policy accept. (The library does not
// decode the hook's device; a chain is found by the device's name.)
func rightHook(ch *nftables.Chain) bool {
	return ch.Type == nftables.ChainTypeFilter &&
		ch.Hooknum != nil && *ch.Hooknum == *nftables.ChainHookIngress &&
		ch.Priority != nil && *ch.Priority == 0 &&
		ch.Policy != nil && *ch.Policy == nftables.ChainPolicyAccept
}

// rules reads the expressions of device's chain, rule by rule.
func (g *Guards) rules(device string) ([][]expr.Any, error) {
	rs, err := g.c.GetRules(table(), &nftables.Chain{Name: device, Table: table()})
	if err != nil {
		return nil, fmt.Errorf("pod guard %s: read rules: %w", device, err)
	}
	out := make([][]expr.Any, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Exprs)
	}
	return out, nil
}

// Ensure makes the kernel hold the guard of s and returns what it found
// before (OK: nothing was written). Whatever differs is rewritten in one
// nf_tables transaction: the table and chain are added when missing, a
// chain with the wrong hook is deleted and made again, and rules that
// differ are replaced as a whole, so the chain is never seen half-written. The
// device must exist on kernels that bind a chain to a device when it is
// made (6.1 answers ENOENT).
func (g *Guards) Ensure(s Spec) (State, error) {
	st, err := g.Read(s, nil)
	if err != nil || st == OK {
		return st, err
	}
	return st, g.write(s, st)
}

// Repair rewrites the guard of s, which Read found in state st (not OK).
func (g *Guards) Repair(s Spec, st State) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return g.write(s, st)
}

// write sends the transaction Ensure describes.
func (g *Guards) write(s Spec, st State) error {
	g.c.AddTable(table())
	ch := chain(s.Device)
	if st == WrongHook {
		g.c.DelChain(ch)
	}
	g.c.AddChain(ch)
	if st == WrongRules {
		g.c.FlushChain(ch)
	}
	for _, r := range Rules(s) {
		g.c.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: r})
	}
	if err := g.c.Flush(); err != nil {
		return fmt.Errorf("pod guard %s: write chain: %w", s.Device, err)
	}
	return nil
}

// Remove deletes the guard of device. A missing chain or table is success
// (a 6.1 kernel released the chain with its device).
func (g *Guards) Remove(device string) error {
	g.c.DelChain(&nftables.Chain{Name: device, Table: table()})
	if err := g.c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("pod guard %s: delete chain: %w", device, err)
	}
	return nil
}

// Cleanup deletes routelet's netdev table with every guard in it; a
// missing table is success.
func (g *Guards) Cleanup() error {
	g.c.DelTable(table())
	if err := g.c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("pod guard: delete table netdev %s: %w", TableName, err)
	}
	return nil
}

// Drops reads the drop counters of device's guard, by their rules'
// places in the order Rules renders them.
func (g *Guards) Drops(device string) (Drops, error) {
	rules, err := g.rules(device)
	if err != nil {
		return Drops{}, err
	}
	var d Drops
	counted := func(r []expr.Any) uint64 {
		for _, e := range r {
			if c, ok := e.(*expr.Counter); ok {
				return c.Packets
			}
		}
		return 0
	}
	n := len(rules)
	if n < minRules {
		return d, fmt.Errorf("pod guard %s: %d rules, not a guard", device, n)
	}
	d.Ethertype, d.VXLAN, d.IPIP = counted(rules[0]), counted(rules[1]), counted(rules[2])
	d.ARP, d.Spoof4, d.Spoof6 = counted(rules[n-3]), counted(rules[n-2]), counted(rules[n-1])
	return d, nil
}

// Stale returns the names of chains in have that are not in keep and whose
// device does not exist (exists answers that), sorted: what a collector
// may Remove. A chain whose device exists is never stale, so a guard the
// plugin's ADD wrote before the workload's record appeared is left alone.
func Stale(have map[string]*nftables.Chain, keep map[string]bool, exists func(string) (bool, error)) ([]string, error) {
	var out []string
	var errs []error
	for name := range have {
		if keep[name] {
			continue
		}
		ok, err := exists(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}
