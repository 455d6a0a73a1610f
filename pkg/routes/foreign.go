package routes

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrForeignRoute is wrapped by the errors Apply returns for desired routes
// that were not written because a route routelet does not own holds their
// kernel key.
var ErrForeignRoute = errors.New("kernel key held by a route routelet does not own")

// conflict is a desired route kept out of the kernel by another owner's
// route, as last reported.
type conflict struct {
	iface string // the interface that wants the CIDR
	// The other route: what tells one holder from the next.
	proto      netlink.RouteProtocol
	typ, link  int
	gw         string
	descriptor string // as "ip route" would show it
}

// ownsKernelRoute applies the ownership rules (see RouteTable) to kernel
// route r, found on an interface of kind.
func (rt *RouteTable) ownsKernelRoute(kind ifaceKind, r *netlink.Route) bool {
	if len(r.MultiPath) > 0 {
		return false
	}
	switch kind {
	case kindWorkload:
		return true
	case kindShared, kindNoIface:
		return r.Protocol == rt.protocol
	}
	return false
}

// kindOfRoute returns the ownership kind of the interface kernel route r
// goes through; names maps the indexes of the managed links.
func (rt *RouteTable) kindOfRoute(r *netlink.Route, names map[int]string) ifaceKind {
	if IsNoInterfaceType(r.Type) {
		return rt.kindOf(InterfaceNone)
	}
	if r.Type != unix.RTN_UNICAST {
		return kindUnmanaged
	}
	name, ok := names[r.LinkIndex]
	if !ok {
		return kindUnmanaged
	}
	return rt.kindOf(name)
}

// linkNames maps the index of every managed link last seen to its name.
func (rt *RouteTable) linkNames() map[int]string {
	out := make(map[int]string, len(rt.links))
	for name, l := range rt.links {
		out[l.Index] = name
	}
	return out
}

// conflictFound records that t, desired on w's interface, is not written
// because holder, a route we do not own, has its key. The interface fails
// for this Apply (it stays dirty and is re-read next time, so the route is
// programmed once holder is gone); a new or changed conflict is logged,
// counted and handed to Config.OnConflict.
func (rt *RouteTable) conflictFound(w *ifaceWork, t Target, holder *netlink.Route) {
	rt.synced[w.name]--
	c := conflict{iface: w.name, proto: holder.Protocol, typ: holder.Type, link: holder.LinkIndex, gw: holder.Gw.String()}
	old, ok := rt.conflicts[t.CIDR]
	c.descriptor = old.descriptor
	if !ok || old != c {
		c.descriptor = rt.describe(holder)
		rt.conflicts[t.CIDR] = c
		rt.conflictsTotal++
		rt.log.Warn("route not programmed: a route routelet does not own holds its key",
			"cidr", t.CIDR, "type", t.Type, "iface", w.name, "holder", c.descriptor, "holderProtocol", holder.Protocol.String())
		if rt.cfg.OnConflict != nil {
			rt.cfg.OnConflict(t.CIDR, w.name, int(holder.Protocol))
		}
	}
	w.errs = append(w.errs, fmt.Errorf("routes: %s %s dev %s not programmed, the kernel has %q: %w",
		t.Type, t.CIDR, w.name, c.descriptor, ErrForeignRoute))
}

// describe renders a kernel route roughly as "ip route" shows it. It may
// list the links (once per new conflict) to name the route's device.
func (rt *RouteTable) describe(r *netlink.Route) string {
	var b strings.Builder
	if IsNoInterfaceType(r.Type) {
		b.WriteString(typeOfKernel(r.Type).String() + " ")
	}
	if dst, ok := rt.routeDst(r); ok {
		b.WriteString(dst.String())
	}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok {
		fmt.Fprintf(&b, " via %s", gw.Unmap())
	}
	if len(r.MultiPath) > 0 {
		b.WriteString(" multipath")
	} else if !IsNoInterfaceType(r.Type) {
		name := rt.linkNames()[r.LinkIndex]
		if name == "" {
			if links, err := rt.nl.LinkList(); err == nil {
				for _, l := range links {
					if l.Index == r.LinkIndex {
						name = l.Name
					}
				}
			}
		}
		if name == "" {
			name = fmt.Sprintf("#%d", r.LinkIndex)
		}
		fmt.Fprintf(&b, " dev %s", name)
	}
	fmt.Fprintf(&b, " proto %s", r.Protocol)
	if r.Priority != 0 {
		fmt.Fprintf(&b, " metric %d", r.Priority)
	}
	return b.String()
}

// typeOfKernel maps a no-interface rtm_type back to its target type.
func typeOfKernel(t int) TargetType {
	switch t {
	case unix.RTN_UNREACHABLE:
		return TypeUnreachable
	case unix.RTN_PROHIBIT:
		return TypeProhibit
	case unix.RTN_THROW:
		return TypeThrow
	}
	return TypeBlackhole
}
