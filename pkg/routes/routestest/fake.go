package routestest

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/fakekernel"
	"github.com/routelet/routelet/pkg/routes"
)

var (
	_ routes.Netlink   = (*FakeNetlink)(nil)
	_ routes.Conntrack = (*FakeConntrack)(nil)
)

// FakeNetlink is an in-memory kernel for tests: links, one route store keyed
// like the kernel's FIB (family, table, destination, TOS, metric) and a
// neighbour table. Routes of other programs (any protocol, any device) are
// added with AddRoute; RouteReplace overwrites whatever holds a key,
// RouteAdd refuses a taken key with EEXIST, as the kernel does. It validates writes the way the kernel does for the cases
// routelet meets: a route through a missing device fails with ENODEV, through
// a down device with ENETDOWN, "onlink" without a gateway with EINVAL, a
// gateway that no link route on the device covers (without onlink) with
// ENETUNREACH. A device going down or away takes its routes and neighbours
// with it. IPv6 routes without a metric get 1024, and IPv6 no-device routes
// are reported on "lo", as the kernel does.
//
// Failures can be injected per call name ("LinkList", "LinkByName",
// "RouteList", "RouteReplace", "RouteAdd", "RouteDel", "NeighList", "NeighSet",
// "NeighDel") for the Nth next call. It is safe for concurrent use.
type FakeNetlink struct {
	mu        sync.Mutex
	links     map[int]*routes.Link
	nextIndex int
	routes    map[fakeRouteKey]netlink.Route
	neighs    map[neighKey]netlink.Neigh
	calls     fakekernel.Calls
}

// neighKey identifies a neighbour entry: the kernel keys them by device and IP.
type neighKey struct {
	link int
	ip   netip.Addr
}

// v6DefaultMetric is the metric the kernel gives an IPv6 route added
// without one.
const v6DefaultMetric = 1024

type fakeRouteKey struct {
	family, table int
	dst           netip.Prefix
	tos, priority int
}

// NewFakeNetlink returns a fake kernel holding only "lo" (index 1, up).
func NewFakeNetlink() *FakeNetlink {
	f := &FakeNetlink{
		links:     map[int]*routes.Link{},
		nextIndex: 1,
		routes:    map[fakeRouteKey]netlink.Route{},
		neighs:    map[neighKey]netlink.Neigh{},
	}
	f.AddLink("lo", true)
	return f
}

// AddLink creates an interface and returns it.
func (f *FakeNetlink) AddLink(name string, up bool) routes.Link {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &routes.Link{Index: f.nextIndex, Name: name, Up: up}
	f.nextIndex++
	f.links[l.Index] = l
	return *l
}

// SetLinkUp changes an interface's state; going down flushes its routes and
// neighbours like the kernel does.
func (f *FakeNetlink) SetLinkUp(name string, up bool) error {
	return f.tamper(name, func(l *routes.Link) {
		l.Up = up
		if !up {
			f.flushLink(l.Index)
		}
	})
}

// RenameLink renames an interface; its index and routes stay.
func (f *FakeNetlink) RenameLink(from, to string) error {
	return f.tamper(from, func(l *routes.Link) { l.Name = to })
}

// DelLink deletes an interface together with its routes and neighbours.
func (f *FakeNetlink) DelLink(name string) error {
	return f.tamper(name, func(l *routes.Link) {
		f.flushLink(l.Index)
		delete(f.links, l.Index)
	})
}

// tamper runs change on the link called name, as another program would
// (not counted as a call); routes.ErrLinkNotFound when there is none.
func (f *FakeNetlink) tamper(name string, change func(*routes.Link)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.named(name)
	if err != nil {
		return err
	}
	change(l)
	return nil
}

// AddRoute inserts a route as another program would (validated, not counted
// as a write, no failure injection). It fails with EEXIST when the key is
// taken, like "ip route add".
func (f *FakeNetlink) AddRoute(r netlink.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, r, err := f.validate(r)
	if err != nil {
		return err
	}
	if _, ok := f.routes[k]; ok {
		return fmt.Errorf("fake: route %s: %w", k.dst, unix.EEXIST)
	}
	f.routes[k] = r
	return nil
}

// Routes returns every route of family in table (0 = main), sorted by
// destination then metric.
func (f *FakeNetlink) Routes(family, table int) []netlink.Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.list(family, table, 0)
}

// Neighbours returns every neighbour entry, sorted by device and IP.
func (f *FakeNetlink) Neighbours() []netlink.Neigh {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]neighKey, 0, len(f.neighs))
	for k := range f.neighs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b neighKey) int {
		if a.link != b.link {
			return a.link - b.link
		}
		return a.ip.Compare(b.ip)
	})
	out := make([]netlink.Neigh, 0, len(keys))
	for _, k := range keys {
		out = append(out, f.neighs[k])
	}
	return out
}

// FailOn makes the nth next call named call (1 = the very next one) return
// err without doing anything.
func (f *FakeNetlink) FailOn(call string, nth int, err error) { f.calls.FailOn(call, nth, err) }

// Calls returns how many times call was made (failed calls included).
func (f *FakeNetlink) Calls(call string) int { return f.calls.Count(call) }

// Writes returns how many route and neighbour writes were attempted.
func (f *FakeNetlink) Writes() int {
	return f.calls.Sum("RouteReplace", "RouteAdd", "RouteDel", "NeighSet", "NeighDel")
}

// named is byName, failing with routes.ErrLinkNotFound. Caller holds mu.
func (f *FakeNetlink) named(name string) (*routes.Link, error) {
	if l := f.byName(name); l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("fake: link %q: %w", name, routes.ErrLinkNotFound)
}

// byName finds a link by name. Caller holds mu.
func (f *FakeNetlink) byName(name string) *routes.Link {
	for _, l := range f.links {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// flushLink drops the routes and neighbours through a link, as the kernel
// does when it goes down or away. Caller holds mu.
func (f *FakeNetlink) flushLink(index int) {
	for k, r := range f.routes {
		if r.LinkIndex == index && !routes.IsNoInterfaceType(r.Type) {
			delete(f.routes, k)
		}
	}
	for k := range f.neighs {
		if k.link == index {
			delete(f.neighs, k)
		}
	}
}

// validate checks r like the kernel would and returns its key and the route
// as a dump would report it. Caller holds mu.
func (f *FakeNetlink) validate(r netlink.Route) (fakeRouteKey, netlink.Route, error) {
	if r.Dst == nil {
		return fakeRouteKey{}, r, fmt.Errorf("fake: route without destination: %w", unix.EINVAL)
	}
	dst, err := ipNetToPrefix(r.Dst)
	if err != nil {
		return fakeRouteKey{}, r, err
	}
	family := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	r = cloneRoute(r)
	r.Family = family
	if r.Table == 0 {
		r.Table = unix.RT_TABLE_MAIN
	}
	if r.Type == 0 {
		r.Type = unix.RTN_UNICAST
	}
	if family == netlink.FAMILY_V6 {
		if r.Priority == 0 {
			r.Priority = v6DefaultMetric
		}
		r.Scope = netlink.SCOPE_UNIVERSE
	}
	onlink := r.Flags&int(netlink.FLAG_ONLINK) != 0
	switch {
	case routes.IsNoInterfaceType(r.Type):
		r.LinkIndex, r.Gw, r.Flags = 0, nil, 0
		if family == netlink.FAMILY_V6 {
			r.LinkIndex = 1 // the kernel reports IPv6 no-device routes on lo
		}
	case r.Type != unix.RTN_UNICAST:
		return fakeRouteKey{}, r, fmt.Errorf("fake: route type %d not modelled: %w", r.Type, unix.EINVAL)
	default:
		l := f.links[r.LinkIndex]
		switch {
		case r.LinkIndex == 0 || l == nil:
			return fakeRouteKey{}, r, fmt.Errorf("fake: route %s dev index %d: %w", dst, r.LinkIndex, unix.ENODEV)
		case !l.Up:
			return fakeRouteKey{}, r, fmt.Errorf("fake: route %s dev %s: %w", dst, l.Name, unix.ENETDOWN)
		case onlink && r.Gw == nil:
			return fakeRouteKey{}, r, fmt.Errorf("fake: route %s: onlink without gateway: %w", dst, unix.EINVAL)
		case r.Gw != nil && !onlink && !f.coveredByLink(family, r.Table, r.LinkIndex, r.Gw):
			return fakeRouteKey{}, r, fmt.Errorf("fake: route %s via %s: gateway unreachable: %w", dst, r.Gw, unix.ENETUNREACH)
		}
	}
	k := fakeRouteKey{family: family, table: r.Table, dst: dst, tos: r.Tos, priority: r.Priority}
	return k, r, nil
}

// coveredByLink reports whether a link-scope route through index covers gw,
// the kernel's condition for a gateway without "onlink".
func (f *FakeNetlink) coveredByLink(family, table, index int, gw net.IP) bool {
	a, ok := netip.AddrFromSlice(gw)
	if !ok {
		return false
	}
	a = a.Unmap()
	for k, r := range f.routes {
		if k.family == family && k.table == table && r.LinkIndex == index && r.Gw == nil &&
			r.Type == unix.RTN_UNICAST && k.dst.Contains(a) {
			return true
		}
	}
	return false
}

// list returns the routes of family in table (through linkIndex when > 0),
// sorted like Dump. Caller holds mu.
func (f *FakeNetlink) list(family, table, linkIndex int) []netlink.Route {
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	keys := make([]fakeRouteKey, 0, len(f.routes))
	for k, r := range f.routes {
		if k.family != family || k.table != table || (linkIndex > 0 && r.LinkIndex != linkIndex) {
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b fakeRouteKey) int {
		if c := a.dst.Addr().Compare(b.dst.Addr()); c != 0 {
			return c
		}
		if a.dst.Bits() != b.dst.Bits() {
			return a.dst.Bits() - b.dst.Bits()
		}
		return a.priority - b.priority
	})
	out := make([]netlink.Route, 0, len(keys))
	for _, k := range keys {
		out = append(out, cloneRoute(f.routes[k]))
	}
	return out
}

// LinkList implements routes.Netlink.
func (f *FakeNetlink) LinkList() ([]routes.Link, error) {
	return fakekernel.Get(&f.calls, &f.mu, "LinkList", func() ([]routes.Link, error) {
		out := make([]routes.Link, 0, len(f.links))
		for _, l := range f.links {
			out = append(out, *l)
		}
		slices.SortFunc(out, func(a, b routes.Link) int { return a.Index - b.Index })
		return out, nil
	})
}

// LinkByName implements routes.Netlink.
func (f *FakeNetlink) LinkByName(name string) (routes.Link, error) {
	return fakekernel.Get(&f.calls, &f.mu, "LinkByName", func() (routes.Link, error) {
		l, err := f.named(name)
		if err != nil {
			return routes.Link{}, err
		}
		return *l, nil
	})
}

// RouteList implements routes.Netlink.
func (f *FakeNetlink) RouteList(family, table, linkIndex int) ([]netlink.Route, error) {
	return fakekernel.Get(&f.calls, &f.mu, "RouteList", func() ([]netlink.Route, error) {
		return f.list(family, table, linkIndex), nil
	})
}

// RouteReplace implements routes.Netlink.
func (f *FakeNetlink) RouteReplace(r *netlink.Route) error {
	return f.writeRoute("RouteReplace", r, false)
}

// writeRoute is RouteReplace, or RouteAdd when exclusive: validated like
// the kernel, and refused with EEXIST when exclusive and any route holds
// the key.
func (f *FakeNetlink) writeRoute(call string, r *netlink.Route, exclusive bool) error {
	return f.calls.Do(&f.mu, call, func() error {
		k, route, err := f.validate(*r)
		if err != nil {
			return err
		}
		if _, ok := f.routes[k]; ok && exclusive {
			return fmt.Errorf("fake: add %s: %w", k.dst, unix.EEXIST)
		}
		f.routes[k] = route
		return nil
	})
}

// OneByOne is a routes.Netlink's RouteReplaceMany or RouteAddMany done without
// pipelining: write (RouteReplace, RouteAdd) for each route in order, one
// error per route. Fakes and wrappers of the routes.Netlink seam use it.
func OneByOne(rs []*netlink.Route, write func(*netlink.Route) error) []error {
	errs := make([]error, len(rs))
	for i, r := range rs {
		errs[i] = write(r)
	}
	return errs
}

// RouteReplaceMany implements routes.Netlink: each route counts as one
// "RouteReplace" call (for failure injection) and one write.
func (f *FakeNetlink) RouteReplaceMany(rs []*netlink.Route) []error {
	return OneByOne(rs, f.RouteReplace)
}

// RouteAdd implements routes.Netlink: like NLM_F_CREATE|NLM_F_EXCL, it fails with
// EEXIST when any route (of any protocol, on any device) holds the key.
func (f *FakeNetlink) RouteAdd(r *netlink.Route) error {
	return f.writeRoute("RouteAdd", r, true)
}

// RouteAddMany implements routes.Netlink: each route counts as one "RouteAdd" call
// (for failure injection) and one write.
func (f *FakeNetlink) RouteAddMany(rs []*netlink.Route) []error {
	return OneByOne(rs, f.RouteAdd)
}

// RouteDel implements routes.Netlink. Like the kernel it matches the key, then every
// attribute the request sets (device, protocol, type, gateway).
func (f *FakeNetlink) RouteDel(r *netlink.Route) error {
	return f.calls.Do(&f.mu, "RouteDel", func() error { return f.routeDel(r) })
}

// routeDel is RouteDel once counted. Caller holds mu.
func (f *FakeNetlink) routeDel(r *netlink.Route) error {
	if r.Dst == nil {
		return fmt.Errorf("fake: delete without destination: %w", unix.EINVAL)
	}
	dst, err := ipNetToPrefix(r.Dst)
	if err != nil {
		return err
	}
	family := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	table := r.Table
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	for k, have := range f.routes {
		if k.family != family || k.table != table || k.dst != dst || k.tos != r.Tos {
			continue
		}
		switch {
		case r.Priority != 0 && k.priority != r.Priority,
			r.LinkIndex != 0 && have.LinkIndex != r.LinkIndex,
			r.Protocol != 0 && have.Protocol != r.Protocol,
			r.Type != 0 && have.Type != r.Type,
			r.Gw != nil && !have.Gw.Equal(r.Gw):
			continue
		}
		delete(f.routes, k)
		return nil
	}
	return fmt.Errorf("fake: delete %s: %w", dst, unix.ESRCH)
}

// NeighList implements routes.Netlink.
func (f *FakeNetlink) NeighList(family int) ([]netlink.Neigh, error) {
	return fakekernel.Get(&f.calls, &f.mu, "NeighList", func() ([]netlink.Neigh, error) {
		var out []netlink.Neigh
		for k, n := range f.neighs {
			if (family == netlink.FAMILY_V4) == k.ip.Is4() {
				out = append(out, n)
			}
		}
		return out, nil
	})
}

// NeighSet implements routes.Netlink.
func (f *FakeNetlink) NeighSet(n *netlink.Neigh) error {
	return f.neighWrite("NeighSet", n, func(k neighKey) error {
		if f.links[n.LinkIndex] == nil {
			return fmt.Errorf("fake: neighbour %s dev index %d: %w", k.ip, n.LinkIndex, unix.ENODEV)
		}
		c := *n
		c.IP = slices.Clone(n.IP)
		c.HardwareAddr = slices.Clone(n.HardwareAddr)
		f.neighs[k] = c
		return nil
	})
}

// neighWrite runs change on n's key as the call named call. Caller does
// not hold mu.
func (f *FakeNetlink) neighWrite(call string, n *netlink.Neigh, change func(neighKey) error) error {
	return f.calls.Do(&f.mu, call, func() error {
		k, err := f.neighKeyOf(n)
		if err != nil {
			return err
		}
		return change(k)
	})
}

// NeighDel implements routes.Netlink.
func (f *FakeNetlink) NeighDel(n *netlink.Neigh) error {
	return f.neighWrite("NeighDel", n, func(k neighKey) error {
		if _, ok := f.neighs[k]; !ok {
			return fmt.Errorf("fake: neighbour %s: %w", k.ip, unix.ENOENT)
		}
		delete(f.neighs, k)
		return nil
	})
}

// SetNeighbour overwrites a neighbour entry as another program would.
func (f *FakeNetlink) SetNeighbour(n netlink.Neigh) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k, err := f.neighKeyOf(&n); err == nil {
		f.neighs[k] = n
	}
}

// neighKeyOf keys a neighbour entry like the kernel: device and IP.
func (f *FakeNetlink) neighKeyOf(n *netlink.Neigh) (neighKey, error) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return neighKey{}, fmt.Errorf("fake: neighbour IP %v: %w", n.IP, unix.EINVAL)
	}
	return neighKey{link: n.LinkIndex, ip: ip.Unmap()}, nil
}

// Close implements routes.Netlink.
func (f *FakeNetlink) Close() error { return nil }

// Dump renders the table like "ip route show" (one line per route, sorted),
// for golden comparisons in tests.
func (f *FakeNetlink) Dump(family, table int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, r := range f.list(family, table, 0) {
		b.WriteString(f.format(r))
		b.WriteByte('\n')
	}
	return b.String()
}

// format renders one route in the spirit of "ip route show". Caller holds mu.
func (f *FakeNetlink) format(r netlink.Route) string {
	dst, _ := ipNetToPrefix(r.Dst)
	var parts []string
	if r.Type != unix.RTN_UNICAST {
		parts = append(parts, routes.RTMTypeName(r.Type))
	}
	parts = append(parts, dst.String())
	if r.Gw != nil {
		parts = append(parts, "via", r.Gw.String())
	}
	if r.LinkIndex != 0 {
		name := fmt.Sprintf("if%d", r.LinkIndex)
		if l := f.links[r.LinkIndex]; l != nil {
			name = l.Name
		}
		parts = append(parts, "dev", name)
	}
	parts = append(parts, "proto", fmt.Sprint(int(r.Protocol)))
	if r.Scope == netlink.SCOPE_LINK {
		parts = append(parts, "scope", "link")
	}
	if r.Src != nil {
		parts = append(parts, "src", r.Src.String())
	}
	if r.Priority != 0 {
		parts = append(parts, "metric", fmt.Sprint(r.Priority))
	}
	if r.Flags&int(netlink.FLAG_ONLINK) != 0 {
		parts = append(parts, "onlink")
	}
	if r.MTU != 0 {
		parts = append(parts, "mtu", fmt.Sprint(r.MTU))
	}
	return strings.Join(parts, " ")
}

// ipNetToPrefix converts a route destination, IPv4 unmapped.
func ipNetToPrefix(n *net.IPNet) (netip.Prefix, error) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("fake: bad destination %v: %w", n, unix.EINVAL)
	}
	ones, bits := n.Mask.Size()
	if len(n.IP) == net.IPv4len || bits == 32 {
		a = a.Unmap()
	}
	return netip.PrefixFrom(a, ones).Masked(), nil
}

// cloneRoute deep-copies the address fields, so callers cannot alias the
// fake's table.
func cloneRoute(r netlink.Route) netlink.Route {
	if r.Dst != nil {
		r.Dst = &net.IPNet{IP: slices.Clone(r.Dst.IP), Mask: slices.Clone(r.Dst.Mask)}
	}
	r.Gw = slices.Clone(r.Gw)
	r.Src = slices.Clone(r.Src)
	return r
}

// FakeConntrack is an in-memory conntrack table for tests, with failure
// injection for Dump and Delete. It is safe for concurrent use.
type FakeConntrack struct {
	mu      sync.Mutex
	flows   []conntrack.Flow
	dumpErr error
	delErr  error
	dumps   int
	gate    chan struct{}
}

// NewFakeConntrack returns an empty conntrack table.
func NewFakeConntrack() *FakeConntrack { return &FakeConntrack{} }

// AddFlow adds a TCP flow from src:sport to dst:dport (reply tuple mirrored).
func (f *FakeConntrack) AddFlow(src, dst netip.Addr, sport, dport uint16) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flows = append(f.flows, conntrack.NewFlow(unix.IPPROTO_TCP, 0, src, dst, sport, dport, 120, 0))
}

// AddNATFlow adds a flow whose reply source (realDst) differs from the
// original destination (vip), as after DNAT to a pod.
func (f *FakeConntrack) AddNATFlow(src, vip, realDst netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := conntrack.NewFlow(unix.IPPROTO_TCP, 0, src, vip, 1000, 80, 120, 0)
	fl.TupleReply.IP.SourceAddress = realDst
	f.flows = append(f.flows, fl)
}

// Flows returns the flows left, as "src->dst" of the original direction.
func (f *FakeConntrack) Flows() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, fl := range f.flows {
		out = append(out, fl.TupleOrig.IP.SourceAddress.String()+"->"+fl.TupleOrig.IP.DestinationAddress.String())
	}
	return out
}

// Dumps returns how many dumps were made.
func (f *FakeConntrack) Dumps() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dumps
}

// FailDelete makes the next Delete return err.
func (f *FakeConntrack) FailDelete(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delErr = err
}

// FailDump makes the next Dump return err.
func (f *FakeConntrack) FailDump(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dumpErr = err
}

// HoldDumps makes every Dump wait until the returned function is called, as
// a hung conntrack socket would.
func (f *FakeConntrack) HoldDumps() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gate := make(chan struct{})
	f.gate = gate
	return func() { close(gate) }
}

// Dump implements routes.Conntrack.
func (f *FakeConntrack) Dump() ([]conntrack.Flow, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dumps++
	if err := f.dumpErr; err != nil {
		f.dumpErr = nil
		return nil, err
	}
	return slices.Clone(f.flows), nil
}

// Delete implements routes.Conntrack.
func (f *FakeConntrack) Delete(fl conntrack.Flow) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.delErr; err != nil {
		f.delErr = nil
		return err
	}
	for i, have := range f.flows {
		if have.TupleOrig == fl.TupleOrig {
			f.flows = slices.Delete(f.flows, i, i+1)
			return nil
		}
	}
	return fmt.Errorf("fake: flow %s: %w", fl.TupleOrig, unix.ENOENT)
}

// Close implements routes.Conntrack.
func (f *FakeConntrack) Close() error { return nil }
