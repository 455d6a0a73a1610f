package nodeid

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/overlay"
)

// Netlink is the part of netlink nodeid reads; *netlink.Handle implements it.
type Netlink interface {
	LinkList() ([]netlink.Link, error)
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	RouteListFiltered(family int, filter *netlink.Route, filterMask uint64) ([]netlink.Route, error)
}

var _ Netlink = (*netlink.Handle)(nil)

// Identity is what Detect found.
type Identity struct {
	IPv4  netip.Addr // zero when the node has none
	IPv6  netip.Addr // zero when the node has none
	Iface string     // interface holding the primary address
	MTU   int        // that interface's MTU
}

// Detect resolves spec (the node-ip setting: "", an IP, "cidr:X" or
// "interface:REGEX"; see config.NodeIPMode) against the links, addresses and
// routes nl shows.
//
//   - "": the global address of the interface holding the IPv4 default route
//     (and, separately, the IPv6 default route when there is one).
//   - an IP: used as given; the interface holding it supplies the MTU when
//     present (a NATed address may live elsewhere).
//   - cidr:X: the first global unicast address inside X, interfaces in
//     index order.
//   - interface:R: the first interface (index order) whose name matches R;
//     its first global IPv4 and IPv6 addresses.
//
// cidr: and interface: never select the loopback device or a link for which
// own returns true (routelet's pod veths and overlay devices, whose
// addresses are pod and tunnel addresses; nil: none): when nothing else
// matches, the error names what was skipped.
func Detect(nl Netlink, spec string, own func(netlink.Link) bool) (Identity, error) {
	mode, arg := config.NodeIPMode(spec)
	links, err := nl.LinkList()
	if err != nil {
		return Identity{}, fmt.Errorf("list links: %w", err)
	}
	sort.Slice(links, func(i, j int) bool { return links[i].Attrs().Index < links[j].Attrs().Index })
	never := func(l netlink.Link) bool {
		return l.Attrs().Flags&net.FlagLoopback != 0 || (own != nil && own(l))
	}
	var skipped []string // "addr on link" or link names passed over, for the error
	var id Identity
	switch mode {
	case "auto":
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			l, err := defaultRouteLink(nl, links, fam)
			if err != nil {
				return Identity{}, err
			}
			if l == nil {
				continue
			}
			a, err := firstGlobal(nl, l, fam)
			if err != nil {
				return Identity{}, err
			}
			if !a.IsValid() {
				continue
			}
			id.set(a, l)
		}
		if !id.IPv4.IsValid() && !id.IPv6.IsValid() {
			return Identity{}, errors.New("autodetect node IP: no interface holding a default route has a global address (set node-ip)")
		}
	case "ip":
		a, err := netip.ParseAddr(arg)
		if err != nil {
			return Identity{}, fmt.Errorf("node-ip %q: %w", arg, err)
		}
		id.set(a, nil)
		for _, l := range links {
			as, err := addrs(nl, l, family(a))
			if err != nil {
				return Identity{}, err
			}
			for _, p := range as {
				if p.Addr() == a {
					id.set(a, l)
				}
			}
		}
	case "cidr":
		want, err := netip.ParsePrefix(arg)
		if err != nil {
			return Identity{}, fmt.Errorf("node-ip cidr %q: %w", arg, err)
		}
	found:
		for _, l := range links {
			as, err := addrs(nl, l, family(want.Addr()))
			if err != nil {
				return Identity{}, err
			}
			for _, p := range as {
				if !want.Contains(p.Addr()) {
					continue
				}
				if never(l) || !p.Addr().IsGlobalUnicast() {
					skipped = append(skipped, p.Addr().String()+" on "+l.Attrs().Name)
					continue
				}
				id.set(p.Addr(), l)
				break found
			}
		}
		if !id.IPv4.IsValid() && !id.IPv6.IsValid() {
			return Identity{}, fmt.Errorf("node-ip cidr:%s: no local address inside it%s", arg, skipNote(skipped))
		}
	case "interface":
		re, err := regexp.Compile(arg)
		if err != nil {
			return Identity{}, fmt.Errorf("node-ip interface regexp %q: %w", arg, err)
		}
		for _, l := range links {
			if !re.MatchString(l.Attrs().Name) {
				continue
			}
			if never(l) {
				skipped = append(skipped, l.Attrs().Name)
				continue
			}
			for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
				a, err := firstGlobal(nl, l, fam)
				if err != nil {
					return Identity{}, err
				}
				if a.IsValid() {
					id.set(a, l)
				}
			}
			if id.IPv4.IsValid() || id.IPv6.IsValid() {
				break
			}
		}
		if !id.IPv4.IsValid() && !id.IPv6.IsValid() {
			return Identity{}, fmt.Errorf("node-ip interface:%s: no matching interface with a global address%s", arg, skipNote(skipped))
		}
	default:
		return Identity{}, fmt.Errorf("node-ip %q: unknown form", spec)
	}
	return id, nil
}

// skipNote explains, for an error, which matches Detect passed over.
func skipNote(skipped []string) string {
	if len(skipped) == 0 {
		return ""
	}
	return fmt.Sprintf(" (loopback, link-local and routelet's own devices are never the node IP; skipped %s)", strings.Join(skipped, ", "))
}

// set records a as the family's address; the first address recorded with a
// link names the interface and MTU.
func (id *Identity) set(a netip.Addr, l netlink.Link) {
	if a.Is4() {
		id.IPv4 = a
	} else {
		id.IPv6 = a
	}
	if l != nil && id.Iface == "" {
		id.Iface = l.Attrs().Name
		id.MTU = l.Attrs().MTU
	}
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// defaultRouteLink returns the link of the main table's default route of fam
// (the lowest metric one), or nil when there is none.
func defaultRouteLink(nl Netlink, links []netlink.Link, fam int) (netlink.Link, error) {
	rs, err := nl.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	best := -1
	for i, r := range rs {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		idx := r.LinkIndex
		if idx == 0 && len(r.MultiPath) > 0 {
			idx = r.MultiPath[0].LinkIndex
		}
		if idx == 0 {
			continue
		}
		rs[i].LinkIndex = idx
		if best < 0 || r.Priority < rs[best].Priority {
			best = i
		}
	}
	if best < 0 {
		return nil, nil
	}
	for _, l := range links {
		if l.Attrs().Index == rs[best].LinkIndex {
			return l, nil
		}
	}
	return nil, nil
}

// addrs returns l's addresses of fam as prefixes.
func addrs(nl Netlink, l netlink.Link, fam int) ([]netip.Prefix, error) {
	as, err := nl.AddrList(l, fam)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
	}
	var out []netip.Prefix
	for _, a := range as {
		if p, ok := nlutil.Prefix(a.IPNet); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// firstGlobal returns l's first global unicast address of fam, or the zero
// Addr.
func firstGlobal(nl Netlink, l netlink.Link, fam int) (netip.Addr, error) {
	as, err := addrs(nl, l, fam)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, p := range as {
		if p.Addr().IsGlobalUnicast() {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, nil
}

// PodMTU returns configured when non-zero, else overlay.PodMTU of the
// identity's interface MTU (1500 assumed when the interface is unknown) for
// encap over the identity's underlay family; with encrypted (encryption
// wireguard) overlay.WireGuardPodMTU instead, whatever encap. It returns 0
// when that would be below the minimum MTU: the overlay (or the WireGuard
// device) refuses such an underlay and says why.
func PodMTU(configured int, id Identity, encap string, encrypted bool) int {
	if configured != 0 {
		return configured
	}
	mtu := id.MTU
	if mtu == 0 {
		mtu = 1500
	}
	underlayV6 := !id.IPv4.IsValid() && id.IPv6.IsValid()
	var pod int
	var err error
	if encrypted {
		pod, err = overlay.WireGuardPodMTU(0, mtu, underlayV6)
	} else {
		mode, perr := overlay.ParseMode(encap, false)
		if perr != nil {
			mode = overlay.ModeNone
		}
		pod, err = overlay.PodMTU(0, mtu, mode, underlayV6)
	}
	if err != nil {
		return 0
	}
	return pod
}
