package nodespace

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// ReadHost snapshots the current network namespace through h (nil: a new
// handle in the calling thread's namespace). Links for which owned returns
// true (routelet's pod veths and overlay devices; nil: none) contribute no
// addresses and no connected routes, and neither do routes of protocol
// ownProto: what routelet itself put there is not the node's own space.
// A snapshot interrupted by concurrent changes is taken again. With a nil h
// it is ReadHostAt of the calling thread's namespace.
func ReadHost(h *netlink.Handle, ownProto int, owned func(Link) bool) (Host, error) {
	if h == nil {
		return ReadHostAt(netns.None(), ownProto, owned)
	}
	return nlutil.Retry(func() (Host, error) { return readHost(h, ownProto, owned) })
}

// readHost is one attempt of ReadHost.
func readHost(h *netlink.Handle, ownProto int, owned func(Link) bool) (Host, error) {
	links, err := h.LinkList()
	if err != nil {
		return Host{}, fmt.Errorf("nodespace: list links: %w", err)
	}
	var out Host
	skip := map[int]bool{}
	for _, l := range links {
		a := l.Attrs()
		link := Link{Name: a.Name, Index: a.Index, Type: l.Type()}
		out.Links = append(out.Links, link)
		if owned != nil && owned(link) {
			skip[a.Index] = true
		}
	}
	addrs, err := h.AddrList(nil, unix.AF_UNSPEC)
	if err != nil {
		return Host{}, fmt.Errorf("nodespace: list addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := nlutil.Prefix(a.IPNet); ok && !skip[a.LinkIndex] {
			out.Addrs = append(out.Addrs, p)
		}
	}
	routes, err := h.RouteListFiltered(unix.AF_UNSPEC, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return Host{}, fmt.Errorf("nodespace: list routes: %w", err)
	}
	seen := map[string]bool{}
	for _, r := range routes {
		if isDefault(r) {
			if r.Type != unix.RTN_UNICAST {
				continue // a blackhole default names no uplink
			}
			for _, l := range links {
				if uses(r, l.Attrs().Index) && !seen[l.Attrs().Name] {
					seen[l.Attrs().Name] = true
					out.Uplinks = append(out.Uplinks, l.Attrs().Name)
				}
			}
			continue
		}
		if int(r.Protocol) == ownProto || skip[r.LinkIndex] || r.Scope != netlink.SCOPE_LINK || r.Type != unix.RTN_UNICAST {
			continue
		}
		p, ok := nlutil.Prefix(r.Dst)
		if !ok {
			continue
		}
		if p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			continue // every IPv6 link has fe80::/64
		}
		out.Connected = append(out.Connected, p)
	}
	return out, nil
}

// isDefault reports whether r is a default route: the netlink library
// reports one with a nil Dst or, in newer versions, with a /0 Dst.
func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// uses reports whether r leaves through the link with index idx, directly
// or as one of its multipath next hops.
func uses(r netlink.Route, idx int) bool {
	if r.LinkIndex == idx {
		return true
	}
	for _, nh := range r.MultiPath {
		if nh != nil && nh.LinkIndex == idx {
			return true
		}
	}
	return false
}
