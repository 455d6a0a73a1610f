package ipsettest

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/routelet/routelet/internal/fakekernel"
	"github.com/routelet/routelet/pkg/ipset"
)

// Fake is an in-memory ipset.Kernel for tests of ipset.Sets and of the
// packages that drive it. It mirrors the kernel's answers (ErrNotExist, ErrTypeMismatch,
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
	calls fakekernel.Calls
	// Inject, when set, is called before every operation with its name and
	// the set it targets; a non-nil result fails the call unchanged. It
	// runs with the Fake's lock held, so it must not call the Fake.
	Inject func(op, name string) error
}

type fakeSet struct {
	typ        string
	family     ipset.Family
	members    map[netip.Prefix]bool
	referenced bool
}

var _ ipset.Kernel = (*Fake)(nil)

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{sets: map[string]*fakeSet{}}
}

// Calls returns how often op was called.
func (f *Fake) Calls(op string) int { return f.calls.Count(op) }

// Writes returns the number of calls that change the kernel (everything but
// list and listnames).
func (f *Fake) Writes() int { return f.calls.Total("list", "listnames") }

// ResetCalls zeroes the call counters.
func (f *Fake) ResetCalls() { f.calls.Reset() }

// Put creates or replaces a set directly, as another program (or an older
// routelet) would have left it. typ "" means hash:net.
func (f *Fake) Put(name, typ string, family ipset.Family, members ...netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if typ == "" {
		typ = ipset.HashNet
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
		out[name] = slices.SortedFunc(maps.Keys(s.members), netip.Prefix.Compare)
	}
	return out
}

// do runs fn as a call of op on the set name with f.mu held: counted, and
// failed without running fn when Inject fails it.
func (f *Fake) do(op, name string, fn func() error) error {
	return f.calls.Do(&f.mu, op, func() error {
		if f.Inject != nil {
			if err := f.Inject(op, name); err != nil {
				return err
			}
		}
		return fn()
	})
}

// List implements Kernel.
func (f *Fake) List(name string) (info ipset.Info, err error) {
	err = f.do("list", name, func() error {
		s := f.sets[name]
		if s == nil {
			return fmt.Errorf("fake list %q: %w", name, ipset.ErrNotExist)
		}
		info = ipset.Info{Name: name, Type: s.typ, Family: s.family, Members: slices.SortedFunc(maps.Keys(s.members), netip.Prefix.Compare)}
		return nil
	})
	return info, err
}

// ListNames implements Kernel.
func (f *Fake) ListNames() (names []string, err error) {
	err = f.do("listnames", "", func() error {
		names = slices.Sorted(maps.Keys(f.sets))
		return nil
	})
	return names, err
}

// Create implements Kernel.
func (f *Fake) Create(name string, family ipset.Family, maxElem uint32) error {
	return f.do("create", name, func() error {
		if f.sets[name] != nil {
			return fmt.Errorf("fake create %q: set exists", name)
		}
		f.sets[name] = &fakeSet{typ: ipset.HashNet, family: family, members: map[netip.Prefix]bool{}}
		return nil
	})
}

// Destroy implements Kernel.
func (f *Fake) Destroy(name string) error {
	return f.do("destroy", name, func() error {
		if s := f.sets[name]; s != nil && s.referenced {
			return fmt.Errorf("fake destroy %q: %w", name, ipset.ErrReferenced)
		}
		delete(f.sets, name)
		return nil
	})
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
	return f.do(op, name, func() error {
		s := f.sets[name]
		if s == nil {
			return fmt.Errorf("fake %s %s %q: %w", op, p, name, ipset.ErrNotExist)
		}
		if p.Addr().Is4() != (s.family == ipset.IPv4) {
			return fmt.Errorf("fake %s %s %q: wrong family for a %s set", op, p, name, s.family)
		}
		if add {
			s.members[p] = true
		} else {
			delete(s.members, p)
		}
		return nil
	})
}

// Swap implements Kernel.
func (f *Fake) Swap(a, b string) error {
	return f.do("swap", a, func() error {
		sa, sb := f.sets[a], f.sets[b]
		if sa == nil || sb == nil {
			return fmt.Errorf("fake swap %q %q: %w", a, b, ipset.ErrNotExist)
		}
		if sa.typ != sb.typ || sa.family != sb.family {
			return fmt.Errorf("fake swap %q %q: %w", a, b, ipset.ErrTypeMismatch)
		}
		// References stay with the name, contents move.
		sa.members, sb.members = sb.members, sa.members
		return nil
	})
}

// Rename implements Kernel.
func (f *Fake) Rename(from, to string) error {
	return f.do("rename", from, func() error {
		s := f.sets[from]
		if s == nil {
			return fmt.Errorf("fake rename %q: %w", from, ipset.ErrNotExist)
		}
		if s.referenced {
			return fmt.Errorf("fake rename %q: %w", from, ipset.ErrReferenced)
		}
		if f.sets[to] != nil {
			return fmt.Errorf("fake rename %q %q: target exists", from, to)
		}
		delete(f.sets, from)
		f.sets[to] = s
		return nil
	})
}
