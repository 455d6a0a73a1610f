package podnet

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// Route is a route read back from the kernel (RouteOf).
type Route struct {
	Dst      netip.Prefix // 0.0.0.0/0 or ::/0 for a default route
	Gw       netip.Addr   // invalid when the route has no gateway
	Protocol int
	Scope    netlink.Scope
	Type     int        // rtm_type
	OnLink   bool       // RTNH_F_ONLINK
	Src      netip.Addr // preferred source, invalid for none
	MTU      int
}

// RouteOf converts a route as netlink reports it; ok is false for a
// destination that is no prefix.
func RouteOf(r *netlink.Route) (Route, bool) {
	var dst netip.Prefix
	if r.Dst != nil {
		p, ok := nlutil.Prefix(r.Dst)
		if !ok {
			return Route{}, false
		}
		dst = p
	} else if r.Family == netlink.FAMILY_V6 {
		dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	} else {
		dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	out := Route{Dst: dst, Protocol: int(r.Protocol), Scope: r.Scope, Type: r.Type,
		OnLink: r.Flags&int(netlink.FLAG_ONLINK) != 0, MTU: r.MTU}
	if r.Gw != nil {
		out.Gw, _ = netip.AddrFromSlice(r.Gw)
		out.Gw = out.Gw.Unmap()
	}
	if r.Src != nil {
		out.Src, _ = netip.AddrFromSlice(r.Src)
		out.Src = out.Src.Unmap()
	}
	return out, true
}

// Netlink is r as netlink describes a route (without its device, which
// Route does not keep): the form routes.Spec.Mismatch judges.
func (r Route) Netlink() netlink.Route {
	k := netlink.Route{Dst: &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Protocol: netlink.RouteProtocol(r.Protocol), Scope: r.Scope, Type: r.Type, MTU: r.MTU}
	if r.Gw.IsValid() {
		k.Gw = r.Gw.AsSlice()
	}
	if r.Src.IsValid() {
		k.Src = r.Src.AsSlice()
	}
	if r.OnLink {
		k.Flags = int(netlink.FLAG_ONLINK)
	}
	return k
}

// PodView is the pod side of an attachment as the kernel reports it.
type PodView struct {
	Exists bool
	Up     bool
	MAC    string
	Addrs  []netip.Prefix
	Routes []Route // main-table routes through the interface
}

// HostView is the host side of an attachment as the kernel reports it.
type HostView struct {
	Exists bool
	Type   string // link type, "veth" for ours
	Up     bool
	MAC    string
	Routes []Route // main-table routes through the interface
}

// InspectPod reads interface ifName inside the namespace at netnsPath. A
// missing interface gives Exists=false and no error; an unusable namespace is
// an error.
func InspectPod(netnsPath, ifName string) (*PodView, error) {
	nsh, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in netns %s: %w", netnsPath, err)
	}
	defer h.Close()

	v := &PodView{}
	l, err := h.LinkByName(ifName)
	if err != nil {
		if nlutil.NotFound(err) {
			return v, nil
		}
		return nil, fmt.Errorf("look up %s in netns %s: %w", ifName, netnsPath, err)
	}
	v.Exists = true
	v.Up = l.Attrs().Flags&net.FlagUp != 0
	v.MAC = l.Attrs().HardwareAddr.String()
	addrs, err := nlutil.Retry(func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s in netns %s: %w", ifName, netnsPath, err)
	}
	for _, a := range addrs {
		if p, ok := nlutil.Prefix(a.IPNet); ok {
			v.Addrs = append(v.Addrs, p)
		}
	}
	v.Routes, err = linkRoutes(h, l)
	if err != nil {
		return nil, fmt.Errorf("list routes of %s in netns %s: %w", ifName, netnsPath, err)
	}
	return v, nil
}

// InspectHost reads the host veth hostIface in the calling thread's namespace.
// A missing link gives Exists=false and no error.
func InspectHost(hostIface string) (*HostView, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in node netns: %w", err)
	}
	defer h.Close()
	v, l, err := lookupHost(h, hostIface)
	if err != nil || !v.Exists {
		return v, err
	}
	v.Routes, err = linkRoutes(h, l)
	if err != nil {
		return nil, fmt.Errorf("list routes of host veth %s: %w", hostIface, err)
	}
	return v, nil
}

// LookupHost is InspectHost without the routes: one link request, where
// the routes (a dump of the main table filtered here) would cost more with
// every pod on the node.
func LookupHost(hostIface string) (*HostView, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in node netns: %w", err)
	}
	defer h.Close()
	v, _, err := lookupHost(h, hostIface)
	return v, err
}

// lookupHost reads the link hostIface through h.
func lookupHost(h *netlink.Handle, hostIface string) (*HostView, netlink.Link, error) {
	v := &HostView{}
	l, err := h.LinkByName(hostIface)
	if err != nil {
		if nlutil.NotFound(err) {
			return v, nil, nil
		}
		return nil, nil, fmt.Errorf("look up host veth %s: %w", hostIface, err)
	}
	v.Exists = true
	v.Type = l.Type()
	v.Up = l.Attrs().Flags&net.FlagUp != 0
	v.MAC = l.Attrs().HardwareAddr.String()
	return v, l, nil
}

// linkRoutes lists the main-table routes of both families through l.
func linkRoutes(h *netlink.Handle, l netlink.Link) ([]Route, error) {
	rs, err := nlutil.Retry(func() ([]netlink.Route, error) { return h.RouteList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, err
	}
	out := make([]Route, 0, len(rs))
	for i := range rs {
		if r, ok := RouteOf(&rs[i]); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// HasRoute reports whether routes holds dst (and gw, when gw is valid).
func HasRoute(routes []Route, dst netip.Prefix, gw netip.Addr) bool {
	for _, r := range routes {
		if r.Dst == dst && (!gw.IsValid() || r.Gw == gw) {
			return true
		}
	}
	return false
}
