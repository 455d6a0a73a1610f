package bgpmgr

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/routes"
)

// NetlinkResolve is the default Resolver: the kernel's route to addr
// (a route get, as `ip route get` asks), in the calling thread's network
// namespace. An unreachable or blackholed address is an error.
func NetlinkResolve(addr netip.Addr) (netip.Addr, string, error) {
	rs, err := netlink.RouteGet(addr.AsSlice())
	if err != nil {
		return netip.Addr{}, "", err
	}
	if len(rs) == 0 {
		return netip.Addr{}, "", fmt.Errorf("no route to %s", addr)
	}
	r := rs[0]
	if r.Type != unix.RTN_UNICAST && r.Type != 0 {
		return netip.Addr{}, "", fmt.Errorf("the route to %s is of type %s", addr, routes.RTMTypeName(r.Type))
	}
	var gw netip.Addr
	if g, ok := netip.AddrFromSlice(r.Gw); ok {
		gw = g.Unmap()
	}
	l, err := netlink.LinkByIndex(r.LinkIndex)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("the route to %s: interface %d: %w", addr, r.LinkIndex, err)
	}
	return gw, l.Attrs().Name, nil
}

// NetlinkRoutes is the default KernelRoutes: the main table's routes of
// family v carrying protocol through iface, in the calling thread's
// network namespace. A route whose interface is gone (no iface) is no
// error: there is nothing to keep.
func NetlinkRoutes(v, protocol int, iface string) ([]routes.Target, error) {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		if nlutil.LinkNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("uplink %s: %w", iface, err)
	}
	h := &netlink.Handle{}
	rs, err := nlutil.MainRoutes(h, v)
	if err != nil {
		return nil, err
	}
	var out []routes.Target
	for _, r := range rs {
		if int(r.Protocol) != protocol || r.LinkIndex != l.Attrs().Index {
			continue
		}
		dst, ok := nlutil.Prefix(r.Dst)
		gw, gok := netip.AddrFromSlice(r.Gw)
		if !ok || !gok {
			continue // not a route this manager writes
		}
		out = append(out, routes.Target{CIDR: dst.Masked(), Type: routes.TypeGateway, Gateway: gw.Unmap(),
			OnLink: r.Flags&int(netlink.FLAG_ONLINK) != 0})
	}
	return out, nil
}
