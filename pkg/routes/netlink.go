package routes

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Link is the little the RouteTable needs to know about an interface.
type Link struct {
	Index int
	Name  string
	// Up is the administrative state (IFF_UP): the kernel refuses routes
	// through a device that is not up.
	Up bool
}

// ErrLinkNotFound is returned (wrapped) by Netlink.LinkByName when no
// interface has the name.
var ErrLinkNotFound = errors.New("link not found")

// Netlink is the narrow seam between the RouteTable and the kernel's
// rtnetlink: only the calls the RouteTable makes. Implementations need not be
// safe for concurrent use.
type Netlink interface {
	// LinkList lists every interface of the namespace.
	LinkList() ([]Link, error)
	// LinkByName returns one interface, or an error wrapping ErrLinkNotFound.
	LinkByName(name string) (Link, error)
	// RouteList dumps the routes of one family in one table; linkIndex > 0
	// restricts the dump to routes whose output interface is that link.
	RouteList(family, table, linkIndex int) ([]netlink.Route, error)
	// RouteReplace adds a route or replaces the one with the same kernel key
	// (table, destination, TOS, priority).
	RouteReplace(r *netlink.Route) error
	// RouteDel deletes a route; it fails with ESRCH when there is none.
	RouteDel(r *netlink.Route) error
	// NeighList dumps the neighbour (ARP/NDP) entries of one family.
	NeighList(family int) ([]netlink.Neigh, error)
	// NeighSet adds or replaces a neighbour entry.
	NeighSet(n *netlink.Neigh) error
	// NeighDel deletes a neighbour entry; it fails with ENOENT when there is none.
	NeighDel(n *netlink.Neigh) error
	// Close releases the sockets.
	Close() error
}

var _ Netlink = (*realNetlink)(nil)

// dumpAttempts bounds the retries of a dump the kernel reported as
// interrupted (NLM_F_DUMP_INTR: the table changed while it was being read).
const dumpAttempts = 5

// realNetlink implements Netlink with a vishvananda/netlink Handle bound to
// the network namespace that was current when it was created. The handle is
// opened lazily and thrown away after any error that may have left the socket
// in a bad state (a timeout leaves unread replies behind), so the next call
// starts on a fresh socket.
type realNetlink struct {
	mu      sync.Mutex // guards h; the RouteTable is single-threaded, this is belt and braces
	ns      netns.NsHandle
	timeout time.Duration
	h       *netlink.Handle
}

// newRealNetlink binds a Netlink to the calling thread's network namespace.
// The caller must hold its OS thread locked if it switched namespaces.
func newRealNetlink(timeout time.Duration) (*realNetlink, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netlink: get current netns: %w", err)
	}
	r := &realNetlink{ns: ns, timeout: timeout}
	if _, err := r.handle(); err != nil {
		ns.Close()
		return nil, err
	}
	return r, nil
}

// handle returns the open handle, creating it when needed. Caller holds mu.
func (r *realNetlink) handle() (*netlink.Handle, error) {
	if r.h != nil {
		return r.h, nil
	}
	h, err := netlink.NewHandleAt(r.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: open handle: %w", err)
	}
	if r.timeout > 0 {
		if err := h.SetSocketTimeout(r.timeout); err != nil {
			h.Close()
			return nil, fmt.Errorf("netlink: set socket timeout %s: %w", r.timeout, err)
		}
	}
	// Strict checking lets the kernel filter dumps by table and output
	// interface instead of sending everything; the library filters again in
	// user space, so an old kernel that refuses the option still works.
	_ = h.SetStrictCheck(true)
	r.h = h
	return h, nil
}

// done inspects err and drops the handle unless err is an ordinary answer
// from the kernel about the request itself.
func (r *realNetlink) done(err error) error {
	if err == nil || isBenignErr(err) {
		return err
	}
	if r.h != nil {
		r.h.Close()
		r.h = nil
	}
	return err
}

// isBenignErr reports errors that say something about the request (no such
// route, device down, bad gateway), not about the socket.
func isBenignErr(err error) bool {
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) || errors.Is(err, ErrLinkNotFound) {
		return true
	}
	for _, e := range []unix.Errno{unix.ESRCH, unix.ENOENT, unix.EEXIST, unix.ENODEV,
		unix.ENETDOWN, unix.ENETUNREACH, unix.EINVAL, unix.EHOSTUNREACH} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (r *realNetlink) LinkList() ([]Link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var links []netlink.Link
	var err error
	for range dumpAttempts {
		var h *netlink.Handle
		if h, err = r.handle(); err != nil {
			return nil, err
		}
		links, err = h.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, r.done(fmt.Errorf("netlink: list links: %w", err))
	}
	out := make([]Link, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		out = append(out, Link{Index: a.Index, Name: a.Name, Up: a.Flags&net.FlagUp != 0})
	}
	return out, nil
}

func (r *realNetlink) LinkByName(name string) (Link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return Link{}, err
	}
	l, err := h.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) || errors.Is(err, unix.ENODEV) {
			return Link{}, fmt.Errorf("netlink: link %q: %w", name, ErrLinkNotFound)
		}
		return Link{}, r.done(fmt.Errorf("netlink: link %q: %w", name, err))
	}
	a := l.Attrs()
	return Link{Index: a.Index, Name: a.Name, Up: a.Flags&net.FlagUp != 0}, nil
}

func (r *realNetlink) RouteList(family, table, linkIndex int) ([]netlink.Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	filter := &netlink.Route{Table: table, LinkIndex: linkIndex}
	mask := netlink.RT_FILTER_TABLE
	if linkIndex > 0 {
		mask |= netlink.RT_FILTER_OIF
	}
	var routes []netlink.Route
	var err error
	for range dumpAttempts {
		var h *netlink.Handle
		if h, err = r.handle(); err != nil {
			return nil, err
		}
		routes, err = h.RouteListFiltered(family, filter, mask)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, r.done(fmt.Errorf("netlink: list routes (table %d, link %d): %w", table, linkIndex, err))
	}
	return routes, nil
}

func (r *realNetlink) RouteReplace(rt *netlink.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return err
	}
	return r.done(h.RouteReplace(rt))
}

func (r *realNetlink) RouteDel(rt *netlink.Route) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return err
	}
	return r.done(h.RouteDel(rt))
}

func (r *realNetlink) NeighList(family int) ([]netlink.Neigh, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var neighs []netlink.Neigh
	var err error
	for range dumpAttempts {
		var h *netlink.Handle
		if h, err = r.handle(); err != nil {
			return nil, err
		}
		neighs, err = h.NeighList(0, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, r.done(fmt.Errorf("netlink: list neighbours: %w", err))
	}
	return neighs, nil
}

func (r *realNetlink) NeighSet(n *netlink.Neigh) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return err
	}
	return r.done(h.NeighSet(n))
}

func (r *realNetlink) NeighDel(n *netlink.Neigh) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return err
	}
	return r.done(h.NeighDel(n))
}

func (r *realNetlink) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h != nil {
		r.h.Close()
		r.h = nil
	}
	return r.ns.Close()
}
