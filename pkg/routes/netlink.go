package routes

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
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

// errClosed is returned by a realNetlink used after Close.
var errClosed = errors.New("netlink: closed")

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
	ls      *nl.SocketHandle // link dumps (see LinkList)
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
	if !r.ns.IsOpen() {
		// Never fall back to the calling thread's namespace.
		return nil, errClosed
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

// LinkList dumps the interfaces with a request of its own instead of the
// library's LinkList: the library decodes every attribute of every link
// (statistics, link info…), which at a thousand veths costs more than the
// route dump itself. This asks the kernel to skip statistics and decodes
// only the index, the flags and the name.
func (r *realNetlink) LinkList() ([]Link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var links []Link
	var err error
	for range dumpAttempts {
		links, err = r.linkDump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		if r.ls != nil {
			r.ls.Socket.Close()
			r.ls = nil
		}
		return nil, fmt.Errorf("netlink: list links: %w", err)
	}
	return links, nil
}

// rtextFilterSkipStats is RTEXT_FILTER_SKIP_STATS from linux/rtnetlink.h.
const rtextFilterSkipStats = 1 << 3

// linkDump runs one RTM_GETLINK dump on r.ls (opened in r.ns when needed).
// Caller holds mu.
func (r *realNetlink) linkDump() ([]Link, error) {
	if r.ls == nil {
		if !r.ns.IsOpen() {
			return nil, errClosed
		}
		s, err := nl.GetNetlinkSocketAt(r.ns, netns.None(), unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("open socket: %w", err)
		}
		if r.timeout > 0 {
			tv := unix.NsecToTimeval(r.timeout.Nanoseconds())
			if err := s.SetSendTimeout(&tv); err != nil {
				s.Close()
				return nil, err
			}
			if err := s.SetReceiveTimeout(&tv); err != nil {
				s.Close()
				return nil, err
			}
		}
		r.ls = &nl.SocketHandle{Socket: s}
	}
	// Sockets must be set: without it the library would open a socket in
	// the calling thread's namespace, which may not be ours.
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   unix.SizeofNlMsghdr,
			Type:  unix.RTM_GETLINK,
			Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP,
		},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: r.ls},
	}
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(rtextFilterSkipStats)))
	var links []Link
	err := req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWLINK, func(m []byte) bool {
		if len(m) < unix.SizeofIfInfomsg {
			return true
		}
		info := nl.DeserializeIfInfomsg(m)
		l := Link{Index: int(info.Index), Up: info.Flags&unix.IFF_UP != 0}
		for b := m[unix.SizeofIfInfomsg:]; len(b) >= unix.SizeofRtAttr; {
			alen := int(nl.NativeEndian().Uint16(b[0:2]))
			atype := nl.NativeEndian().Uint16(b[2:4]) & nl.NLA_TYPE_MASK
			if alen < unix.SizeofRtAttr || alen > len(b) {
				break
			}
			if atype == unix.IFLA_IFNAME {
				l.Name = strings.TrimRight(string(b[unix.SizeofRtAttr:alen]), "\x00")
				break
			}
			b = b[min((alen+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1), len(b)):]
		}
		if l.Name != "" {
			links = append(links, l)
		}
		return true
	})
	return links, err
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
	if r.ls != nil {
		r.ls.Socket.Close()
		r.ls = nil
	}
	if !r.ns.IsOpen() {
		return nil
	}
	err := r.ns.Close()
	r.ns = netns.None()
	return err
}
