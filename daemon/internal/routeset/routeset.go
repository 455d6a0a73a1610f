// Package routeset keeps one manager's routes on one interface, per IP
// family, each family handed to its own route table by difference: the
// WireGuard manager's routes into its device, the BGP manager's learned
// routes on the uplink. It holds the one rule both follow for a route
// deleted behind the manager's back: it is drift, reported, and the next
// Apply re-reads the interface and puts it back.
package routeset

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/routelet/routelet/pkg/routes"
)

// RouteTable is the part of *routes.RouteTable a Set drives: the table of
// one IP family.
type RouteTable interface {
	RouteUpdate(iface string, t routes.Target)
	RouteRemove(iface string, cidr netip.Prefix)
	MarkDirty(iface string)
	Apply() error
}

var _ RouteTable = (*routes.RouteTable)(nil)

// Config says whose routes a Set keeps and where.
type Config struct {
	// Iface is the interface every route goes out by.
	Iface string
	// Owner names the manager in Apply's errors ("<Owner> IPv4 routes: …").
	Owner string
}

// family is one IP family's table and the targets last handed to it.
type family struct {
	v  int
	rt RouteTable
	// routes are the targets last handed to rt, by CIDR (masked). Guarded
	// by Set.mu.
	routes map[netip.Prefix]routes.Target
}

// Set is one interface's routes, one route table per IP family, handed to
// the tables by difference. Add, Set, Apply and Close run on the loop
// goroutine (the tables are not safe for concurrent use); Wanted, Routes,
// MarkDirty and Deleted are safe for concurrent use (the event handler and
// the snapshots call them).
type Set struct {
	cfg Config
	// fams are the families with a table, in the order added. Written
	// only by Add, before any other goroutine uses the Set.
	fams []*family

	mu    sync.Mutex
	dirty bool // the next Apply re-reads the interface's routes
}

// New returns a Set with no family yet. It starts dirty: the first Apply
// reads the interface's routes, so routes an earlier run left that are
// not wanted (nothing is until the first Set) are removed.
func New(cfg Config) *Set { return &Set{cfg: cfg, dirty: true} }

// Add gives family v (4 or 6) its route table rt, which the Set drives from
// then on (and closes in Close). It is called while the Set is made,
// before any other goroutine uses it; the error names a family that is
// not 4 or 6 or that has a table already.
func (s *Set) Add(v int, rt RouteTable) error {
	if v != 4 && v != 6 {
		return fmt.Errorf("%s routes: IP family %d is not 4 or 6", s.cfg.Owner, v)
	}
	if s.Has(v) {
		return fmt.Errorf("%s routes: IPv%d has a route table already", s.cfg.Owner, v)
	}
	s.fams = append(s.fams, &family{v: v, rt: rt, routes: map[netip.Prefix]routes.Target{}})
	return nil
}

// Families returns the families with a table, in the order added.
func (s *Set) Families() []int {
	out := make([]int, len(s.fams))
	for i, f := range s.fams {
		out[i] = f.v
	}
	return out
}

// Has reports whether family v has a table.
func (s *Set) Has(v int) bool { return s.family(v) != nil }

func (s *Set) family(v int) *family {
	for _, f := range s.fams {
		if f.v == v {
			return f
		}
	}
	return nil
}

// Set makes want (by masked CIDR, all of family v) family v's routes: its
// table is handed the targets that differ from the last ones, in CIDR
// order, and the removal of those no longer wanted. The Set keeps want (the
// caller does not change it afterwards). A family without a table keeps
// nothing.
func (s *Set) Set(v int, want map[netip.Prefix]routes.Target) {
	f := s.family(v)
	if f == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cidr := range slices.SortedFunc(maps.Keys(want), netip.Prefix.Compare) {
		t := want[cidr]
		if old, ok := f.routes[cidr]; !ok || !old.Equal(t) {
			f.rt.RouteUpdate(s.cfg.Iface, t)
		}
	}
	for cidr := range f.routes {
		if _, ok := want[cidr]; !ok {
			f.rt.RouteRemove(s.cfg.Iface, cidr)
		}
	}
	f.routes = want
}

// Routes returns a copy of family v's routes as last set (nil without a
// table).
func (s *Set) Routes(v int) map[netip.Prefix]routes.Target {
	f := s.family(v)
	if f == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(f.routes)
}

// Wanted reports whether dst is one of the routes wanted, in any family.
func (s *Set) Wanted(dst netip.Prefix) bool {
	dst = dst.Masked()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.fams {
		if _, ok := f.routes[dst]; ok {
			return true
		}
	}
	return false
}

// MarkDirty asks the next Apply to re-read the interface's routes in every
// family (after a link event, lost events, a periodic check).
func (s *Set) MarkDirty() {
	s.mu.Lock()
	s.dirty = true
	s.mu.Unlock()
}

// Deleted is the rule for a route deletion the event handler sees (dst
// deleted from iface): when iface is the Set's and dst is wanted, the
// route was deleted behind the owner's back. That is reported to onDrift
// when set (the manager's Config.OnDrift: "route", "<dst> dev <iface>"),
// the Set is marked dirty so that the next Apply puts the route back, and
// Deleted returns true: the caller wakes the loop. The echo of the Set's
// own removal is of a route no longer wanted, and returns false, as does
// any other interface's.
func (s *Set) Deleted(iface string, dst netip.Prefix, onDrift func(object, detail string)) bool {
	if iface != s.cfg.Iface || !s.Wanted(dst) {
		return false
	}
	if onDrift != nil {
		onDrift("route", dst.String()+" dev "+iface)
	}
	s.MarkDirty()
	return true
}

// Apply applies every family's table, after marking the interface dirty
// in each when MarkDirty (or New) asked for a re-read. Errors are joined,
// each naming the owner and the family; what failed is retried by the
// next Apply (the tables keep what they could not write).
func (s *Set) Apply() error {
	s.mu.Lock()
	dirty := s.dirty
	s.dirty = false
	s.mu.Unlock()
	var errs []error
	for _, f := range s.fams {
		if dirty {
			f.rt.MarkDirty(s.cfg.Iface)
		}
		if err := f.rt.Apply(); err != nil {
			errs = append(errs, fmt.Errorf("%s IPv%d routes: %w", s.cfg.Owner, f.v, err))
		}
	}
	return errors.Join(errs...)
}

// Close closes the tables that hold sockets (an io.Closer, as
// *routes.RouteTable is); the kernel's routes stay.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.fams {
		if c, ok := f.rt.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
