package ipset

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
)

// Fake is an in-memory Kernel for tests, here and in packages that drive
// Sets. It mirrors the kernel's answers (ErrNotExist, ErrTypeMismatch,
// ErrReferenced, idempotent Add/Del/Destroy), counts calls per operation and
// can fail chosen calls.
//
// Operation names, as used by Calls and Inject: "list", "listnames",
// "create", "destroy", "add", "del", "swap", "rename".
type Fake struct {
	mu sync.Mutex
	// sets by name; guarded by mu.
	sets map[string]*fakeSet
	// calls counts every call per operation, failed ones included.
	calls map[string]int
	// Inject, when set, is called before every operation with its name and
	// the set it targets; a non-nil result fails the call unchanged. It
	// runs with the Fake's lock held, so it must not call the Fake.
	Inject func(op, name string) error
}

type fakeSet struct {
	typ        string
	family     Family
	members    map[netip.Prefix]bool
	referenced bool
}

var _ Kernel = (*Fake)(nil)

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{sets: map[string]*fakeSet{}, calls: map[string]int{}}
}

// Calls returns how often op was called.
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Writes returns the number of calls that change the kernel (everything but
// list and listnames).
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for op, c := range f.calls {
		if op != "list" && op != "listnames" {
			n += c
		}
	}
	return n
}

// ResetCalls zeroes the call counters.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.calls)
}

// Put creates or replaces a set directly, as another program (or an older
// routelet) would have left it. typ "" means hash:net.
func (f *Fake) Put(name, typ string, family Family, members ...netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if typ == "" {
		typ = HashNet
	}
	s := &fakeSet{typ: typ, family: family, members: map[netip.Prefix]bool{}}
	for _, p := range members {
		s.members[p] = true
	}
	f.sets[name] = s
}

// SetReferenced marks a set as used by a rule (or not): a referenced set
// cannot be destroyed or renamed, as in the kernel.
func (f *Fake) SetReferenced(name string, ref bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.sets[name]; s != nil {
		s.referenced = ref
	}
}

// Snapshot returns the members of every set, sorted, keyed by name.
func (f *Fake) Snapshot() map[string][]netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]netip.Prefix{}
	for name, s := range f.sets {
		out[name] = sortedPrefixes(s.members)
	}
	return out
}

func (f *Fake) begin(op, name string) error {
	f.calls[op]++
	if f.Inject != nil {
		return f.Inject(op, name)
	}
	return nil
}

// List implements Kernel.
func (f *Fake) List(name string) (Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin("list", name); err != nil {
		return Info{}, err
	}
	s := f.sets[name]
	if s == nil {
		return Info{}, fmt.Errorf("fake list %q: %w", name, ErrNotExist)
	}
	return Info{Name: name, Type: s.typ, Family: s.family, Members: sortedPrefixes(s.members)}, nil
}

// ListNames implements Kernel.
func (f *Fake) ListNames() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin("listnames", ""); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(f.sets)), nil
}

// Create implements Kernel.
func (f *Fake) Create(name string, family Family, maxElem uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin("create", name); err != nil {
		return err
	}
	if f.sets[name] != nil {
		return fmt.Errorf("fake create %q: set exists", name)
	}
	f.sets[name] = &fakeSet{typ: HashNet, family: family, members: map[netip.Prefix]bool{}}
	return nil
}

// Destroy implements Kernel.
func (f *Fake) Destroy(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin("destroy", name); err != nil {
		return err
	}
	if s := f.sets[name]; s != nil && s.referenced {
		return fmt.Errorf("fake destroy %q: %w", name, ErrReferenced)
	}
	delete(f.sets, name)
	return nil
}

// Add implements Kernel.
func (f *Fake) Add(name string, p netip.Prefix) error {
	return f.member("add", name, p, true)
}

// Del implements Kernel.
func (f *Fake) Del(name string, p netip.Prefix) error {
	return f.member("del", name, p, false)
}

func (f *Fake) member(op, name string, p netip.Prefix, add bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(op, name); err != nil {
		return err
	}
	s := f.sets[name]
	if s == nil {
		return fmt.Errorf("fake %s %s %q: %w", op, p, name, ErrNotExist)
	}
	if p.Addr().Is4() != (s.family == IPv4) {
		return fmt.Errorf("fake %s %s %q: wrong family for a %s set", op, p, name, s.family)
	}
	if add {
		s.members[p] = true
	} else {
		delete(s.members, p)
	}
	return nil
}

// Swap implements Kernel.
func (f *Fake) Swap(a, b string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin("swap", a); err != nil {
		return err
	}
	sa, sb := f.sets[a], f.sets[b]
	if sa == nil || sb == nil {
		return fmt.Errorf("fake swap %q %q: %w", a, b, ErrNotExist)
	}
	if sa.typ != sb.typ || sa.family != sb.family {
		return fmt.Errorf("fake swap %q %q: %w", a, b, ErrTypeMismatch)
	}
	// References stay with the name, contents move.
	sa.members, sb.members = sb.members, sa.members
	return nil
}

// Rename implements Kernel.
func (f *Fake) Rename(from, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin("rename", from); err != nil {
		return err
	}
	s := f.sets[from]
	if s == nil {
		return fmt.Errorf("fake rename %q: %w", from, ErrNotExist)
	}
	if s.referenced {
		return fmt.Errorf("fake rename %q: %w", from, ErrReferenced)
	}
	if f.sets[to] != nil {
		return fmt.Errorf("fake rename %q %q: target exists", from, to)
	}
	delete(f.sets, from)
	f.sets[to] = s
	return nil
}

// sortedPrefixes returns the keys of m in a stable order.
func sortedPrefixes[V any](m map[netip.Prefix]V) []netip.Prefix {
	out := slices.Collect(maps.Keys(m))
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Compare(b) })
	return out
}
