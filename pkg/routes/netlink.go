package routes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
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
	// RouteReplaceMany does RouteReplace for each route, in order, and
	// returns one error per route; implementations may pipeline.
	RouteReplaceMany(rs []*netlink.Route) []error
	// RouteAdd creates a route and never overwrites one: it fails with
	// EEXIST when the table already holds a route under the same kernel key
	// (NLM_F_CREATE|NLM_F_EXCL).
	RouteAdd(r *netlink.Route) error
	// RouteAddMany does RouteAdd for each route, in order, and returns one
	// error per route; implementations may pipeline.
	RouteAddMany(rs []*netlink.Route) []error
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

// realNetlink implements Netlink in the network namespace that was current
// when it was created, with two sockets opened there: a vishvananda/netlink
// Handle for single requests (LinkByName, RouteReplace, RouteDel, neighbours)
// and a raw rtnetlink socket for the hot paths the library makes slow (link
// and route dumps, pipelined replaces). Both are opened lazily and thrown
// away after any error that may have left them in a bad state (a timeout
// leaves unread replies behind), so the next call starts afresh.
type realNetlink struct {
	mu      sync.Mutex // guards h and raw; the RouteTable is single-threaded, this is belt and braces
	ns      netns.NsHandle
	timeout time.Duration
	h       *netlink.Handle
	raw     *nl.SocketHandle
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
	// No strict checking on this socket: the library's neighbour dump
	// request carries uninitialised padding that strict mode rejects
	// (EINVAL, seen under the race detector). Route and link dumps use the
	// raw socket, which has it.
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
	if nlutil.NotFound(err) || errors.Is(err, ErrLinkNotFound) {
		return true
	}
	for _, e := range []unix.Errno{unix.EEXIST, unix.ENETDOWN, unix.ENETUNREACH, unix.EINVAL, unix.EHOSTUNREACH} {
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
	links, err := nlutil.Retry(r.linkDump)
	if err != nil {
		r.closeRawSocket()
		return nil, fmt.Errorf("netlink: list links: %w", err)
	}
	return links, nil
}

// dumpRequest is an empty dump request of type typ bound to sock. Sockets
// must be set: without it the library would open a socket in the calling
// thread's namespace, which may not be ours.
func dumpRequest(sock *nl.SocketHandle, typ uint16) *nl.NetlinkRequest {
	return &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   unix.SizeofNlMsghdr,
			Type:  typ,
			Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP,
		},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: sock},
	}
}

// rtextFilterSkipStats is RTEXT_FILTER_SKIP_STATS from linux/rtnetlink.h.
const rtextFilterSkipStats = 1 << 3

// linkDump runs one RTM_GETLINK dump on r.raw (opened in r.ns when needed).
// Caller holds mu.
func (r *realNetlink) linkDump() ([]Link, error) {
	sock, err := r.rawSocket()
	if err != nil {
		return nil, err
	}
	req := dumpRequest(sock, unix.RTM_GETLINK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(rtextFilterSkipStats)))
	var links []Link
	err = req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWLINK, func(m []byte) bool {
		if l, ok := decodeLink(m); ok {
			links = append(links, l)
		}
		return true
	})
	return links, err
}

// decodeLink decodes the index, the IFF_UP flag and the name of an
// RTM_NEWLINK message; ok is false for a message too short to be one or
// without a name.
func decodeLink(m []byte) (l Link, ok bool) {
	if len(m) < unix.SizeofIfInfomsg {
		return Link{}, false
	}
	info := nl.DeserializeIfInfomsg(m)
	l = Link{Index: int(info.Index), Up: info.Flags&unix.IFF_UP != 0}
	ne := nl.NativeEndian()
	for b := m[unix.SizeofIfInfomsg:]; len(b) >= unix.SizeofRtAttr; {
		alen := int(ne.Uint16(b[0:2]))
		atype := ne.Uint16(b[2:4]) & nl.NLA_TYPE_MASK
		if alen < unix.SizeofRtAttr || alen > len(b) {
			break
		}
		if atype == unix.IFLA_IFNAME {
			l.Name = strings.TrimRight(string(b[unix.SizeofRtAttr:alen]), "\x00")
			break
		}
		b = b[min(rtaAlign(alen), len(b)):]
	}
	return l, l.Name != ""
}

// LinkByName implements Netlink.
func (r *realNetlink) LinkByName(name string) (Link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return Link{}, err
	}
	l, err := h.LinkByName(name)
	if err != nil {
		if nlutil.LinkNotFound(err) {
			return Link{}, fmt.Errorf("netlink: link %q: %w", name, ErrLinkNotFound)
		}
		return Link{}, r.done(fmt.Errorf("netlink: link %q: %w", name, err))
	}
	a := l.Attrs()
	return Link{Index: a.Index, Name: a.Name, Up: a.Flags&net.FlagUp != 0}, nil
}

// RouteList dumps routes with a request of its own and decodes only the
// attributes the RouteTable compares (the library's decoder allocates a
// little for every attribute it knows, which at 10,000 routes is most of a
// resync's CPU). The kernel filters by table and interface (strict check);
// the same filters are applied here again for kernels that ignore them.
func (r *realNetlink) RouteList(family, table, linkIndex int) ([]netlink.Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	routes, err := nlutil.Retry(func() ([]netlink.Route, error) { return r.routeDump(family, table, linkIndex) })
	if err != nil {
		if !isBenignErr(err) {
			r.closeRawSocket()
		}
		return nil, fmt.Errorf("netlink: list routes (table %d, link %d): %w", table, linkIndex, err)
	}
	return routes, nil
}

// routeDump runs one RTM_GETROUTE dump. Caller holds mu.
func (r *realNetlink) routeDump(family, table, linkIndex int) ([]netlink.Route, error) {
	sock, err := r.rawSocket()
	if err != nil {
		return nil, err
	}
	req := dumpRequest(sock, unix.RTM_GETROUTE)
	hdr := &nl.RtMsg{RtMsg: unix.RtMsg{Family: uint8(family)}}
	if table < 256 {
		hdr.Table = uint8(table)
	}
	req.AddData(hdr)
	if table >= 256 {
		req.AddData(nl.NewRtAttr(unix.RTA_TABLE, nl.Uint32Attr(uint32(table))))
	}
	if linkIndex > 0 {
		req.AddData(nl.NewRtAttr(unix.RTA_OIF, nl.Uint32Attr(uint32(linkIndex))))
	}
	var routes []netlink.Route
	err = req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWROUTE, func(m []byte) bool {
		rt, ok := decodeRoute(m)
		if ok && rt.Family == family && rt.Table == table && (linkIndex == 0 || rt.LinkIndex == linkIndex) {
			routes = append(routes, rt)
		}
		return true
	})
	if errors.Is(err, unix.ENOENT) {
		// With strict checking the kernel answers ENOENT for a table that
		// does not exist yet: it is empty.
		return nil, nil
	}
	return routes, err
}

// decodeRoute decodes the parts of an RTM_NEWROUTE message the RouteTable
// uses. Multipath routes get a one-element MultiPath (their hops are not
// decoded), which marks them as never ours. Cloned (cache) entries are
// skipped.
func decodeRoute(m []byte) (netlink.Route, bool) {
	if len(m) < unix.SizeofRtMsg {
		return netlink.Route{}, false
	}
	h := nl.DeserializeRtMsg(m)
	if h.Flags&unix.RTM_F_CLONED != 0 {
		return netlink.Route{}, false
	}
	rt := netlink.Route{
		Family:   int(h.Family),
		Tos:      int(h.Tos),
		Table:    int(h.Table),
		Protocol: netlink.RouteProtocol(h.Protocol),
		Scope:    netlink.Scope(h.Scope),
		Type:     int(h.Type),
		Flags:    int(h.Flags),
	}
	ne := nl.NativeEndian()
	for b := m[unix.SizeofRtMsg:]; len(b) >= unix.SizeofRtAttr; {
		alen := int(ne.Uint16(b[0:2]))
		if alen < unix.SizeofRtAttr || alen > len(b) {
			break
		}
		v := b[unix.SizeofRtAttr:alen]
		switch ne.Uint16(b[2:4]) & nl.NLA_TYPE_MASK {
		case unix.RTA_DST:
			rt.Dst = &net.IPNet{IP: net.IP(v), Mask: net.CIDRMask(int(h.Dst_len), 8*len(v))}
		case unix.RTA_GATEWAY:
			rt.Gw = net.IP(v)
		case unix.RTA_PREFSRC:
			rt.Src = net.IP(v)
		case unix.RTA_OIF:
			if len(v) >= 4 {
				rt.LinkIndex = int(ne.Uint32(v))
			}
		case unix.RTA_PRIORITY:
			if len(v) >= 4 {
				rt.Priority = int(ne.Uint32(v))
			}
		case unix.RTA_TABLE:
			if len(v) >= 4 {
				rt.Table = int(ne.Uint32(v))
			}
		case unix.RTA_MULTIPATH, unix.RTA_VIA, unix.RTA_ENCAP, rtaNHID:
			rt.MultiPath = []*netlink.NexthopInfo{{}}
		case unix.RTA_METRICS:
			for mb := v; len(mb) >= unix.SizeofRtAttr; {
				ml := int(ne.Uint16(mb[0:2]))
				if ml < unix.SizeofRtAttr || ml > len(mb) {
					break
				}
				if ne.Uint16(mb[2:4])&nl.NLA_TYPE_MASK == unix.RTAX_MTU && ml >= unix.SizeofRtAttr+4 {
					rt.MTU = int(ne.Uint32(mb[unix.SizeofRtAttr:]))
				}
				mb = mb[min(rtaAlign(ml), len(mb)):]
			}
		}
		b = b[min(rtaAlign(alen), len(b)):]
	}
	return rt, true
}

// rtaNHID is RTA_NH_ID (a route using a nexthop object; never ours).
const rtaNHID = 30

// rtaAlign rounds an attribute length up to the netlink alignment.
func rtaAlign(n int) int { return (n + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1) }

// rawSocket returns the raw socket, opening it in r.ns when
// needed, with the timeout and strict checking. Caller holds mu.
func (r *realNetlink) rawSocket() (*nl.SocketHandle, error) {
	if r.raw != nil {
		return r.raw, nil
	}
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
	// Best effort: without strict checking the kernel sends the whole
	// table and the filters above do the work.
	_ = unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1)
	r.raw = &nl.SocketHandle{Socket: s}
	return r.raw, nil
}

// closeRawSocket drops the raw socket; the next call opens a new one.
func (r *realNetlink) closeRawSocket() {
	if r.raw != nil {
		r.raw.Socket.Close()
		r.raw = nil
	}
}

// write runs one single-message request on the library handle under the
// lock; an error marks the handle for re-creation (see done).
func (r *realNetlink) write(f func(h *netlink.Handle) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return err
	}
	return r.done(f(h))
}

// RouteReplace implements Netlink.
func (r *realNetlink) RouteReplace(rt *netlink.Route) error {
	return r.write(func(h *netlink.Handle) error { return h.RouteReplace(rt) })
}

// RouteAdd implements Netlink.
func (r *realNetlink) RouteAdd(rt *netlink.Route) error {
	return r.write(func(h *netlink.Handle) error { return h.RouteAdd(rt) })
}

// RouteDel implements Netlink.
func (r *realNetlink) RouteDel(rt *netlink.Route) error {
	return r.write(func(h *netlink.Handle) error { return h.RouteDel(rt) })
}

// NeighList implements Netlink.
func (r *realNetlink) NeighList(family int) ([]netlink.Neigh, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.handle()
	if err != nil {
		return nil, err
	}
	neighs, err := nlutil.Retry(func() ([]netlink.Neigh, error) { return h.NeighList(0, family) })
	if err != nil {
		return nil, r.done(fmt.Errorf("netlink: list neighbours: %w", err))
	}
	return neighs, nil
}

// NeighSet implements Netlink.
func (r *realNetlink) NeighSet(n *netlink.Neigh) error {
	return r.write(func(h *netlink.Handle) error { return h.NeighSet(n) })
}

// NeighDel implements Netlink.
func (r *realNetlink) NeighDel(n *netlink.Neigh) error {
	return r.write(func(h *netlink.Handle) error { return h.NeighDel(n) })
}

// Close implements Netlink.
func (r *realNetlink) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h != nil {
		r.h.Close()
		r.h = nil
	}
	r.closeRawSocket()
	if !r.ns.IsOpen() {
		return nil
	}
	err := r.ns.Close()
	r.ns = netns.None()
	return err
}

// replaceBatch is how many RTM_NEWROUTE requests RouteReplaceMany puts into
// one sendmsg; their acknowledgements (one small datagram each) must fit
// the socket's receive buffer.
const replaceBatch = 64

// Request flags of the two kinds of route write.
const (
	flagsReplace = unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_REPLACE
	flagsCreate  = unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL
)

// RouteReplaceMany replaces routes like RouteReplace, but pipelined: a batch
// of requests goes to the kernel in one sendmsg, which processes them in
// order, and the acknowledgements are read afterwards. It returns one error
// per route (nil: done).
func (r *realNetlink) RouteReplaceMany(routes []*netlink.Route) []error {
	return r.writeMany(routes, flagsReplace)
}

// RouteAddMany creates routes like RouteAdd, pipelined like
// RouteReplaceMany; each route that meets an existing one under its key gets
// its own EEXIST, the others are created.
func (r *realNetlink) RouteAddMany(routes []*netlink.Route) []error {
	return r.writeMany(routes, flagsCreate)
}

// writeMany sends RTM_NEWROUTE requests with the given flags in batches and
// returns one error per route.
func (r *realNetlink) writeMany(routes []*netlink.Route, flags uint16) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := make([]error, len(routes))
	for start := 0; start < len(routes); start += replaceBatch {
		chunk := routes[start:min(start+replaceBatch, len(routes))]
		if err := r.writeChunk(chunk, flags, errs[start:start+len(chunk)]); err != nil {
			// The socket is in an unknown state: fail what is left.
			r.closeRawSocket()
			for i := start; i < len(routes); i++ {
				if errs[i] == nil {
					errs[i] = err
				}
			}
			break
		}
	}
	return errs
}

// writeChunk sends chunk in one sendmsg and collects one acknowledgement
// per request into errs. A non-nil return means the exchange itself failed.
// Caller holds mu.
func (r *realNetlink) writeChunk(chunk []*netlink.Route, flags uint16, errs []error) error {
	sock, err := r.rawSocket()
	if err != nil {
		return err
	}
	base := atomic.AddUint32(&sock.Seq, uint32(len(chunk))) - uint32(len(chunk)) + 1
	buf := make([]byte, 0, len(chunk)*128)
	for i, rt := range chunk {
		if buf, err = appendRouteRequest(buf, base+uint32(i), flags, rt); err != nil {
			return err
		}
	}
	sock.Socket.Lock()
	defer sock.Socket.Unlock()
	if err := unix.Sendto(sock.Socket.GetFd(), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send route batch: %w", err)
	}
	acked := make([]bool, len(chunk))
	for pending := len(chunk); pending > 0; {
		msgs, _, err := sock.Socket.Receive()
		if err != nil {
			return fmt.Errorf("read route batch acks: %w", err)
		}
		for _, m := range msgs {
			i := int(m.Header.Seq - base)
			if m.Header.Type != unix.NLMSG_ERROR || i < 0 || i >= len(chunk) || acked[i] || len(m.Data) < 4 {
				continue // not ours (e.g. a late answer to an earlier request)
			}
			acked[i] = true
			pending--
			if errno := int32(nl.NativeEndian().Uint32(m.Data[0:4])); errno != 0 {
				errs[i] = unix.Errno(-errno)
			}
		}
	}
	return nil
}

// appendRouteRequest appends an acknowledged RTM_NEWROUTE request with the
// given flags (flagsReplace or flagsCreate) for rt to b: the attributes the
// RouteTable sets, nothing else.
func appendRouteRequest(b []byte, seq uint32, flags uint16, rt *netlink.Route) ([]byte, error) {
	ne := binary.NativeEndian
	if rt.Dst == nil {
		return b, fmt.Errorf("route without destination: %w", unix.EINVAL)
	}
	dst := rt.Dst.IP
	family := unix.AF_INET
	if ip4 := dst.To4(); ip4 != nil {
		dst = ip4
	} else {
		family = unix.AF_INET6
		dst = dst.To16()
	}
	ones, _ := rt.Dst.Mask.Size()
	start := len(b)
	b = append(b, make([]byte, unix.SizeofNlMsghdr)...)
	table := uint8(rt.Table)
	if rt.Table >= 256 {
		table = unix.RT_TABLE_UNSPEC
	}
	b = append(b, byte(family), byte(ones), 0, byte(rt.Tos), table, byte(rt.Protocol), byte(rt.Scope), byte(rt.Type))
	b = ne.AppendUint32(b, uint32(rt.Flags))
	attr := func(typ uint16, v []byte) {
		b = ne.AppendUint16(b, uint16(unix.SizeofRtAttr+len(v)))
		b = ne.AppendUint16(b, typ)
		b = append(b, v...)
		for (len(b)-start)%unix.RTA_ALIGNTO != 0 {
			b = append(b, 0)
		}
	}
	addr := func(ip net.IP) []byte {
		if family == unix.AF_INET {
			return ip.To4()
		}
		return ip.To16()
	}
	attr(unix.RTA_DST, dst)
	if rt.Src != nil {
		attr(unix.RTA_PREFSRC, addr(rt.Src))
	}
	if rt.Gw != nil {
		attr(unix.RTA_GATEWAY, addr(rt.Gw))
	}
	if rt.Table >= 256 {
		attr(unix.RTA_TABLE, ne.AppendUint32(nil, uint32(rt.Table)))
	}
	if rt.Priority > 0 {
		attr(unix.RTA_PRIORITY, ne.AppendUint32(nil, uint32(rt.Priority)))
	}
	if rt.MTU > 0 {
		mtu := ne.AppendUint16(nil, unix.SizeofRtAttr+4)
		mtu = ne.AppendUint16(mtu, unix.RTAX_MTU)
		mtu = ne.AppendUint32(mtu, uint32(rt.MTU))
		attr(unix.RTA_METRICS, mtu)
	}
	if rt.LinkIndex > 0 {
		attr(unix.RTA_OIF, ne.AppendUint32(nil, uint32(rt.LinkIndex)))
	}
	h := b[start:]
	ne.PutUint32(h[0:4], uint32(len(h)))
	ne.PutUint16(h[4:6], unix.RTM_NEWROUTE)
	ne.PutUint16(h[6:8], flags)
	ne.PutUint32(h[8:12], seq)
	return b, nil
}
