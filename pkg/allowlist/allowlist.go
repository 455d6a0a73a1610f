package allowlist

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"sync"

	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
)

// Manager keeps the allowlist sets and routelet's chains of one node in
// line with the desired peers, pools and Config. Safe for concurrent use.
type Manager struct {
	sets *ipset.Sets
	// chains per family; IPv6 is absent when the node has no ip6tables.
	chains map[ipset.Family]*firewall.Chains
	log    *slog.Logger

	mu sync.Mutex
	// cfg, peers and pools are the desired state; guarded by mu.
	cfg firewall.Config
	// peers are the members of each peers set (firewall.PeerSets), by
	// base name.
	peers    map[string][]netip.Prefix
	pools    []netip.Prefix
	natPools []netip.Prefix
	// placed lists the set names handed to sets, to know which ones to
	// remove when the Config no longer needs them; guarded by mu.
	placed map[string]bool
	// changed says the desired state changed since place last handed
	// every needed set to sets; guarded by mu.
	changed bool
	// pruned is set once sets left behind by an earlier run or
	// configuration were looked for after a successful Apply; guarded by mu.
	pruned bool
}

// New returns a Manager that manages sets through k and IPv4 rules through
// v4; v6 may be nil (or a nil *firewall.IPTables) to leave IPv6 alone: no
// ip6tables rules, no -v6 sets.
// log may be nil.
func New(k ipset.Kernel, v4, v6 firewall.Table, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{
		sets:    ipset.NewSets(k, log),
		chains:  map[ipset.Family]*firewall.Chains{ipset.IPv4: firewall.New(v4, ipset.IPv4, log)},
		log:     log,
		peers:   map[string][]netip.Prefix{},
		placed:  map[string]bool{},
		changed: true,
	}
	if !isNil(v6) {
		m.chains[ipset.IPv6] = firewall.New(v6, ipset.IPv6, log)
	}
	return m
}

// isNil reports whether t is nil or an interface holding a nil pointer (a
// nil *firewall.IPTables passed as "no IPv6" must not count as a table).
func isNil(t firewall.Table) bool {
	if t == nil {
		return true
	}
	v := reflect.ValueOf(t)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// families returns the managed families in a fixed order.
func (m *Manager) families() []ipset.Family {
	if m.chains[ipset.IPv6] != nil {
		return []ipset.Family{ipset.IPv4, ipset.IPv6}
	}
	return []ipset.Family{ipset.IPv4}
}

// SetConfig sets which rules are wanted (encapsulations, port, devices, NAT
// outgoing); it is validated first.
func (m *Manager) SetConfig(cfg firewall.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg = cfg
	m.changed = true
	for _, c := range m.chains {
		if err := c.SetConfig(cfg); err != nil {
			return err
		}
	}
	return nil
}

// SetVXLANPeers sets the underlay addresses or CIDRs (either family) allowed
// to send VXLAN to this node: the other nodes' host IPs and any configured
// external node CIDRs.
func (m *Manager) SetVXLANPeers(peers []netip.Prefix) error {
	return m.SetPeers(ipset.VXLANPeers, peers)
}

// SetIPIPPeers sets the underlay addresses or CIDRs allowed to send IPIP;
// IPv6 entries are never used (IPIP is IPv4 only: its set has no twin).
func (m *Manager) SetIPIPPeers(peers []netip.Prefix) error {
	return m.SetPeers(ipset.IPIPPeers, peers)
}

// SetWireGuardPeers sets the underlay addresses or CIDRs (either family)
// allowed to send to the WireGuard port: the other nodes' host IPs.
func (m *Manager) SetWireGuardPeers(peers []netip.Prefix) error {
	return m.SetPeers(ipset.WireGuardPeers, peers)
}

// SetPeers sets the members of the peers set called set (a base name of
// firewall.PeerSets), either family: who may send that set's protocol to
// this node.
func (m *Manager) SetPeers(set string, peers []netip.Prefix) error {
	if !slices.Contains(firewall.PeerSets(), set) {
		return fmt.Errorf("allowlist: %q is not a peers set (want one of %q)", set, firewall.PeerSets())
	}
	for _, p := range peers {
		if err := checkPrefix(set+" member", p); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers[set] = slices.Clone(peers)
	m.changed = true
	return nil
}

// SetPools sets every pod CIDR of the cluster (either family): NAT outgoing
// leaves traffic between two of them alone.
func (m *Manager) SetPools(pools []netip.Prefix) error {
	return m.setList(&m.pools, "pool", pools)
}

// SetNATPools sets the pod CIDRs (either family) whose traffic NAT outgoing
// masquerades; an empty list (the default) means every pool of SetPools.
func (m *Manager) SetNATPools(pools []netip.Prefix) error {
	return m.setList(&m.natPools, "NAT pool", pools)
}

// checkPrefix refuses a prefix no set can hold, naming it as what.
func checkPrefix(what string, p netip.Prefix) error {
	if !p.IsValid() || p.Bits() == 0 || p.Addr().Is4In6() {
		return fmt.Errorf("allowlist: %s %v: want an IPv4 or IPv6 prefix longer than /0", what, p)
	}
	return nil
}

// setList validates ps and stores a copy in dst.
func (m *Manager) setList(dst *[]netip.Prefix, what string, ps []netip.Prefix) error {
	for _, p := range ps {
		if err := checkPrefix(what, p); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	*dst = slices.Clone(ps)
	m.changed = true
	return nil
}

// members returns the desired members of set base for family f.
func (m *Manager) members(base string, f ipset.Family) []netip.Prefix {
	src := m.peers[base]
	switch base {
	case ipset.Pools:
		src = m.pools
	case ipset.NATPools:
		src = m.natPools
		if len(src) == 0 {
			src = m.pools
		}
	}
	var out []netip.Prefix
	for _, p := range src {
		if p.Addr().Is4() == (f == ipset.IPv4) {
			out = append(out, p)
		}
	}
	return out
}

// place hands the desired members of every set the Config needs to sets
// (only when they may have changed since the last time it handed them all)
// and returns the names of placed sets no longer needed.
func (m *Manager) place() ([]string, error) {
	needed := map[string]bool{}
	var errs []error
	for _, f := range m.families() {
		for _, base := range firewall.Sets(m.cfg, f) {
			name := ipset.Name(base, f)
			needed[name] = true
			if !m.changed && m.placed[name] {
				continue
			}
			if err := m.sets.Set(name, f, m.members(base, f)); err != nil {
				errs = append(errs, err)
				continue
			}
			m.placed[name] = true
		}
	}
	m.changed = len(errs) > 0
	var unneeded []string
	for name := range m.placed {
		if !needed[name] {
			unneeded = append(unneeded, name)
		}
	}
	slices.Sort(unneeded)
	return unneeded, errors.Join(errs...)
}

// Apply reconciles: sets first, then chains, then the removal of sets no
// rule uses any more (only once every chain applied; the first successful
// Apply also looks for such sets left by an earlier run). It returns the joined
// errors; whatever failed stays dirty for the next Apply. With nothing
// changed it makes no netlink write and runs no iptables.
func (m *Manager) Apply() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	unneeded, err := m.place()
	errs := []error{err, m.sets.Apply()}
	chainsOK := true
	for _, f := range m.families() {
		if err := m.chains[f].Apply(); err != nil {
			chainsOK = false
			errs = append(errs, err)
		}
	}
	errs = append(errs, m.removeUnneeded(unneeded, chainsOK, !m.pruned))
	return errors.Join(errs...)
}

// removeUnneeded destroys the sets no rendered rule uses, once the chains
// that used them are known rewritten: names placed earlier in this run and,
// with prune, any other routelet set of a managed family that exists in the
// kernel without being needed (left by an earlier run or configuration, or a
// scratch set left by a crash). Pruning costs one names-only netlink dump.
func (m *Manager) removeUnneeded(names []string, chainsOK, prune bool) error {
	if !chainsOK {
		return nil
	}
	if prune {
		stale, err := m.sets.Stale(m.candidates())
		if err != nil {
			return err
		}
		m.pruned = true
		names = append(names, stale...)
	}
	if len(names) == 0 {
		return nil
	}
	for _, name := range names {
		m.sets.Remove(name)
		delete(m.placed, name)
	}
	return m.sets.Apply()
}

// candidates returns every set name the Manager could own for its families,
// scratch sets included; needed ones are filtered out by Sets.Stale.
func (m *Manager) candidates() []string {
	var out []string
	for _, f := range m.families() {
		for _, base := range append(firewall.PeerSets(), ipset.Pools, ipset.NATPools) {
			name := ipset.Name(base, f)
			out = append(out, name, name+ipset.TmpSuffix)
		}
	}
	return out
}

// Check re-reads every set (one netlink list each, plus one names-only dump
// to find sets no longer needed) and every chain and built-in chain (one
// `iptables -t filter -S` and one `iptables -t nat -S` per family), repairs
// what drifted and returns how many sets, chains or jumps needed repair. Sets go
// first so that a chain being recreated finds the sets its rules use.
func (m *Manager) Check() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	unneeded, err := m.place()
	errs := []error{err}
	n, err := m.sets.Check()
	errs = append(errs, err)
	chainsOK := true
	for _, f := range m.families() {
		r, err := m.chains[f].Check()
		n += r
		if err != nil {
			chainsOK = false
			errs = append(errs, err)
		}
	}
	errs = append(errs, m.removeUnneeded(unneeded, chainsOK, true))
	return n, errors.Join(errs...)
}

// Stats is the count of kernel calls a Manager made.
type Stats struct {
	NetlinkReads  int // ipset list dumps
	NetlinkWrites int // ipset create, destroy, add, del, swap, rename
	IptablesReads int // iptables -S execs (whole tables, single rules)
	IptablesExecs int // every iptables exec, reads included
}

// Stats returns the kernel calls made so far.
func (m *Manager) Stats() Stats {
	s := m.sets.Stats()
	out := Stats{NetlinkReads: s.Reads, NetlinkWrites: s.Writes}
	for _, c := range m.chains {
		cs := c.Stats()
		out.IptablesReads += cs.Reads
		out.IptablesExecs += cs.Reads + cs.Writes
	}
	return out
}

// Cleanup removes routelet's jumps and chains from v4 and v6 (either may be
// nil), then destroys every routelet set, for the daemon's cleanup command.
// Rules go first: the kernel refuses to destroy a set a rule uses.
func Cleanup(k ipset.Kernel, v4, v6 firewall.Table, log *slog.Logger) error {
	var errs []error
	for _, t := range []firewall.Table{v4, v6} {
		if !isNil(t) {
			errs = append(errs, firewall.Cleanup(t, log))
		}
	}
	errs = append(errs, ipset.Cleanup(k, log))
	return errors.Join(errs...)
}
