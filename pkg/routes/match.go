package routes

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Spec is what, beside a Target, decides the kernel route a RouteTable
// writes for it: the table's IP version, kernel table and route protocol,
// with Config's defaults. Route builds that route and Mismatch judges a
// kernel route against it; the RouteTable uses both, and so do the readers
// that report on its routes (routeletd status and diagnose, the CNI
// plugin's ADD and CHECK), so that what they call right is what the
// RouteTable leaves alone.
type Spec struct {
	IPVersion int // 4 or 6
	Table     int // kernel table index; 0 means main (254)
	Protocol  int // 0 means DefaultProtocol
}

// family is s's netlink address family.
func (s Spec) family() int {
	if s.IPVersion == 6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// table is s's kernel table, main for 0.
func (s Spec) table() int {
	if s.Table == 0 {
		return unix.RT_TABLE_MAIN
	}
	return s.Table
}

// protocol is s's route protocol, DefaultProtocol for 0.
func (s Spec) protocol() netlink.RouteProtocol {
	if s.Protocol == 0 {
		return DefaultProtocol
	}
	return netlink.RouteProtocol(s.Protocol)
}

// metric is the metric s's routes carry: the kernel's default for IPv6
// (v6DefaultMetric), set explicitly so that what is written and what a
// dump returns compare equal, and none for IPv4.
func (s Spec) metric() int {
	if s.IPVersion == 6 {
		return v6DefaultMetric
	}
	return 0
}

// linkScope is the scope of a TypeLink route: link for IPv4; IPv6 has no
// route scopes and the kernel reports universe.
func (s Spec) linkScope() netlink.Scope {
	if s.IPVersion == 6 {
		return netlink.SCOPE_UNIVERSE
	}
	return netlink.SCOPE_LINK
}

// Route returns the kernel route written for t through the link with
// index link (not used for the no-interface types): t's destination, type,
// gateway, onlink flag, source and MTU in s's table, with s's protocol and
// metric, scope link for an IPv4 TypeLink route and universe otherwise.
// t.DestMAC is a neighbour entry, not part of the route.
func (s Spec) Route(t Target, link int) netlink.Route {
	r := netlink.Route{
		Dst:      prefixToIPNet(t.CIDR),
		Family:   s.family(),
		Table:    s.table(),
		Protocol: s.protocol(),
		Priority: s.metric(),
		Type:     t.Type.kernelType(),
		Scope:    netlink.SCOPE_UNIVERSE,
		Src:      addrToIP(t.Src),
		MTU:      t.MTU,
	}
	switch t.Type {
	case TypeLink:
		r.LinkIndex = link
		r.Scope = s.linkScope()
	case TypeGateway:
		r.LinkIndex = link
		r.Gw = addrToIP(t.Gateway)
		if t.OnLink {
			r.Flags = int(netlink.FLAG_ONLINK)
		}
	}
	return r
}

// Mismatch reports how kernel route k differs from the route Route writes
// for t: "" when k satisfies t — the RouteTable then leaves k as it is —
// and otherwise the first attribute that differs, as `ip route` shows
// what k has there ("proto 3", "scope global", "no onlink", "via none",
// "src 10.0.0.1", "mtu 1400"). It compares every attribute Route sets
// beyond the key: the type, protocol, MTU, scope (IPv4 only: IPv6 routes
// have none), the onlink flag (other flags, such as the "linkdown" the
// kernel adds, do not count), gateway and source.
//
// The key is not compared: k is the route the kernel holds under t's key
// (destination, table, TOS 0 and s's metric), through the interface t is
// for. The RouteTable files kernel routes by device and key before it
// asks; a reader that keys routes by destination and device alone takes
// them as its view of the same thing.
func (s Spec) Mismatch(k *netlink.Route, t Target) string {
	scope, onlink := netlink.SCOPE_UNIVERSE, false
	switch t.Type {
	case TypeLink:
		scope = s.linkScope()
	case TypeGateway:
		onlink = t.OnLink
	}
	switch {
	case k.Type != t.Type.kernelType():
		return "type " + RTMTypeName(k.Type)
	case k.Protocol != s.protocol():
		return fmt.Sprintf("proto %d", int(k.Protocol))
	case s.IPVersion != 6 && k.Scope != scope:
		return "scope " + scopeName(k.Scope)
	case (k.Flags&int(netlink.FLAG_ONLINK) != 0) != onlink:
		if onlink {
			return "no onlink"
		}
		return "onlink"
	case !ipMatches(k.Gw, t.Gateway):
		return "via " + ipOrNone(k.Gw)
	case !ipMatches(k.Src, t.Src):
		return "src " + ipOrNone(k.Src)
	case k.MTU != t.MTU:
		return fmt.Sprintf("mtu %d", k.MTU)
	}
	return ""
}

// ipMatches compares an address from the kernel with one from a target; nil
// and the invalid netip.Addr both mean "none".
func ipMatches(k net.IP, a netip.Addr) bool {
	if len(k) == 0 || !a.IsValid() {
		return len(k) == 0 && !a.IsValid()
	}
	b, ok := netip.AddrFromSlice(k)
	return ok && b.Unmap() == a.Unmap()
}

// scopeName names a route scope as iproute2 does ("global" for universe).
func scopeName(s netlink.Scope) string {
	switch s {
	case netlink.SCOPE_UNIVERSE:
		return "global"
	case netlink.SCOPE_SITE:
		return "site"
	case netlink.SCOPE_LINK:
		return "link"
	case netlink.SCOPE_HOST:
		return "host"
	case netlink.SCOPE_NOWHERE:
		return "nowhere"
	}
	return fmt.Sprint(int(s))
}

// ipOrNone is ip as text, "none" for nil.
func ipOrNone(ip net.IP) string {
	if len(ip) == 0 {
		return "none"
	}
	return ip.String()
}
