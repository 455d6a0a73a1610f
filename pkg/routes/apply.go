package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/compact"
	"github.com/routelet/routelet/internal/nlutil"
)

// ifaceWork is one interface's share of an Apply: what the kernel holds,
// what to write, and how it went.
type ifaceWork struct {
	name string
	kind ifaceKind
	link Link
	// usable: the interface exists and is up (always true for InterfaceNone).
	usable bool
	// kernel holds the routes of our table through this interface that
	// ownership lets us look at.
	kernel []netlink.Route
	adds   []routeAdd
	dels   []netlink.Route
	errs   []error
	// graceHeld: an unexpected route was kept because of the grace period.
	graceHeld bool
	want      map[netip.Prefix]Target
	// moved lists host IPs the kernel already routes here while we last
	// saw them on another interface.
	moved []netip.Addr
	// fromMemory: planned against rt.programmed instead of a kernel read.
	fromMemory bool
	// reread: the interface changed under us (e.g. re-created with a new
	// index); read it on the next Apply.
	reread bool
}

type routeAdd struct {
	target Target
	route  netlink.Route
	// replace: the key is known to hold a route of ours, which this one
	// replaces in place; otherwise the route is created exclusively and an
	// existing route under the key (EEXIST) is looked at before anything
	// is overwritten.
	replace bool
}

// Apply reconciles the kernel with the desired state: a full resync when one
// is queued (and on the first call), else only dirty interfaces. Failed
// interfaces stay dirty and are retried on the next call. It returns the
// errors joined.
//
// Order of work: every add and change (RouteReplace) of every interface goes
// first, deletes after, so a route that moves between interfaces, or changes
// type, is never absent from the kernel. A desired route whose key a route
// we do not own holds is not written (see RouteTable); its error wraps
// ErrForeignRoute.
func (rt *RouteTable) Apply() error {
	start := time.Now()
	rt.reapConntrack()
	var errs []error
	var work []*ifaceWork
	full := rt.fullResync
	var kernelNeigh map[neighKey]netlink.Neigh
	if full {
		w, err := rt.readAll()
		if err != nil {
			rt.lastApply = time.Since(start)
			return err
		}
		work = w
		rt.fullResync = false
		clear(rt.dirty)
		clear(rt.partial)
		kernelNeigh, err = rt.readNeighbours(work)
		if err != nil {
			errs = append(errs, err)
		}
	} else {
		for iface, kind := range rt.dirty {
			if w := rt.fromMemory(iface, kind); w != nil {
				work = append(work, w)
				continue
			}
			delete(rt.partial, iface) // read: every route is looked at
			w, err := rt.readOne(iface)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			work = append(work, w)
		}
	}

	for _, w := range work {
		rt.plan(w)
		if _, held := rt.held[w.name]; held && len(w.dels) > 0 {
			rt.log.Debug("keeping undesired routes of a held interface", "iface", w.name, "routes", len(w.dels))
			w.dels = nil
		}
	}
	rt.startMoveCleanups(work)
	rt.replaced = compact.Clear(rt.replaced)
	rt.applyAdds(work)
	for _, w := range work {
		rt.applyDeletes(w)
	}
	for _, w := range work {
		rt.applyNeighbours(w, full, kernelNeigh)
	}

	rt.graceUntil = time.Time{}
	for _, w := range work {
		delete(rt.partial, w.name)
		switch {
		case len(w.errs) > 0:
			// The kernel state is uncertain now: re-read it next time.
			errs = append(errs, w.errs...)
			rt.dirty[w.name] = needRead
			delete(rt.programmed, w.name)
		case w.graceHeld:
			rt.dirty[w.name] = needRead
			if _, end := rt.inGrace(w.name); rt.graceUntil.IsZero() || end.Before(rt.graceUntil) {
				rt.graceUntil = end
			}
		case w.reread:
			rt.dirty[w.name] = needRead
		default:
			delete(rt.dirty, w.name)
		}
	}
	rt.cleanupOrphans()
	rt.foreign = nil

	rt.lastApply = time.Since(start)
	if full {
		rt.lastResync = rt.lastApply
	}
	return errors.Join(errs...)
}

// readAll reads the interface list and the whole table (one dump) and files
// every route we may own under its interface. It returns work for every
// managed interface that exists or has desired routes.
func (rt *RouteTable) readAll() ([]*ifaceWork, error) {
	links, err := rt.nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("routes: full resync: %w", err)
	}
	routes, err := rt.nl.RouteList(rt.family, rt.table, 0)
	if err != nil {
		return nil, fmt.Errorf("routes: full resync: %w", err)
	}
	byName := map[string]*ifaceWork{}
	byIndex := map[int]*ifaceWork{}
	seen := map[string]struct{}{}
	clear(rt.links)
	for _, l := range links {
		kind := rt.kindOf(l.Name)
		if kind == kindUnmanaged {
			continue
		}
		rt.links[l.Name] = l
		w := &ifaceWork{name: l.Name, kind: kind, link: l, usable: l.Up}
		byName[l.Name] = w
		byIndex[l.Index] = w
		seen[l.Name] = struct{}{}
		rt.onIfaceSeen(l.Name)
	}
	// Forget first-seen times of interfaces that are gone, once their grace
	// period is over (a quick delete and re-create keeps its grace).
	for name := range rt.firstSeen {
		if _, ok := seen[name]; !ok {
			if in, _ := rt.inGrace(name); !in {
				delete(rt.firstSeen, name)
			}
		}
	}
	if rt.cfg.IncludeNoInterface || len(rt.desired[InterfaceNone]) > 0 {
		byName[InterfaceNone] = &ifaceWork{name: InterfaceNone, kind: rt.kindOf(InterfaceNone), usable: true}
	}
	rt.foreign = nil
	for i := range routes {
		r := &routes[i]
		var w *ifaceWork
		if IsNoInterfaceType(r.Type) {
			w = byName[InterfaceNone]
		} else if r.Type == unix.RTN_UNICAST && len(r.MultiPath) == 0 {
			w = byIndex[r.LinkIndex]
		}
		if (w == nil || !rt.ownsKernelRoute(w.kind, r)) && r.Tos == 0 && r.Priority == rt.priority {
			// Under one of our keys, not ours: a desired route there must
			// not be written (the whole table is at hand, so no write needs
			// to find out).
			if dst, ok := rt.routeDst(r); ok {
				if rt.foreign == nil {
					rt.foreign = map[netip.Prefix]netlink.Route{}
				}
				rt.foreign[dst] = *r
			}
		}
		if w == nil {
			continue
		}
		w.kernel = append(w.kernel, *r)
	}
	for name := range rt.desired {
		if _, ok := byName[name]; !ok {
			byName[name] = &ifaceWork{name: name, kind: rt.kindOf(name)}
		}
	}
	// Forget what we remembered about interfaces that are neither present
	// nor wanted any more.
	for name := range rt.synced {
		if _, ok := byName[name]; !ok {
			delete(rt.synced, name)
		}
	}
	for name := range rt.programmed {
		if _, ok := byName[name]; !ok {
			delete(rt.programmed, name)
		}
	}
	for name := range rt.arp {
		if _, ok := byName[name]; !ok {
			delete(rt.arp, name)
		}
	}
	work := make([]*ifaceWork, 0, len(byName))
	for _, w := range byName {
		work = append(work, w)
		rt.tick()
	}
	return work, nil
}

// readOne reads one dirty interface: its link and the routes of our table
// through it (the dump is filtered by the kernel).
func (rt *RouteTable) readOne(iface string) (*ifaceWork, error) {
	w := &ifaceWork{name: iface, kind: rt.kindOf(iface)}
	if iface == InterfaceNone {
		w.usable = true
		routes, err := rt.nl.RouteList(rt.family, rt.table, 0)
		if err != nil {
			return nil, fmt.Errorf("routes: read %s: %w", iface, err)
		}
		for _, r := range routes {
			if IsNoInterfaceType(r.Type) {
				w.kernel = append(w.kernel, r)
			}
		}
		return w, nil
	}
	if w.kind == kindUnmanaged {
		return w, nil
	}
	link, err := rt.nl.LinkByName(iface)
	if errors.Is(err, ErrLinkNotFound) {
		delete(rt.links, iface)
		return w, nil
	}
	if err != nil {
		return nil, fmt.Errorf("routes: read %s: %w", iface, err)
	}
	rt.links[iface] = link
	w.link = link
	rt.onIfaceSeen(iface)
	if !link.Up {
		return w, nil
	}
	w.usable = true
	routes, err := rt.nl.RouteList(rt.family, rt.table, link.Index)
	if err != nil {
		if isGoneErr(err) {
			w.usable = false
			return w, nil
		}
		return nil, fmt.Errorf("routes: read %s: %w", iface, err)
	}
	for _, r := range routes {
		if r.LinkIndex == link.Index && r.Type == unix.RTN_UNICAST && len(r.MultiPath) == 0 {
			w.kernel = append(w.kernel, r)
		}
	}
	return w, nil
}

// fromMemory returns work for an interface whose only change is in the
// desired state and whose kernel state we know (rt.programmed), or nil when
// the kernel must be read.
func (rt *RouteTable) fromMemory(iface string, kind dirtyKind) *ifaceWork {
	if kind != needSync {
		return nil
	}
	if _, ok := rt.programmed[iface]; !ok {
		return nil
	}
	w := &ifaceWork{name: iface, kind: rt.kindOf(iface), usable: true, fromMemory: true}
	if iface != InterfaceNone {
		link, ok := rt.links[iface]
		if !ok || !link.Up {
			return nil
		}
		w.link = link
	}
	return w
}

// plan compares what w's interface should hold with what the kernel holds
// (or, for work from memory, what we know we programmed) and fills w.adds
// and w.dels.
func (rt *RouteTable) plan(w *ifaceWork) {
	if !w.usable {
		rt.synced[w.name] = 0
		delete(rt.programmed, w.name)
		return
	}
	w.want = rt.effective(w.name)
	rt.synced[w.name] = len(w.want)
	if w.fromMemory {
		rt.planFromMemory(w)
		return
	}
	prev := rt.programmed[w.name]
	have := make(map[netip.Prefix]Target, len(w.want))
	rt.programmed[w.name] = have
	var mismatched map[netip.Prefix]struct{} // desired, present, but different
	for i := range w.kernel {
		r := &w.kernel[i]
		dst, ok := rt.routeDst(r)
		if !ok {
			continue
		}
		if isHost(dst) && (w.kind == kindWorkload || r.Protocol == rt.protocol) {
			if prev, ok := rt.hostRoutes[dst]; !ok || prev != w.name {
				if ok {
					// Someone else (the CNI plugin) already moved the IP.
					w.moved = append(w.moved, dst.Addr())
				}
				rt.hostRoutes[dst] = w.name
			}
		}
		if r.Tos == 0 && r.Priority == rt.priority {
			if t, ok := w.want[dst]; ok {
				matched := rt.matches(t, r)
				switch {
				case matched:
					have[dst] = t
					if len(rt.conflicts) > 0 {
						delete(rt.conflicts, dst)
					}
				case rt.ownsKernelRoute(w.kind, r):
					w.adds = append(w.adds, routeAdd{target: t, route: rt.buildRoute(w, t), replace: true})
				default:
					// Another owner's route on a shared device, or a
					// no-interface route of another protocol.
					rt.conflictFound(w, t, r)
				}
				if !matched {
					if mismatched == nil {
						mismatched = map[netip.Prefix]struct{}{}
					}
					mismatched[dst] = struct{}{}
				}
				continue
			}
		}
		if _, wrote := prev[dst]; wrote && r.Protocol == rt.protocol && r.Tos == 0 && r.Priority == rt.priority {
			// We programmed it and nobody wants it now: not "unexpected",
			// so no grace period applies.
			w.dels = append(w.dels, *r)
			continue
		}
		if rt.mayDelete(w, r, dst) {
			w.dels = append(w.dels, *r)
		}
	}
	if len(have) == len(w.want) {
		return
	}
	for cidr, t := range w.want {
		_, ok := have[cidr]
		if _, bad := mismatched[cidr]; !ok && !bad {
			rt.planAdd(w, t, false)
		}
	}
}

// planAdd queues the write of t, absent from w's interface: a replace when
// our route holds the key (ours is the CIDR's previous interface, or
// ourHere: the route we programmed on w), nothing but a reported conflict
// when this Apply's full read found another owner's route under the key,
// and otherwise an exclusive create.
func (rt *RouteTable) planAdd(w *ifaceWork, t Target, ourHere bool) {
	if h, ok := rt.foreign[t.CIDR]; ok && !ourHere {
		rt.conflictFound(w, t, &h)
		return
	}
	w.adds = append(w.adds, routeAdd{target: t, route: rt.buildRoute(w, t), replace: ourHere || rt.oursElsewhere(w.name, t.CIDR)})
}

// oursElsewhere reports whether, as far as we know, the kernel routes host
// CIDR cidr to another interface with a route we programmed: the route moves.
func (rt *RouteTable) oursElsewhere(iface string, cidr netip.Prefix) bool {
	if !isHost(cidr) {
		return false
	}
	prev, ok := rt.hostRoutes[cidr]
	if !ok || prev == iface {
		return false
	}
	_, ok = rt.programmed[prev][cidr]
	return ok
}

// planFromMemory diffs the desired targets against the ones we know we
// programmed. Deletes name the route by key, device, type and our protocol,
// with scope "nowhere" (any): what we wrote, whatever its other attributes
// became since.
func (rt *RouteTable) planFromMemory(w *ifaceWork) {
	have := rt.programmed[w.name]
	if set, ok := rt.partial[w.name]; ok && rt.contested == 0 {
		// Every other CIDR is programmed as desired, and with nothing
		// contested no other interface's claim moved one here or away.
		for cidr := range set {
			t, want := w.want[cidr]
			h, had := have[cidr]
			switch {
			case want && (!had || !sameRoute(h, t)):
				rt.planAdd(w, t, had)
			case !want && had:
				w.dels = append(w.dels, rt.memoryDelete(w, h))
			}
		}
		return
	}
	for cidr, t := range w.want {
		if h, ok := have[cidr]; !ok || !sameRoute(h, t) {
			rt.planAdd(w, t, ok)
		}
	}
	for cidr, h := range have {
		if _, ok := w.want[cidr]; ok {
			continue
		}
		w.dels = append(w.dels, rt.memoryDelete(w, h))
	}
}

// memoryDelete is the delete of h, a route we programmed on w's interface.
func (rt *RouteTable) memoryDelete(w *ifaceWork, h Target) netlink.Route {
	r := rt.buildRoute(w, h)
	r.Scope = netlink.SCOPE_NOWHERE
	r.Src, r.MTU = nil, 0
	return r
}

// mayDelete applies the ownership rules (see RouteTable) to an undesired
// kernel route on w's interface.
func (rt *RouteTable) mayDelete(w *ifaceWork, r *netlink.Route, dst netip.Prefix) bool {
	switch w.kind {
	case kindShared, kindNoIface:
		return r.Protocol == rt.protocol
	case kindWorkload:
	default:
		return false
	}
	ours := r.Protocol == rt.protocol
	// Checked before the grace period: the kernel's own IPv6 link-local
	// route on every fresh veth would otherwise keep each new interface
	// "held" (and re-read on every Apply) for the whole grace period.
	if !ours && dst.Addr().Is6() && dst.Addr().IsLinkLocalUnicast() {
		return false
	}
	if !ours && !rt.cfg.RemoveExternalRoutes {
		return false
	}
	if in, _ := rt.inGrace(w.name); in {
		// The CNI plugin may have added a route before the daemon heard
		// of the workload: leave it until the grace period ends.
		w.graceHeld = true
		rt.log.Debug("keeping unexpected route during grace period", "iface", w.name, "cidr", dst)
		return false
	}
	return true
}

// buildRoute turns a target into the kernel route routelet writes through
// w's interface (Spec.Route).
func (rt *RouteTable) buildRoute(w *ifaceWork, t Target) netlink.Route {
	return rt.spec.Route(t, w.link.Index)
}

// matches reports whether kernel route k already is what target t asks for
// (Spec.Mismatch). k is filed under w by its device (readAll, readOne), so
// its device is w's interface, or none for the no-interface types.
func (rt *RouteTable) matches(t Target, k *netlink.Route) bool {
	return rt.spec.Mismatch(k, t) == ""
}

// startMoveCleanups starts conntrack cleanup for host routes about to move
// from one interface to another: flows of the IP's previous owner must not
// leak to the new one. The adds wait for it (waitConntrack).
func (rt *RouteTable) startMoveCleanups(work []*ifaceWork) {
	if rt.cleaner == nil {
		return
	}
	var ips []netip.Addr
	for _, w := range work {
		ips = append(ips, w.moved...)
		for _, a := range w.adds {
			cidr := a.target.CIDR
			if !isHost(cidr) {
				continue
			}
			if prev, ok := rt.hostRoutes[cidr]; ok && prev != w.name {
				ips = append(ips, cidr.Addr())
			}
		}
	}
	if len(ips) == 0 {
		return
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	rt.log.Debug("routes moving between interfaces, cleaning conntrack first", "ips", ips)
	done := rt.cleaner.start(ips)
	for _, ip := range ips {
		rt.pendingCT[ip] = done
	}
}

// waitConntrack blocks until a conntrack cleanup running for ip, if any, has
// finished, so that a re-added IP never meets the flows of its predecessor.
// The wait is bounded by the netlink timeout: a hung conntrack socket must
// not stop route programming (the add goes ahead, with a warning).
func (rt *RouteTable) waitConntrack(ip netip.Addr) {
	ch, ok := rt.pendingCT[ip]
	if !ok {
		return
	}
	select {
	case <-ch:
	case <-time.After(rt.timeout):
		rt.log.Warn("conntrack cleanup still running; programming the route anyway", "ip", ip, "waited", rt.timeout)
	}
	delete(rt.pendingCT, ip)
}

// reapConntrack forgets finished cleanups.
func (rt *RouteTable) reapConntrack() {
	for ip, ch := range rt.pendingCT {
		select {
		case <-ch:
			delete(rt.pendingCT, ip)
		default:
		}
	}
}

// addItem is one queued write of an Apply.
type addItem struct {
	w *ifaceWork
	a *routeAdd
}

// applyAdds writes the adds and changes of every interface. A route whose
// key holds a route of ours is written with RouteReplace, which is atomic:
// the old route (on this or another interface) is replaced, never removed
// first. Every other route is created exclusively; where that meets an
// existing route (EEXIST), one dump of the table shows who holds the key: a
// route of ours is then replaced, another owner's is left alone and
// reported (conflictFound). Many writes are pipelined (RouteReplaceMany,
// RouteAddMany); before any of them, cleanups of conntrack flows of the IPs
// concerned are waited for.
func (rt *RouteTable) applyAdds(work []*ifaceWork) {
	var items []addItem
	for _, w := range work {
		for i := range w.adds {
			a := &w.adds[i]
			if isHost(a.target.CIDR) {
				rt.waitConntrack(a.target.CIDR.Addr())
			}
			items = append(items, addItem{w, a})
		}
	}
	taken := rt.writeAdds(items, false)
	if len(taken) == 0 {
		return
	}
	rt.writeAdds(rt.resolveTaken(taken), true)
}

// writeAdds writes items in chunks, replaces and exclusive creates each
// pipelined, and records every outcome — except, unless final, the
// exclusive creates that met an existing route, which it returns.
func (rt *RouteTable) writeAdds(items []addItem, final bool) []addItem {
	var taken []addItem
	var repl, excl []*netlink.Route
	var replItems, exclItems []addItem
	for start := 0; start < len(items); start += livenessEvery {
		chunk := items[start:min(start+livenessEvery, len(items))]
		repl, excl, replItems, exclItems = repl[:0], excl[:0], replItems[:0], exclItems[:0]
		for _, it := range chunk {
			if it.a.replace {
				repl, replItems = append(repl, &it.a.route), append(replItems, it)
			} else {
				excl, exclItems = append(excl, &it.a.route), append(exclItems, it)
			}
		}
		for i, err := range rt.writeMany(repl, true) {
			rt.addDone(replItems[i].w, replItems[i].a, err)
		}
		for i, err := range rt.writeMany(excl, false) {
			if !final && errors.Is(err, unix.EEXIST) {
				taken = append(taken, exclItems[i])
				continue
			}
			rt.addDone(exclItems[i].w, exclItems[i].a, err)
		}
		rt.ops = 0
		if rt.cfg.Liveness != nil {
			rt.cfg.Liveness()
		}
	}
	return taken
}

// writeMany sends routes as replaces or exclusive creates, one call for a
// single route and pipelined for more, and returns one error per route.
func (rt *RouteTable) writeMany(routes []*netlink.Route, replace bool) []error {
	rt.writes += uint64(len(routes))
	switch {
	case len(routes) == 0:
		return nil
	case len(routes) == 1 && replace:
		return []error{rt.nl.RouteReplace(routes[0])}
	case len(routes) == 1:
		return []error{rt.nl.RouteAdd(routes[0])}
	case replace:
		return rt.nl.RouteReplaceMany(routes)
	}
	return rt.nl.RouteAddMany(routes)
}

// resolveTaken looks, with one dump of the table, at the routes holding the
// keys that exclusive creates found taken, and returns the writes to try
// again: a replace where every route under the key is ours, a create where
// the key is free again. Keys held by another owner's route are reported
// and not written.
func (rt *RouteTable) resolveTaken(taken []addItem) []addItem {
	routes, err := rt.nl.RouteList(rt.family, rt.table, 0)
	if err != nil {
		for _, it := range taken {
			rt.addDone(it.w, it.a, fmt.Errorf("key taken, and reading the table failed: %w", err))
		}
		return nil
	}
	want := make(map[netip.Prefix][]netlink.Route, len(taken))
	for _, it := range taken {
		want[it.a.target.CIDR] = nil
	}
	for i := range routes {
		r := &routes[i]
		if r.Tos != 0 || r.Priority != rt.priority {
			continue
		}
		if dst, ok := rt.routeDst(r); ok {
			if hs, ok := want[dst]; ok {
				want[dst] = append(hs, *r)
			}
		}
	}
	names := rt.linkNames()
	var again []addItem
	for _, it := range taken {
		holders := want[it.a.target.CIDR]
		i := slices.IndexFunc(holders, func(h netlink.Route) bool {
			return !rt.ownsKernelRoute(rt.kindOfRoute(&h, names), &h)
		})
		if i >= 0 {
			rt.conflictFound(it.w, it.a.target, &holders[i])
			continue
		}
		it.a.replace = len(holders) > 0
		again = append(again, it)
	}
	return again
}

// addDone records the outcome of one add.
func (rt *RouteTable) addDone(w *ifaceWork, a *routeAdd, err error) {
	if w.reread {
		return // the interface went away during this Apply
	}
	if err != nil {
		if w.name != InterfaceNone && isGoneErr(err) {
			// The interface vanished or went down since we read it (or was
			// re-created under a new index): read it again next time; if it
			// is really gone that read finds nothing to do.
			rt.log.Debug("interface gone while adding routes", "iface", w.name, "err", err)
			w.usable = false
			w.reread = true
			w.dels = nil
			rt.synced[w.name] = 0
			delete(rt.programmed, w.name)
			delete(rt.links, w.name)
			return
		}
		rt.synced[w.name]--
		w.errs = append(w.errs, fmt.Errorf("routes: write %s %s dev %s: %w",
			a.target.Type, a.target.CIDR, w.name, err))
		rt.log.Warn("route write failed", "iface", w.name, "cidr", a.target.CIDR, "err", err)
		return
	}
	rt.replaced[a.target.CIDR] = struct{}{}
	if len(rt.conflicts) > 0 {
		delete(rt.conflicts, a.target.CIDR)
	}
	if have := rt.programmed[w.name]; have != nil {
		have[a.target.CIDR] = a.target
	}
	if isHost(a.target.CIDR) {
		rt.hostRoutes[a.target.CIDR] = w.name
	}
	rt.log.Debug("route programmed", "iface", w.name, "cidr", a.target.CIDR, "type", a.target.Type)
}

// applyDeletes removes w's undesired routes. It deletes exactly the route it
// read (destination, table, TOS, metric, type, protocol and interface), so a
// route that meanwhile moved to another interface is not touched; "no such
// route" counts as success.
func (rt *RouteTable) applyDeletes(w *ifaceWork) {
	if !w.usable {
		return
	}
	for i := range w.dels {
		k := &w.dels[i]
		rt.tick()
		dst, _ := rt.routeDst(k)
		ourKey := k.Tos == 0 && k.Priority == rt.priority
		if _, ok := rt.replaced[dst]; ok && ourKey {
			// Our replace on another interface took this key over already.
			delete(rt.programmed[w.name], dst)
			continue
		}
		del := netlink.Route{
			Dst:      k.Dst,
			Family:   rt.family,
			Table:    rt.table,
			Tos:      k.Tos,
			Priority: k.Priority,
			Type:     k.Type,
			Protocol: k.Protocol,
			Scope:    k.Scope,
			Gw:       k.Gw,
		}
		if !IsNoInterfaceType(k.Type) {
			del.LinkIndex = k.LinkIndex
		}
		if del.Dst == nil {
			del.Dst = prefixToIPNet(dst)
		}
		rt.writes++
		err := rt.nl.RouteDel(&del)
		if err != nil && !isGoneErr(err) {
			w.errs = append(w.errs, fmt.Errorf("routes: delete %s dev %s: %w", dst, w.name, err))
			rt.log.Warn("route delete failed", "iface", w.name, "cidr", dst, "err", err)
			continue
		}
		if ourKey {
			delete(rt.programmed[w.name], dst)
		}
		rt.log.Debug("route removed", "iface", w.name, "cidr", dst, "proto", int(k.Protocol))
		// A host route nobody wants any more: clean its conntrack flows
		// (cleanupOrphans). One that another interface wants keeps its
		// hostRoutes entry, so that the move is noticed when that
		// interface gets it.
		if isHost(dst) && rt.hostRoutes[dst] == w.name && rt.winner(dst) == "" {
			rt.orphans[dst] = struct{}{}
		}
	}
}

// isGoneErr reports errors meaning the route, or its device, is not there
// (nlutil.NotFound, ErrLinkNotFound), or ENETDOWN: the device is down and the
// kernel already flushed its routes.
func isGoneErr(err error) bool {
	return nlutil.NotFound(err) || errors.Is(err, unix.ENETDOWN) || errors.Is(err, ErrLinkNotFound)
}

// cleanupOrphans starts conntrack cleanup for host CIDRs nobody claims any
// more, once their kernel route is gone (deleted by us, or gone with its
// interface). An orphan whose interface is still dirty (its delete failed or
// waits for the grace period) is kept for a later Apply.
func (rt *RouteTable) cleanupOrphans() {
	var ips []netip.Addr
	for cidr := range rt.orphans {
		if rt.winner(cidr) != "" {
			delete(rt.orphans, cidr)
			continue
		}
		iface, ok := rt.hostRoutes[cidr]
		if !ok {
			delete(rt.orphans, cidr)
			continue
		}
		if _, dirty := rt.dirty[iface]; dirty {
			continue
		}
		if _, held := rt.held[iface]; held {
			continue // its route stays, and with it the flows
		}
		delete(rt.orphans, cidr)
		delete(rt.hostRoutes, cidr)
		ips = append(ips, cidr.Addr())
	}
	if len(ips) == 0 || rt.cleaner == nil {
		return
	}
	rt.log.Debug("routes removed, cleaning conntrack", "ips", ips)
	done := rt.cleaner.start(ips)
	for _, ip := range ips {
		rt.pendingCT[ip] = done
	}
}

// neighKey identifies a neighbour entry: the kernel keys them by device and IP.
type neighKey struct {
	link int
	ip   netip.Addr
}

// readNeighbours dumps the IPv4 neighbour table when any desired or
// programmed static ARP entry exists, so a full resync can re-assert them
// without writing the ones that are already right.
func (rt *RouteTable) readNeighbours(work []*ifaceWork) (map[neighKey]netlink.Neigh, error) {
	if rt.family != netlink.FAMILY_V4 {
		return nil, nil
	}
	need := false
	for _, m := range rt.arp {
		if len(m) > 0 {
			need = true
		}
	}
	for _, w := range work {
		for _, t := range rt.desired[w.name] {
			if t.DestMAC != nil {
				need = true
			}
		}
	}
	if !need {
		return nil, nil
	}
	neighs, err := rt.nl.NeighList(netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("routes: full resync: %w", err)
	}
	out := make(map[neighKey]netlink.Neigh, len(neighs))
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		out[neighKey{n.LinkIndex, ip.Unmap()}] = n
	}
	return out, nil
}

// applyNeighbours programs the permanent ARP entries of w's targets that
// carry a DestMAC and deletes the ones no longer wanted. On a full resync the
// kernel's table (kernel) is the reference, so a changed or deleted entry is
// repaired without rewriting the good ones.
func (rt *RouteTable) applyNeighbours(w *ifaceWork, full bool, kernel map[neighKey]netlink.Neigh) {
	if rt.family != netlink.FAMILY_V4 || w.name == InterfaceNone {
		return
	}
	have := rt.arp[w.name]
	if !w.usable {
		// The kernel flushes a device's neighbours with the device.
		delete(rt.arp, w.name)
		return
	}
	var want map[netip.Addr]net.HardwareAddr
	for cidr, t := range w.want {
		if t.DestMAC != nil {
			if want == nil {
				want = map[netip.Addr]net.HardwareAddr{}
			}
			want[cidr.Addr()] = t.DestMAC
		}
	}
	if len(want) == 0 && len(have) == 0 {
		return
	}
	next := make(map[netip.Addr]string, len(want))
	for ip, mac := range want {
		// From memory, trust what we wrote; a read (an event or a failure
		// made the interface suspect) re-asserts every entry; a full
		// resync compares with the kernel's table.
		ok := w.fromMemory && have[ip] == mac.String()
		if full {
			n, found := kernel[neighKey{w.link.Index, ip}]
			ok = found && n.State&netlink.NUD_PERMANENT != 0 && n.HardwareAddr.String() == mac.String()
		}
		if !ok {
			rt.writes++
			err := rt.nl.NeighSet(&netlink.Neigh{
				LinkIndex:    w.link.Index,
				Family:       netlink.FAMILY_V4,
				State:        netlink.NUD_PERMANENT,
				Type:         unix.RTN_UNICAST,
				IP:           addrToIP(ip),
				HardwareAddr: mac,
			})
			if err != nil {
				w.errs = append(w.errs, fmt.Errorf("routes: static ARP %s lladdr %s dev %s: %w", ip, mac, w.name, err))
				continue
			}
			rt.log.Debug("static ARP entry programmed", "iface", w.name, "ip", ip, "mac", mac)
		}
		next[ip] = mac.String()
	}
	_, held := rt.held[w.name]
	for ip := range have {
		if _, ok := want[ip]; ok {
			continue
		}
		if held {
			next[ip] = have[ip]
			continue
		}
		rt.writes++
		err := rt.nl.NeighDel(&netlink.Neigh{LinkIndex: w.link.Index, Family: netlink.FAMILY_V4, IP: addrToIP(ip)})
		if err != nil && !isGoneErr(err) {
			w.errs = append(w.errs, fmt.Errorf("routes: delete static ARP %s dev %s: %w", ip, w.name, err))
			next[ip] = have[ip]
		}
	}
	if len(next) == 0 {
		delete(rt.arp, w.name)
	} else {
		rt.arp[w.name] = next
	}
}
