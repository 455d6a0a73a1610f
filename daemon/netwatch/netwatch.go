// Package netwatch is routeletd's one netlink event source. A Watcher holds
// every subscription of the daemon's network namespace (links, routes,
// neighbours and FDB entries, device configuration (netconf), IPv4 and
// IPv6), the one index→name cache, and re-subscription with backoff after a
// socket error or overflow. It reduces every notification to a typed event
// (LinkEvent, RouteEvent, NeighEvent, NetconfEvent) and hands it only to the
// owners whose Interest covers it.
//
// Owners (the agent's workload tables, the overlay manager, the peer
// check's host reader) say what they own — interface name prefixes and
// names, routes without a device, route protocols, tables, or the node's
// own address space (Interest.Host, see HostHandler) — and get a Rescan
// call whenever events may have been lost. Handlers run on the watcher's goroutines: they must only record a
// hint and wake the loop, never touch the kernel.
package netwatch

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
)

// LinkEvent is a link notification (or an existing link at start-up).
type LinkEvent struct {
	Name    string
	Kind    string // netlink kind, e.g. "veth", "vxlan"
	Up      bool   // administratively up and not known to be without carrier
	Deleted bool   // the link is gone (also sent for the old name of a renamed link)
}

// RouteEvent is a route notification, reduced to what ownership and tamper
// checks need.
type RouteEvent struct {
	IPv6     bool
	Iface    string // routes.InterfaceNone for routes without a device
	Dst      netip.Prefix
	Protocol int
	Table    int
	Deleted  bool
}

// NeighEvent is a neighbour or FDB notification on some interface; IP is
// invalid for FDB entries without one.
type NeighEvent struct {
	Iface   string
	IP      netip.Addr
	Deleted bool
	// FDB: a bridge/VXLAN forwarding entry (AF_BRIDGE), whose IP is its
	// destination; otherwise an ARP/NDP entry.
	FDB   bool
	MAC   net.HardwareAddr
	State int // NUD_* of the entry
	Type  int // ndm_type (RTN_*): RTN_UNICAST in the VXLAN driver's FDB notifications
}

// Interest says which events an owner receives. An interface matches when
// its name has one of Prefixes or is one of Names.
type Interest struct {
	Prefixes []string
	// Names lists the exact interface names owned.
	Names []string
	// NoInterface: routes without a device (blackholes, unreachables) are
	// owned too.
	NoInterface bool
	// Protocols, when non-empty, limits route events to these protocols.
	Protocols []int
	// Tables, when non-empty, limits route events to these tables (0 stands
	// for a notification without a table attribute).
	Tables []int
	// RouteDeletesOnly and NeighDeletesOnly drop additions and changes.
	RouteDeletesOnly bool
	NeighDeletesOnly bool
	// Netconf: the owner's Handler is also a NetconfHandler and receives
	// the netconf events of its interfaces and the node-wide ones.
	Netconf bool
	// Host: the owner's Handler is also a HostHandler and hears of every
	// change to the node's own address space; OwnProtocols are the route
	// protocols whose routes are not the node's own (routelet's).
	Host         bool
	OwnProtocols []int
	// HostIgnores, when set, names the links (by name and kind) whose
	// link, address and route events are no change to the node's own
	// space for this owner, e.g. routelet's pod veths.
	HostIgnores func(name, kind string) bool
}

// iface reports whether name is an interface the interest covers.
func (in Interest) iface(name string) bool {
	if name == "" {
		return false
	}
	for _, p := range in.Prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return slices.Contains(in.Names, name)
}

// route reports whether ev is a route event the interest covers.
func (in Interest) route(ev RouteEvent) bool {
	if in.RouteDeletesOnly && !ev.Deleted {
		return false
	}
	if len(in.Protocols) > 0 && !slices.Contains(in.Protocols, ev.Protocol) {
		return false
	}
	if len(in.Tables) > 0 && !slices.Contains(in.Tables, ev.Table) {
		return false
	}
	if ev.Iface == routes.InterfaceNone {
		return in.NoInterface
	}
	return in.iface(ev.Iface)
}

// neigh reports whether ev is a neighbour event the interest covers.
func (in Interest) neigh(ev NeighEvent) bool {
	if in.NeighDeletesOnly && !ev.Deleted {
		return false
	}
	return in.iface(ev.Iface)
}

// Handler receives an owner's events. Every method runs on a watcher
// goroutine and must only record hints.
type Handler interface {
	OnLink(LinkEvent)
	OnRoute(RouteEvent)
	OnNeigh(NeighEvent)
	// Rescan says events may have been lost: re-read everything owned.
	Rescan()
}

type owner struct {
	name string
	in   Interest
	h    Handler
}

// Watcher is the one netlink event source. Register owners before Start.
type Watcher struct {
	log    *slog.Logger
	owners []owner
	names  *ifNames
}

// New returns a Watcher with no owners.
func New(log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	return &Watcher{log: log.With("component", "netwatch"), names: newIfNames(kernelName)}
}

// Register adds an owner (name is for logs). Not safe after Start.
func (w *Watcher) Register(name string, in Interest, h Handler) {
	w.owners = append(w.owners, owner{name: name, in: in, h: h})
}

// kernelName asks the kernel for the name of interface index i, in the
// calling thread's namespace (the zero Handle's).
func kernelName(i int) (string, bool) { return handleName(&netlink.Handle{}, i) }

// handleName asks the kernel for the name of interface index i through h.
func handleName(h *netlink.Handle, i int) (string, bool) {
	l, err := h.LinkByIndex(i)
	if err != nil {
		return "", false
	}
	return l.Attrs().Name, true
}

// Bursts (hundreds of routes and neighbours programmed at start-up) must fit
// in the socket buffer; forcing the size needs CAP_NET_ADMIN, which the
// daemon has anyway.
const rcvbuf = 8 << 20

// chanSize is each subscription's channel of decoded updates. A burst
// waits in the socket buffer (rcvbuf, kernel memory) while the channel is
// full; the handlers only mark things dirty, so the channel drains at
// once and a longer one would only hold decoded copies on the heap (a
// route update is about 400 bytes).
const chanSize = 64

// Start subscribes to links, routes, neighbours, netconf and (for owners of
// host changes) addresses, reports every existing
// link to the owners before it returns (so the first sync knows which
// interfaces exist and are up), and pumps events until ctx is done. A
// subscription whose socket fails (e.g. ENOBUFS when a burst overflows it)
// is re-established with backoff and every owner gets Rescan.
//
// Everything it opens is bound to the namespace of the thread that calls
// Start, not to the thread a later re-subscription or name lookup runs on:
// a caller that locked its thread into another namespace gets that
// namespace's events for good.
func (w *Watcher) Start(ctx context.Context) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("netwatch: the calling thread's network namespace: %w", err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return fmt.Errorf("netwatch: netlink handle: %w", err)
	}
	release := func() {
		h.Close()
		ns.Close()
	}
	w.names.setLookup(func(i int) (string, bool) { return handleName(h, i) })
	onErr := func(what string) func(error) {
		return func(err error) {
			if ctx.Err() == nil {
				w.log.Warn("netlink subscription error", "subscription", what, "err", err)
			}
		}
	}
	linkSub := func(ch chan netlink.LinkUpdate, done chan struct{}) error {
		return netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{Namespace: &ns,
			ErrorCallback: onErr("link"), ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
	routeSub := func(ch chan netlink.RouteUpdate, done chan struct{}) error {
		return netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &ns,
			ErrorCallback: onErr("route"), ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
	neighSub := func(ch chan netlink.NeighUpdate, done chan struct{}) error {
		return netlink.NeighSubscribeWithOptions(ch, done, netlink.NeighSubscribeOptions{Namespace: &ns,
			ErrorCallback: onErr("neigh"), ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
	netconfSub := netconfSubscribe(ns, onErr("netconf"))
	// Subscribe before listing, so no change between the two is missed.
	// On an error every subscription made so far is closed (opened).
	var opened []chan struct{}
	fail := func(err error) error {
		for _, done := range opened {
			close(done)
		}
		release()
		return err
	}
	linkCh, linkDone, err := subscribe(linkSub, chanSize)
	if err != nil {
		return fail(fmt.Errorf("subscribe to links: %w", err))
	}
	opened = append(opened, linkDone)
	routeCh, routeDone, err := subscribe(routeSub, chanSize)
	if err != nil {
		return fail(fmt.Errorf("subscribe to routes: %w", err))
	}
	opened = append(opened, routeDone)
	neighCh, neighDone, err := subscribe(neighSub, chanSize)
	if err != nil {
		return fail(fmt.Errorf("subscribe to neighbours: %w", err))
	}
	opened = append(opened, neighDone)
	netconfCh, netconfDone, err := subscribe(netconfSub, chanSize)
	if err != nil {
		return fail(fmt.Errorf("subscribe to device configuration: %w", err))
	}
	opened = append(opened, netconfDone)
	var addrCh chan netlink.AddrUpdate
	var addrDone chan struct{}
	addrSub := addrSubscribe(ns, onErr("address"))
	if w.hostOwners() {
		if addrCh, addrDone, err = subscribe(addrSub, chanSize); err != nil {
			return fail(fmt.Errorf("subscribe to addresses: %w", err))
		}
		opened = append(opened, addrDone)
	}
	links, err := h.LinkList()
	if err != nil {
		return fail(fmt.Errorf("list links: %w", err))
	}
	for _, l := range links {
		w.Link(netlink.LinkUpdate{Link: l})
	}
	go func() {
		<-ctx.Done()
		release()
	}()
	go pump(ctx, w, "link", linkCh, linkDone, linkSub, w.Link)
	go pump(ctx, w, "route", routeCh, routeDone, routeSub, w.Route)
	go pump(ctx, w, "neigh", neighCh, neighDone, neighSub, w.Neigh)
	go pump(ctx, w, "netconf", netconfCh, netconfDone, netconfSub, w.netconf)
	if addrCh != nil {
		go pump(ctx, w, "address", addrCh, addrDone, addrSub, w.Addr)
	}
	return nil
}

// Link dispatches one link notification (RTM_NEWLINK unless its header says
// RTM_DELLINK) to the owners of the link's name. A renamed link is reported
// deleted under its old name first.
func (w *Watcher) Link(u netlink.LinkUpdate) {
	at := u.Attrs()
	kind := u.Link.Type()
	old, known := w.names.peek(at.Index)
	renamed := known && old != at.Name
	w.hostChange(func(in Interest) bool {
		return in.ignoresHost(at.Name, kind) && (!renamed || in.ignoresHost(old, kind))
	})
	if u.Header.Type == unix.RTM_DELLINK {
		w.names.del(at.Index)
		w.link(LinkEvent{Name: at.Name, Kind: kind, Deleted: true})
		return
	}
	if renamed {
		w.link(LinkEvent{Name: old, Kind: kind, Deleted: true})
	}
	w.names.setLink(at.Index, at.Name, kind)
	w.link(LinkEvent{Name: at.Name, Kind: kind, Up: linkUp(u.Link)})
}

func (w *Watcher) link(ev LinkEvent) {
	for _, o := range w.owners {
		if o.in.iface(ev.Name) {
			o.h.OnLink(ev)
		}
	}
}

// Route dispatches one route notification to the owners it concerns.
func (w *Watcher) Route(u netlink.RouteUpdate) {
	ev, ok := routeEvent(u, w.names)
	if !ok {
		return
	}
	w.hostRoute(ev, u.LinkIndex)
	for _, o := range w.owners {
		if o.in.route(ev) {
			o.h.OnRoute(ev)
		}
	}
}

// Neigh dispatches one neighbour or FDB notification to the owners of its
// interface.
func (w *Watcher) Neigh(u netlink.NeighUpdate) {
	ev := NeighEvent{Iface: w.names.get(u.LinkIndex), Deleted: u.Type == unix.RTM_DELNEIGH,
		FDB: u.Family == unix.AF_BRIDGE, MAC: u.HardwareAddr, State: u.State, Type: u.Neigh.Type}
	if ip, ok := netip.AddrFromSlice(u.IP); ok {
		ev.IP = ip.Unmap()
	}
	for _, o := range w.owners {
		if o.in.neigh(ev) {
			o.h.OnNeigh(ev)
		}
	}
}

// rescan tells every owner that events were lost.
func (w *Watcher) rescan() {
	for _, o := range w.owners {
		o.h.Rescan()
	}
}

// subscribe starts one subscription with a fresh channel and done channel.
func subscribe[T any](sub func(chan T, chan struct{}) error, size int) (chan T, chan struct{}, error) {
	ch := make(chan T, size)
	done := make(chan struct{})
	if err := sub(ch, done); err != nil {
		return nil, nil, err
	}
	return ch, done, nil
}

// pump hands every update on ch to handle until ctx is done. When the
// library closes ch (its socket failed), pump asks every owner for a rescan
// and subscribes again, backing off up to 5s between failed attempts.
func pump[T any](ctx context.Context, w *Watcher, what string, ch chan T, done chan struct{},
	sub func(chan T, chan struct{}) error, handle func(T)) {
	backoff := 100 * time.Millisecond
	size := cap(ch)
	for {
		for open := true; open; {
			select {
			case <-ctx.Done():
				close(done)
				return
			case u, ok := <-ch:
				if !ok {
					open = false
					break
				}
				handle(u)
			}
		}
		close(done) // releases the failed socket
		for {
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("netlink subscription lost, re-subscribing and re-reading everything", "subscription", what)
			w.rescan()
			var err error
			ch, done, err = subscribe(sub, size)
			if err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			w.log.Warn("netlink re-subscribe failed", "subscription", what, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// linkUp: administratively up and not known to be without carrier.
func linkUp(l netlink.Link) bool {
	at := l.Attrs()
	if at.Flags&net.FlagUp == 0 {
		return false
	}
	return at.OperState == netlink.OperUp || at.OperState == netlink.OperUnknown
}

// routeEvent reduces a route update to a RouteEvent; default routes and
// routes on interfaces that cannot be named are dropped.
func routeEvent(u netlink.RouteUpdate, names *ifNames) (RouteEvent, bool) {
	if u.Type != unix.RTM_NEWROUTE && u.Type != unix.RTM_DELROUTE {
		return RouteEvent{}, false
	}
	ev := RouteEvent{
		IPv6:     u.Family == netlink.FAMILY_V6,
		Protocol: int(u.Protocol),
		Table:    u.Table,
		Deleted:  u.Type == unix.RTM_DELROUTE,
		Iface:    routes.InterfaceNone,
	}
	// Reject routes (blackhole, unreachable, prohibit, throw) have no output
	// device, although the kernel reports IPv6 ones on the loopback device.
	if u.LinkIndex != 0 && !routes.IsNoInterfaceType(u.Route.Type) {
		ev.Iface = names.get(u.LinkIndex)
		if ev.Iface == "" {
			return RouteEvent{}, false
		}
	}
	if u.Dst == nil {
		return RouteEvent{}, false // default routes are never routelet's
	}
	ip, ok := netip.AddrFromSlice(u.Dst.IP)
	if !ok {
		return RouteEvent{}, false
	}
	if !ev.IPv6 {
		ip = ip.Unmap()
	}
	ones, _ := u.Dst.Mask.Size()
	ev.Dst = netip.PrefixFrom(ip, ones)
	return ev, true
}

// ifNames maps interface indexes to names, from link notifications; an
// unknown index is looked up (lookup: the kernel). Kinds are known only
// from link notifications. mu guards byIndex and kinds, which the link,
// address, route and neighbour pumps share.
type ifNames struct {
	mu      sync.Mutex
	byIndex map[int]string
	kinds   map[int]string
	lookup  func(int) (string, bool)
}

func newIfNames(lookup func(int) (string, bool)) *ifNames {
	return &ifNames{byIndex: map[int]string{}, kinds: map[int]string{}, lookup: lookup}
}

// setLink records the name and kind of index i, from a link notification.
func (n *ifNames) setLink(i int, name, kind string) {
	n.mu.Lock()
	n.byIndex[i] = name
	n.kinds[i] = kind
	n.mu.Unlock()
}

// link returns the name and kind of index i when a link notification told
// them.
func (n *ifNames) link(i int) (name, kind string, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if kind, ok = n.kinds[i]; !ok {
		return "", "", false
	}
	return n.byIndex[i], kind, true
}

// setLookup sets how a name missing from the cache is asked for.
func (n *ifNames) setLookup(lookup func(int) (string, bool)) {
	n.mu.Lock()
	n.lookup = lookup
	n.mu.Unlock()
}

// setIfAbsent records the name of index i from a lookup unless a link
// notification named it meanwhile, and returns the name recorded.
func (n *ifNames) setIfAbsent(i int, name string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if had, ok := n.byIndex[i]; ok {
		return had
	}
	n.byIndex[i] = name
	return name
}

// del forgets index i.
func (n *ifNames) del(i int) {
	n.mu.Lock()
	delete(n.byIndex, i)
	delete(n.kinds, i)
	n.mu.Unlock()
}

// peek returns the cached name of index i without a lookup.
func (n *ifNames) peek(i int) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, ok := n.byIndex[i]
	return name, ok
}

// get returns the name of index i, looking it up when it is not cached;
// "" when it cannot be named.
func (n *ifNames) get(i int) string {
	if name, ok := n.peek(i); ok {
		return name
	}
	n.mu.Lock()
	lookup := n.lookup
	n.mu.Unlock()
	if lookup == nil || i == 0 {
		return ""
	}
	name, ok := lookup(i)
	if !ok {
		return ""
	}
	return n.setIfAbsent(i, name)
}
