package routes

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	defaultNetlinkTimeout = 10 * time.Second
	// livenessEvery is how many kernel operations pass between two calls of
	// Config.Liveness inside a long loop.
	livenessEvery = 256
	// v6DefaultMetric is the metric the kernel gives an IPv6 route added
	// without one; routelet sets it explicitly so that what it writes and
	// what a dump returns compare equal.
	v6DefaultMetric = 1024
)

// Clock tells the time; tests inject a fake one to drive the grace period.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

// Now returns the wall-clock time.
func (realClock) Now() time.Time { return time.Now() }

// ifaceKind says how much of an interface's routes routelet owns.
type ifaceKind int

const (
	kindUnmanaged ifaceKind = iota // never touched
	kindWorkload                   // name prefix match: every route is ours
	kindShared                     // exact name match: only routes with our protocol
	kindNoIface                    // InterfaceNone: only routes with our protocol
)

// RouteTable reconciles desired routes with one kernel routing table. It is
// not safe for concurrent use: one goroutine (the daemon's apply loop) owns it.
//
// Ownership — which kernel routes this table may change or delete — is
// decided per route, from its output interface and protocol:
//   - an interface whose name starts with one of Config.InterfacePrefixes is
//     a workload interface: every route through it belongs to routelet.
//     Undesired ones are deleted — those carrying Config.Protocol always,
//     the others when Config.RemoveExternalRoutes is set and never IPv6
//     link-local ones (fe80::/64, which the kernel needs on every link) —
//     except while the interface is in its grace period, which protects
//     every route routelet did not write itself;
//   - an interface named in Config.InterfaceNames is shared with others:
//     only routes carrying Config.Protocol are routelet's;
//   - routes without an output interface (blackhole, unreachable, prohibit,
//     throw; IPv6 reports them on "lo") are filed under InterfaceNone when
//     Config.IncludeNoInterface is set, and again only those carrying
//     Config.Protocol are routelet's;
//   - every other route is left alone, whatever its protocol.
//
// A desired route never replaces a route routelet does not own. The kernel
// holds one route per key (table, destination, TOS, metric); when the key
// of a desired route is held by a route of ours (by the rules above) it is
// replaced in place, atomically. When it is held by anything else — a
// connected route, an operator's static route, another daemon's — the
// desired route is not written: Apply reports ErrForeignRoute (a warning
// names both routes, Stats counts it, Config.OnConflict is called) and the
// interface stays dirty, so the route is programmed by the first Apply after
// the other route went away. New keys are written with NLM_F_EXCL, so a
// route that appears between the read and the write is not overwritten
// either.
type RouteTable struct {
	cfg      Config
	spec     Spec // cfg's IP version, table and protocol, defaults applied
	family   int
	table    int
	protocol netlink.RouteProtocol
	priority int
	grace    time.Duration
	timeout  time.Duration // netlink timeout; also bounds conntrack waits
	log      *slog.Logger
	nl       Netlink
	cleaner  *conntrackCleaner // nil: no conntrack cleanup
	clock    Clock
	ops      int // kernel operations since the last liveness call

	// desired holds the targets per interface exactly as the setters left
	// them (CIDRs masked).
	desired map[string]map[netip.Prefix]Target
	// claims lists, per CIDR, the interfaces that want it, oldest first. The
	// kernel holds one route per key, so the most recent claim wins and the
	// others wait until it is withdrawn.
	claims map[netip.Prefix][]string
	// contested counts the CIDRs claimed by more than one interface; while
	// it is zero every desired target is effective.
	contested int
	// dirty interfaces are synced by the next Apply; the value says whether
	// the kernel must be re-read first (needRead) or whether the remembered
	// view (programmed) is good enough (needSync).
	dirty      map[string]dirtyKind
	fullResync bool
	// partial is, per interface that only RouteUpdate and RouteRemove made
	// dirty since it was last in sync (programmed as desired), the CIDRs
	// they touched: Apply plans from memory over those alone. Any other
	// reason to sync the interface drops its entry.
	partial map[string]map[netip.Prefix]struct{}
	// held interfaces lose no route and no static ARP entry (Hold).
	held map[string]struct{}
	// firstSeen is when each managed interface was first seen; it starts the
	// grace period.
	firstSeen map[string]time.Time
	// graceUntil is the earliest moment an unexpected route held back by the
	// grace period may go; zero when none is held.
	graceUntil time.Time

	// hostRoutes remembers, for every /32 and /128 on a managed interface,
	// the interface the kernel last routed it to (as read from a dump or
	// written by us). It is what makes conntrack cleanup possible after the
	// interface — and with it the kernel route — has already disappeared.
	hostRoutes map[netip.Prefix]string
	// orphans are host CIDRs that lost their last claim; their conntrack
	// flows are cleaned once the kernel route is gone.
	orphans map[netip.Prefix]struct{}
	// pendingCT maps an IP to the channel of the conntrack cleanup running
	// for it; a route for the IP is only programmed after it closes.
	pendingCT map[netip.Addr]<-chan struct{}
	// arp holds the static neighbour entries programmed per interface (IP →
	// MAC), so that removed ones can be deleted.
	arp map[string]map[netip.Addr]string
	// synced counts, per interface, the desired routes known to be in the
	// kernel after the last sync of that interface.
	synced map[string]int
	// links caches the last link seen per managed interface name.
	links map[string]Link
	// programmed is, per interface, the targets known to be in the kernel as
	// routelet wants them: set from the last read of the interface, then kept
	// up to date by every successful write. A nil map means "unknown, read
	// the kernel". It lets an Apply that only follows setter changes skip the
	// route dump (which walks the whole table even when filtered).
	programmed map[string]map[netip.Prefix]Target
	// replaced holds the CIDRs written by RouteReplace in the current Apply.
	replaced map[netip.Prefix]struct{}
	// conflicts holds the desired CIDRs whose kernel key a route we do not
	// own holds, as last seen.
	conflicts      map[netip.Prefix]conflict
	conflictsTotal uint64
	// foreign is, during an Apply that read the whole table, every route of
	// our key shape (TOS 0, our metric) that we do not own, by destination.
	foreign map[netip.Prefix]netlink.Route

	writes     uint64
	lastResync time.Duration
	lastApply  time.Duration
}

// New returns a RouteTable using the real kernel (netlink, conntrack) of the
// calling thread's network namespace at the time of the call.
func New(cfg Config) (*RouteTable, error) {
	timeout := cfg.NetlinkTimeout
	if timeout == 0 {
		timeout = defaultNetlinkTimeout
	}
	nl, err := newRealNetlink(timeout)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	ct, err := newRealConntrack(int(nl.ns))
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("routes: %w", err)
	}
	rt, err := NewWithDeps(cfg, nl, ct, nil)
	if err != nil {
		nl.Close()
		ct.Close()
		return nil, err
	}
	return rt, nil
}

// NewWithDeps returns a RouteTable on the given seams: nl for routes, links
// and neighbours, ct for conntrack cleanup (nil disables it), clock for the
// grace period (nil means the wall clock). Tests pass routestest.FakeNetlink and
// routestest.FakeConntrack.
func NewWithDeps(cfg Config, nl Netlink, ct Conntrack, clock Clock) (*RouteTable, error) {
	if nl == nil {
		return nil, errors.New("routes: nil Netlink")
	}
	rt := &RouteTable{
		cfg:        cfg,
		nl:         nl,
		clock:      clock,
		log:        cfg.Logger,
		desired:    map[string]map[netip.Prefix]Target{},
		claims:     map[netip.Prefix][]string{},
		dirty:      map[string]dirtyKind{},
		partial:    map[string]map[netip.Prefix]struct{}{},
		links:      map[string]Link{},
		programmed: map[string]map[netip.Prefix]Target{},
		fullResync: true,
		firstSeen:  map[string]time.Time{},
		hostRoutes: map[netip.Prefix]string{},
		orphans:    map[netip.Prefix]struct{}{},
		pendingCT:  map[netip.Addr]<-chan struct{}{},
		arp:        map[string]map[netip.Addr]string{},
		synced:     map[string]int{},
		replaced:   map[netip.Prefix]struct{}{},
		conflicts:  map[netip.Prefix]conflict{},
	}
	switch cfg.IPVersion {
	case 4:
		rt.family = netlink.FAMILY_V4
	case 6:
		rt.family = netlink.FAMILY_V6
		rt.priority = v6DefaultMetric
	default:
		return nil, fmt.Errorf("routes: IP version %d: want 4 or 6", cfg.IPVersion)
	}
	rt.table = cfg.Table
	if rt.table == 0 {
		rt.table = unix.RT_TABLE_MAIN
	}
	if rt.table < 0 {
		return nil, fmt.Errorf("routes: table %d: want 0..2^31", cfg.Table)
	}
	proto := cfg.Protocol
	if proto == 0 {
		proto = DefaultProtocol
	}
	if proto < 0 || proto > 255 {
		return nil, fmt.Errorf("routes: protocol %d: want 1..255", cfg.Protocol)
	}
	rt.protocol = netlink.RouteProtocol(proto)
	rt.spec = Spec{IPVersion: cfg.IPVersion, Table: rt.table, Protocol: proto}
	for _, p := range cfg.InterfacePrefixes {
		if p == "" {
			return nil, errors.New("routes: empty interface prefix would claim every interface")
		}
	}
	rt.timeout = cfg.NetlinkTimeout
	if rt.timeout <= 0 {
		rt.timeout = defaultNetlinkTimeout
	}
	rt.grace = cfg.GracePeriod
	if rt.grace == 0 {
		rt.grace = DefaultGracePeriod
	}
	if rt.log == nil {
		rt.log = slog.Default()
	}
	rt.log = rt.log.With("ipVersion", cfg.IPVersion, "table", rt.table)
	if rt.clock == nil {
		rt.clock = realClock{}
	}
	if ct != nil {
		rt.cleaner = &conntrackCleaner{ct: ct, log: rt.log}
	}
	return rt, nil
}

// Close waits for running conntrack cleanups and releases the kernel sockets.
// The RouteTable must not be used afterwards.
func (rt *RouteTable) Close() error {
	var errs []error
	if rt.cleaner != nil {
		rt.cleaner.wait()
		errs = append(errs, rt.cleaner.ct.Close())
	}
	errs = append(errs, rt.nl.Close())
	return errors.Join(errs...)
}

// kindOf says how far routelet owns the interface called name.
func (rt *RouteTable) kindOf(name string) ifaceKind {
	if name == InterfaceNone {
		if rt.cfg.IncludeNoInterface {
			return kindNoIface
		}
		return kindUnmanaged
	}
	for _, p := range rt.cfg.InterfacePrefixes {
		if strings.HasPrefix(name, p) {
			return kindWorkload
		}
	}
	if slices.Contains(rt.cfg.InterfaceNames, name) {
		return kindShared
	}
	return kindUnmanaged
}

// SetRoutes replaces every desired route on iface (memory only). Invalid
// targets (wrong family, a no-interface type on a real interface, a gateway
// route without gateway…) are logged and left out.
func (rt *RouteTable) SetRoutes(iface string, targets []Target) {
	rt.setRoutes(iface, targets)
}

// SetAllRoutes replaces the desired routes of the whole table (memory
// only): each interface in byIface gets its targets as SetRoutes sets them,
// every other interface wants none. It reports whether the desired state
// changed, that is whether the next Apply has routes to program. Interfaces
// are set in name order, so which one wins a contested CIDR does not depend
// on map order.
func (rt *RouteTable) SetAllRoutes(byIface map[string][]Target) bool {
	changed := false
	for iface := range rt.desired {
		if _, ok := byIface[iface]; !ok {
			changed = rt.setRoutes(iface, nil) || changed
		}
	}
	// The loop re-sets the whole table on every pass, usually with one
	// interface changed or none: the others are compared without building
	// anything.
	var set []string
	for iface, targets := range byIface {
		if !rt.sameDesired(iface, targets) {
			set = append(set, iface)
		}
	}
	slices.Sort(set)
	for _, iface := range set {
		changed = rt.setRoutes(iface, byIface[iface]) || changed
	}
	return changed
}

// sameDesired reports whether setting targets on iface would leave its
// desired routes as they are. It answers false (let setRoutes decide) when
// it cannot tell cheaply: valid targets not in strictly increasing CIDR
// order (masked), which callers that sort them, as the daemon does, never
// pass.
func (rt *RouteTable) sameDesired(iface string, targets []Target) bool {
	prev := rt.desired[iface]
	n := 0
	var last netip.Prefix
	for _, t := range targets {
		t, err := rt.normalize(iface, t)
		if err != nil {
			continue // setRoutes leaves it out too
		}
		if n > 0 && !cidrLess(last, t.CIDR) {
			return false // maybe a CIDR twice: setRoutes keeps the last
		}
		if old, ok := prev[t.CIDR]; !ok || !old.Equal(t) {
			return false
		}
		last = t.CIDR
		n++
	}
	return n == len(prev)
}

// cidrLess orders prefixes by address, then length.
func cidrLess(a, b netip.Prefix) bool {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c < 0
	}
	return a.Bits() < b.Bits()
}

// Wants reports whether dst is one of iface's desired routes, as the
// setters left them (whether or not iface wins the CIDR when another
// interface wants it too).
func (rt *RouteTable) Wants(iface string, dst netip.Prefix) bool {
	_, ok := rt.desired[iface][dst.Masked()]
	return ok
}

// setRoutes is SetRoutes, reporting whether iface's desired routes changed.
func (rt *RouteTable) setRoutes(iface string, targets []Target) bool {
	if !rt.acceptIface(iface) {
		return false
	}
	next := make(map[netip.Prefix]Target, len(targets))
	for _, t := range targets {
		t, err := rt.normalize(iface, t)
		if err != nil {
			rt.log.Warn("ignoring invalid route target", "iface", iface, "err", err)
			continue
		}
		next[t.CIDR] = t
	}
	prev := rt.desired[iface]
	for cidr := range prev {
		if _, ok := next[cidr]; !ok {
			rt.unclaim(iface, cidr)
		}
	}
	changed := len(prev) != len(next)
	for cidr, t := range next {
		old, ok := prev[cidr]
		if !ok {
			rt.claim(iface, cidr)
			changed = true
		} else if !old.Equal(t) {
			changed = true
		}
	}
	if len(next) == 0 {
		delete(rt.desired, iface)
	} else {
		rt.desired[iface] = next
	}
	if changed {
		rt.markDirty(iface, needSync)
	}
	return changed
}

// RouteUpdate adds or changes one desired route on iface (memory only).
func (rt *RouteTable) RouteUpdate(iface string, t Target) {
	if !rt.acceptIface(iface) {
		return
	}
	t, err := rt.normalize(iface, t)
	if err != nil {
		rt.log.Warn("ignoring invalid route target", "iface", iface, "err", err)
		return
	}
	m := rt.desired[iface]
	if m == nil {
		m = map[netip.Prefix]Target{}
		rt.desired[iface] = m
	}
	old, ok := m[t.CIDR]
	if ok && old.Equal(t) {
		return
	}
	m[t.CIDR] = t
	if !ok {
		rt.claim(iface, t.CIDR)
	}
	rt.touch(iface, t.CIDR)
}

// RouteRemove drops one desired route from iface (memory only).
func (rt *RouteTable) RouteRemove(iface string, cidr netip.Prefix) {
	cidr = cidr.Masked()
	m := rt.desired[iface]
	if _, ok := m[cidr]; !ok {
		return
	}
	delete(m, cidr)
	if len(m) == 0 {
		delete(rt.desired, iface)
	}
	rt.unclaim(iface, cidr)
	rt.touch(iface, cidr)
}

// OnIfaceStateChanged records that iface went up (true) or down/away (false);
// an iface coming up is marked dirty so its routes are programmed.
func (rt *RouteTable) OnIfaceStateChanged(iface string, up bool) {
	if iface == InterfaceNone || rt.kindOf(iface) == kindUnmanaged {
		return
	}
	if !up {
		// The kernel drops the routes of a device that goes down; they are
		// put back when it comes up again.
		rt.synced[iface] = 0
		delete(rt.programmed, iface)
		delete(rt.links, iface)
		return
	}
	rt.onIfaceSeen(iface)
	rt.markDirty(iface, needRead)
}

// Hold, while hold is set, keeps every route and static ARP entry on iface
// in the kernel, desired or not: Apply still writes the desired ones but
// deletes nothing there (for a caller that cannot tell what the interface
// should hold, e.g. while the record describing it cannot be read).
// Releasing it makes the next Apply re-read iface and remove what is not
// desired.
func (rt *RouteTable) Hold(iface string, hold bool) {
	_, was := rt.held[iface]
	switch {
	case hold && !was:
		if rt.held == nil {
			rt.held = map[string]struct{}{}
		}
		rt.held[iface] = struct{}{}
	case !hold && was:
		delete(rt.held, iface)
		if rt.kindOf(iface) != kindUnmanaged {
			rt.markDirty(iface, needRead)
		}
	}
}

// MarkDirty asks the next Apply to re-read and repair iface (e.g. after a
// netlink route event showed tampering). InterfaceNone is accepted.
func (rt *RouteTable) MarkDirty(iface string) {
	if rt.kindOf(iface) == kindUnmanaged {
		return
	}
	rt.markDirty(iface, needRead)
}

// dirtyKind says how much work a dirty interface needs.
type dirtyKind uint8

const (
	// needSync: only the desired state changed; the remembered kernel view
	// of the interface is trusted.
	needSync dirtyKind = iota + 1
	// needRead: the kernel may differ from what we remember (an event, a
	// failure, an interface coming up); read it first.
	needRead
)

// markDirty records that iface needs at least kind of work, all of its
// routes looked at.
func (rt *RouteTable) markDirty(iface string, kind dirtyKind) {
	if rt.dirty[iface] < kind {
		rt.dirty[iface] = kind
	}
	delete(rt.partial, iface)
}

// touch records that the desired route of cidr on iface changed (memory
// only). An interface in sync until now only needs that CIDR looked at
// (partial); one already dirty for another reason stays as it is.
func (rt *RouteTable) touch(iface string, cidr netip.Prefix) {
	if _, dirty := rt.dirty[iface]; !dirty {
		rt.dirty[iface] = needSync
		rt.partial[iface] = map[netip.Prefix]struct{}{cidr: {}}
		return
	}
	if set, ok := rt.partial[iface]; ok {
		set[cidr] = struct{}{}
	}
}

// QueueResync makes the next Apply a full resync (re-read the whole table).
func (rt *RouteTable) QueueResync() { rt.fullResync = true }

// RetryAfter reports how long until an unexpected route that the grace
// period currently protects may be removed; the caller should Apply again
// then. It returns 0 and false when nothing is waiting.
func (rt *RouteTable) RetryAfter() (time.Duration, bool) {
	if rt.graceUntil.IsZero() {
		return 0, false
	}
	return max(rt.graceUntil.Sub(rt.clock.Now()), 0), true
}

// WaitConntrackCleanups blocks until every conntrack cleanup started so far
// has finished. Apply does not need it (it waits per IP before re-adding a
// route); tests and shutdown do.
func (rt *RouteTable) WaitConntrackCleanups() {
	if rt.cleaner != nil {
		rt.cleaner.wait()
	}
}

// Stats returns counters for metrics.
func (rt *RouteTable) Stats() Stats {
	s := Stats{
		DirtyIfaces: len(rt.dirty),
		LastResync:  rt.lastResync,
		LastApply:   rt.lastApply,
		Writes:      rt.writes,
	}
	for _, n := range rt.synced {
		s.Routes += n
	}
	if rt.cleaner != nil {
		s.ConntrackFlowsDeleted = rt.cleaner.deleted.Load()
	}
	s.Conflicts = len(rt.conflicts)
	s.ConflictsTotal = rt.conflictsTotal
	return s
}

// acceptIface refuses desired routes on an interface routelet does not own:
// programming them would mean touching someone else's device.
func (rt *RouteTable) acceptIface(iface string) bool {
	if rt.kindOf(iface) != kindUnmanaged {
		return true
	}
	rt.log.Warn("ignoring routes for an interface outside this table's ownership",
		"iface", iface, "prefixes", rt.cfg.InterfacePrefixes, "names", rt.cfg.InterfaceNames)
	return false
}

// normalize validates t for iface and masks its CIDR.
func (rt *RouteTable) normalize(iface string, t Target) (Target, error) {
	if !t.CIDR.IsValid() {
		return t, fmt.Errorf("invalid CIDR %v", t.CIDR)
	}
	t.CIDR = t.CIDR.Masked()
	if rt.familyOf(t.CIDR.Addr()) != rt.family {
		return t, fmt.Errorf("CIDR %s is not IPv%d", t.CIDR, rt.cfg.IPVersion)
	}
	noIface := t.Type >= TypeBlackhole && t.Type <= TypeThrow
	switch {
	case t.Type < TypeLink || t.Type > TypeThrow:
		return t, fmt.Errorf("CIDR %s: unknown target type %d", t.CIDR, t.Type)
	case noIface != (iface == InterfaceNone):
		return t, fmt.Errorf("CIDR %s: type %s is not valid on interface %q", t.CIDR, t.Type, iface)
	case t.Type == TypeGateway && (!t.Gateway.IsValid() || rt.familyOf(t.Gateway) != rt.family):
		return t, fmt.Errorf("CIDR %s: gateway %v is not an IPv%d address", t.CIDR, t.Gateway, rt.cfg.IPVersion)
	case t.Src.IsValid() && rt.familyOf(t.Src) != rt.family:
		return t, fmt.Errorf("CIDR %s: source %v is not an IPv%d address", t.CIDR, t.Src, rt.cfg.IPVersion)
	case t.MTU < 0:
		return t, fmt.Errorf("CIDR %s: negative MTU %d", t.CIDR, t.MTU)
	case t.DestMAC != nil && (rt.family != netlink.FAMILY_V4 || !isHost(t.CIDR) || len(t.DestMAC) != 6):
		return t, fmt.Errorf("CIDR %s: static ARP (MAC %s) needs an IPv4 /32 and a 6-byte MAC", t.CIDR, t.DestMAC)
	}
	if t.Type != TypeGateway {
		t.Gateway, t.OnLink = netip.Addr{}, false
	}
	return t, nil
}

// familyOf returns the netlink family of an address.
func (rt *RouteTable) familyOf(a netip.Addr) int {
	if a.Unmap().Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// claim records that iface wants cidr; the newest claim wins the kernel key,
// so the previous winner must re-sync (its route is being replaced).
func (rt *RouteTable) claim(iface string, cidr netip.Prefix) {
	list := rt.claims[cidr]
	if slices.Contains(list, iface) {
		return
	}
	if n := len(list); n > 0 {
		prev := list[n-1]
		rt.log.Warn("two interfaces want the same route; the newest wins",
			"cidr", cidr, "iface", iface, "previous", prev)
		rt.markDirty(prev, needSync)
		if n == 1 {
			rt.contested++
		}
	}
	rt.claims[cidr] = append(list, iface)
	delete(rt.orphans, cidr)
}

// unclaim withdraws iface's claim on cidr; when iface was the winner the next
// claimant takes over, and when nobody is left a host CIDR is queued for
// conntrack cleanup.
func (rt *RouteTable) unclaim(iface string, cidr netip.Prefix) {
	list := rt.claims[cidr]
	n := len(list)
	wasWinner := n > 0 && list[n-1] == iface
	list = slices.DeleteFunc(list, func(s string) bool { return s == iface })
	if n > 1 && len(list) == 1 {
		rt.contested--
	}
	if len(list) == 0 {
		delete(rt.claims, cidr)
		delete(rt.conflicts, cidr)
		if isHost(cidr) {
			rt.orphans[cidr] = struct{}{}
		}
		return
	}
	rt.claims[cidr] = list
	if wasWinner {
		rt.markDirty(list[len(list)-1], needSync)
	}
}

// winner returns the interface whose claim on cidr the kernel should hold.
func (rt *RouteTable) winner(cidr netip.Prefix) string {
	list := rt.claims[cidr]
	if len(list) == 0 {
		return ""
	}
	return list[len(list)-1]
}

// effective returns the targets iface should have in the kernel: its desired
// ones minus those another interface claimed more recently.
//
// The result must not be modified: without contested CIDRs it is the
// desired map itself.
func (rt *RouteTable) effective(iface string) map[netip.Prefix]Target {
	want := rt.desired[iface]
	if rt.contested == 0 {
		return want
	}
	out := make(map[netip.Prefix]Target, len(want))
	for cidr, t := range want {
		if rt.winner(cidr) == iface {
			out[cidr] = t
		}
	}
	return out
}

// onIfaceSeen starts the grace period of an interface seen for the first time.
func (rt *RouteTable) onIfaceSeen(iface string) {
	if _, ok := rt.firstSeen[iface]; !ok {
		rt.firstSeen[iface] = rt.clock.Now()
	}
}

// inGrace reports whether iface is inside its grace period, and when it ends.
func (rt *RouteTable) inGrace(iface string) (bool, time.Time) {
	if rt.grace < 0 {
		return false, time.Time{}
	}
	seen, ok := rt.firstSeen[iface]
	if !ok {
		return false, time.Time{}
	}
	end := seen.Add(rt.grace)
	return rt.clock.Now().Before(end), end
}

// tick calls the liveness callback every livenessEvery kernel operations.
func (rt *RouteTable) tick() {
	rt.ops++
	if rt.ops >= livenessEvery {
		rt.ops = 0
		if rt.cfg.Liveness != nil {
			rt.cfg.Liveness()
		}
	}
}

// isHost reports a /32 or /128.
func isHost(p netip.Prefix) bool { return p.Bits() == p.Addr().BitLen() }

// Equal reports whether t and o are identical, static ARP included (a
// function value for slices.EqualFunc: routes.Target.Equal).
func (t Target) Equal(o Target) bool {
	return sameRoute(t, o) && bytes.Equal(t.DestMAC, o.DestMAC)
}

// sameRoute reports whether a and b make the same kernel route (DestMAC is a
// neighbour entry, not part of the route).
func sameRoute(a, b Target) bool {
	return a.CIDR == b.CIDR && a.Type == b.Type && a.Gateway == b.Gateway && a.OnLink == b.OnLink &&
		a.Src == b.Src && a.MTU == b.MTU
}

// String names the target type the way `ip route` would.
func (t TargetType) String() string {
	switch t {
	case TypeLink:
		return "link"
	case TypeGateway:
		return "gateway"
	case TypeBlackhole:
		return "blackhole"
	case TypeUnreachable:
		return "unreachable"
	case TypeProhibit:
		return "prohibit"
	case TypeThrow:
		return "throw"
	}
	return fmt.Sprintf("TargetType(%d)", int(t))
}

// kernelType maps a target type to the rtm_type the kernel uses.
func (t TargetType) kernelType() int {
	switch t {
	case TypeBlackhole:
		return unix.RTN_BLACKHOLE
	case TypeUnreachable:
		return unix.RTN_UNREACHABLE
	case TypeProhibit:
		return unix.RTN_PROHIBIT
	case TypeThrow:
		return unix.RTN_THROW
	}
	return unix.RTN_UNICAST
}

// IsNoInterfaceType reports the rtm_types that route nowhere and have no
// device (blackhole, unreachable, prohibit, throw): the routes kept under
// InterfaceNone.
func IsNoInterfaceType(t int) bool {
	switch t {
	case unix.RTN_BLACKHOLE, unix.RTN_UNREACHABLE, unix.RTN_PROHIBIT, unix.RTN_THROW:
		return true
	}
	return false
}

// prefixToIPNet converts a prefix for the netlink library.
func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// addrToIP converts an address for the netlink library; invalid gives nil.
func addrToIP(a netip.Addr) net.IP {
	if !a.IsValid() {
		return nil
	}
	return net.IP(a.AsSlice())
}

// routeDst returns a kernel route's destination; the library leaves Dst nil
// for a default route.
func (rt *RouteTable) routeDst(r *netlink.Route) (netip.Prefix, bool) {
	if r.Dst == nil {
		if rt.family == netlink.FAMILY_V4 {
			return netip.PrefixFrom(netip.IPv4Unspecified(), 0), true
		}
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0), true
	}
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := r.Dst.Mask.Size()
	if rt.family == netlink.FAMILY_V4 {
		a = a.Unmap()
	}
	return netip.PrefixFrom(a, ones).Masked(), true
}
