package ipset

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
)

// DefaultMaxElem is the maxelem sets are created with. The kernel allocates
// hash buckets as members arrive, so a high limit costs nothing up front.
const DefaultMaxElem = 1 << 20

// rewriteMinChanges and the half-the-set rule decide when a difference is
// "large": above both, a set is rebuilt in a scratch set and swapped in
// atomically rather than changed member by member.
const rewriteMinChanges = 16

// Stats counts the kernel calls a Sets made, by kind.
type Stats struct {
	Reads  int // List and ListNames calls
	Writes int // Create, Destroy, Add, Del, Swap, Rename calls
}

// Sets keeps a group of routelet's hash:net sets in the kernel in line with
// the desired members held in memory.
//
// Setters (Set, Remove) touch memory only and mark the set dirty; Apply
// reconciles dirty sets; a set whose reconciliation failed stays dirty and
// its kernel view is forgotten, so the next Apply re-reads it. Check re-reads
// every desired set and repairs drift. All methods are safe for concurrent
// use; kernel calls happen with the mutex held.
type Sets struct {
	k       Kernel
	log     *slog.Logger
	maxElem uint32

	mu sync.Mutex
	// desired holds the wanted family and members per set name; guarded by mu.
	desired map[string]*memberSet
	// actual is the last known kernel view per name, kept in step with each
	// successful call; a missing key means unknown (re-read before use);
	// guarded by mu. When the kernel holds what is desired it is the
	// desired memberSet itself (which is never changed: Set replaces it),
	// so a set's members are kept once, not twice; a view that differs is
	// its own and is changed in place as the kernel is.
	actual map[string]*memberSet
	// dirty names need reconciling (including names removed from desired,
	// whose sets are to be destroyed); guarded by mu.
	dirty map[string]bool
	// stats counts kernel calls; guarded by mu.
	stats Stats
}

// memberSet is a set's type, family and members, desired or as the kernel
// has it. exists is false for a set known to be absent from the kernel.
type memberSet struct {
	exists  bool
	typ     string
	family  Family
	members map[netip.Prefix]struct{}
}

// NewSets returns a Sets that manages sets through k; log may be nil.
func NewSets(k Kernel, log *slog.Logger) *Sets {
	if log == nil {
		log = slog.Default()
	}
	return &Sets{
		k:       k,
		log:     log.With("component", "ipset"),
		maxElem: DefaultMaxElem,
		desired: map[string]*memberSet{},
		actual:  map[string]*memberSet{},
		dirty:   map[string]bool{},
	}
}

// Set makes members the desired content of the set called name, of the given
// family. It validates everything before changing anything: the name must
// carry routelet's prefix, every member must be a prefix of that family with
// a length of at least 1 (hash:net cannot hold /0). Host bits are cleared.
// An unchanged set is not marked dirty.
func (s *Sets) Set(name string, family Family, members []netip.Prefix) error {
	if err := validName(name); err != nil {
		return err
	}
	if family != IPv4 && family != IPv6 {
		return fmt.Errorf("ipset %q: unknown family %d", name, family)
	}
	want := &memberSet{exists: true, typ: HashNet, family: family, members: make(map[netip.Prefix]struct{}, len(members))}
	for _, p := range members {
		if !p.IsValid() {
			return fmt.Errorf("ipset %q: invalid member %v", name, p)
		}
		if p.Addr().Is4() != (family == IPv4) || p.Addr().Is4In6() {
			return fmt.Errorf("ipset %q: member %s is not an %s prefix", name, p, family)
		}
		if p.Bits() == 0 {
			return fmt.Errorf("ipset %q: member %s: hash:net cannot hold a /0", name, p)
		}
		want.members[p.Masked()] = struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.desired[name]; old != nil && old.family == family && maps.Equal(old.members, want.members) {
		return nil
	}
	s.desired[name] = want
	s.dirty[name] = true
	return nil
}

// Remove drops the set called name from the desired state: the next Apply
// destroys it (a missing set is fine). Rules that use it must be gone by
// then (the kernel refuses to destroy a referenced set; Apply keeps
// retrying). Names without routelet's prefix are ignored.
func (s *Sets) Remove(name string) {
	if !Owned(name) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.desired, name)
	s.dirty[name] = true
}

// Stale returns those of candidates that exist in the kernel but are not
// desired — what an earlier run or configuration left behind, for the
// caller to Remove once no rule uses them. It costs one names-only dump.
func (s *Sets) Stale(candidates []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Reads++
	names, err := s.k.ListNames()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range names {
		if Owned(name) && slices.Contains(candidates, name) && s.desired[name] == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Members returns the desired members of name, sorted, and whether it is
// desired at all.
func (s *Sets) Members(name string) ([]netip.Prefix, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.desired[name]
	if d == nil {
		return nil, false
	}
	return sortedPrefixes(d.members), true
}

// Stats returns the kernel calls made so far.
func (s *Sets) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Dirty reports whether some set still needs reconciling.
func (s *Sets) Dirty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.dirty) > 0
}

// Apply reconciles every dirty set with the kernel, in name order, and
// returns the joined errors of the sets that failed; those stay dirty. With
// nothing dirty it makes no kernel call.
func (s *Sets) Apply() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked()
}

func (s *Sets) applyLocked() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.dirty)) {
		if err := s.applyOne(name); err != nil {
			delete(s.actual, name) // unknown now: re-read on the next try
			s.log.Warn("ipset apply failed", "set", name, "err", err)
			errs = append(errs, err)
			continue
		}
		delete(s.dirty, name)
	}
	return errors.Join(errs...)
}

// Check re-reads every desired set from the kernel (one List each), marks the
// ones that differ from the desired state dirty and applies. It returns the
// number of sets that had drifted. This is the full resync: there is no
// cheaper per-set read that would catch a replaced member.
func (s *Sets) Check() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	drifted := 0
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.desired)) {
		cur, err := s.read(name)
		if err != nil {
			delete(s.actual, name)
			s.dirty[name] = true
			errs = append(errs, err)
			continue
		}
		if same(cur, s.desired[name]) {
			s.actual[name] = s.desired[name]
		} else {
			s.actual[name] = cur
			s.log.Warn("ipset drifted from desired state; repairing", "set", name,
				"exists", cur.exists, "type", cur.typ, "family", cur.family, "members", len(cur.members),
				"want", len(s.desired[name].members))
			s.dirty[name] = true
			drifted++
		}
	}
	errs = append(errs, s.applyLocked())
	return drifted, errors.Join(errs...)
}

// same reports whether the kernel view cur matches desired want.
func same(cur, want *memberSet) bool {
	return cur.exists && cur.typ == HashNet && cur.family == want.family && maps.Equal(cur.members, want.members)
}

// read lists name from the kernel; a missing set is a memberSet with exists
// false, not an error.
func (s *Sets) read(name string) (*memberSet, error) {
	s.stats.Reads++
	info, err := s.k.List(name)
	if errors.Is(err, ErrNotExist) {
		return &memberSet{members: map[netip.Prefix]struct{}{}}, nil
	}
	if err != nil {
		return nil, err
	}
	cur := &memberSet{exists: true, typ: info.Type, family: info.Family, members: make(map[netip.Prefix]struct{}, len(info.Members))}
	for _, p := range info.Members {
		cur.members[p] = struct{}{}
	}
	return cur, nil
}

// applyOne brings one set in line: destroy when no longer desired, rewrite
// when missing or of the wrong type or family or when the difference is
// large, otherwise add the missing members and then delete the extra ones.
func (s *Sets) applyOne(name string) error {
	want := s.desired[name]
	if want == nil {
		s.stats.Writes++
		if err := s.k.Destroy(name); err != nil && !errors.Is(err, ErrNotExist) {
			return err
		}
		s.log.Debug("ipset destroyed", "set", name)
		delete(s.actual, name)
		return nil
	}
	cur := s.actual[name]
	if cur == nil {
		var err error
		if cur, err = s.read(name); err != nil {
			return err
		}
		s.actual[name] = cur
	}
	if !cur.exists || cur.typ != HashNet || cur.family != want.family {
		return s.rewrite(name, want, cur)
	}
	var adds, dels []netip.Prefix
	for p := range want.members {
		if _, ok := cur.members[p]; !ok {
			adds = append(adds, p)
		}
	}
	for p := range cur.members {
		if _, ok := want.members[p]; !ok {
			dels = append(dels, p)
		}
	}
	changes := len(adds) + len(dels)
	if changes == 0 {
		s.actual[name] = want // as read: keep the members once
		return nil
	}
	if changes > rewriteMinChanges && changes > len(want.members)/2 {
		return s.rewrite(name, want, cur)
	}
	// Add before delete: the set only ever holds a superset of the old or
	// the new members while it changes.
	for _, p := range adds {
		s.stats.Writes++
		if err := s.k.Add(name, p); err != nil {
			return err
		}
		cur.members[p] = struct{}{}
		s.log.Debug("ipset member added", "set", name, "cidr", p)
	}
	for _, p := range dels {
		s.stats.Writes++
		if err := s.k.Del(name, p); err != nil {
			return err
		}
		delete(cur.members, p)
		s.log.Debug("ipset member deleted", "set", name, "cidr", p)
	}
	s.actual[name] = want // the kernel holds it now
	return nil
}

// rewrite builds the desired set in name's scratch set and moves it in
// atomically: renamed into place when name does not exist, swapped when it
// does. A set of another type or family cannot be swapped; it is destroyed
// (which the kernel refuses while a rule uses it) and the scratch set renamed.
func (s *Sets) rewrite(name string, want, cur *memberSet) error {
	tmp := tmpName(name)
	s.stats.Writes++
	if err := s.k.Destroy(tmp); err != nil && !errors.Is(err, ErrNotExist) {
		return fmt.Errorf("ipset %q: clear scratch set: %w", name, err)
	}
	s.stats.Writes++
	if err := s.k.Create(tmp, want.family, s.maxElem); err != nil {
		return err
	}
	for _, p := range sortedPrefixes(want.members) {
		s.stats.Writes++
		if err := s.k.Add(tmp, p); err != nil {
			return err
		}
	}
	if !cur.exists {
		s.stats.Writes++
		if err := s.k.Rename(tmp, name); err != nil {
			return err
		}
		s.log.Debug("ipset created", "set", name, "family", want.family, "members", len(want.members))
	} else {
		s.stats.Writes++
		err := s.k.Swap(tmp, name)
		if errors.Is(err, ErrTypeMismatch) {
			s.log.Info("ipset has the wrong type or family; replacing it", "set", name,
				"type", cur.typ, "family", cur.family, "want_family", want.family)
			s.stats.Writes++
			if err := s.k.Destroy(name); err != nil {
				return fmt.Errorf("ipset %q is %s %s, want %s %s, and cannot be replaced: %w",
					name, cur.typ, cur.family, HashNet, want.family, err)
			}
			s.stats.Writes++
			err = s.k.Rename(tmp, name)
		} else if err == nil {
			s.stats.Writes++
			err = s.k.Destroy(tmp) // now holds the old members
		}
		if err != nil {
			return err
		}
		s.log.Debug("ipset rewritten", "set", name, "family", want.family, "members", len(want.members))
	}
	s.actual[name] = want
	return nil
}

// Cleanup destroys every set routelet owns (name prefix Prefix), scratch sets
// included, for the daemon's cleanup command. Rules that use them must be
// removed first. It returns the joined errors of the sets it could not
// destroy.
func Cleanup(k Kernel, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	names, err := k.ListNames()
	if err != nil {
		return fmt.Errorf("ipset cleanup: %w", err)
	}
	var errs []error
	for _, name := range names {
		if !Owned(name) {
			continue
		}
		if err := k.Destroy(name); err != nil && !errors.Is(err, ErrNotExist) {
			errs = append(errs, fmt.Errorf("ipset cleanup: %w", err))
			continue
		}
		log.Debug("ipset destroyed", "component", "ipset", "set", name)
	}
	return errors.Join(errs...)
}

// sortedPrefixes returns the keys of m in a stable order.
func sortedPrefixes[V any](m map[netip.Prefix]V) []netip.Prefix {
	out := slices.Collect(maps.Keys(m))
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Compare(b) })
	return out
}
