package cleanup

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// routeSpec is one route the test programs: its destination, gateway
// ("" none: a blackhole) and protocol.
type routeSpec struct {
	dst, gw string
	proto   int
}

// TestCleanupRemovesBGPRoutes: in a namespace with an uplink holding
// routelet's routes (proto 80), the learned BGP routes (proto 186 via a
// gateway, both families) and others' (BIRD's proto 12, a static route, a
// proto-186 blackhole no BGP manager writes): cleanup without a BGP route
// protocol (bgp off) removes only routelet's; with 186 (bgp on) it removes
// the learned routes too; nobody else's route is ever removed.
func TestCleanupRemovesBGPRoutes(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates a network namespace, links and routes")
	const bgpProto = 186
	ours := []routeSpec{{"10.244.1.0/24", "", 80}, {"10.100.1.0/24", "10.0.1.20", 80}}
	learned := []routeSpec{{"10.100.2.0/24", "10.0.1.1", bgpProto}, {"10.100.3.0/24", "10.0.1.21", bgpProto}, {"fd00:245:2::/120", "fd00:1::1", bgpProto}}
	others := []routeSpec{{"10.200.0.0/24", "10.0.1.1", 12}, {"10.201.0.0/24", "10.0.1.1", unix.RTPROT_STATIC}, {"10.202.0.0/24", "", bgpProto}}

	for _, tc := range []struct {
		name    string
		proto   int
		removed []routeSpec
	}{
		{"bgp-off", 0, ours},
		{"bgp-on", bgpProto, append(slices.Clone(ours), learned...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := netnstest.NewT(t)
			l, err := netnstest.AddVeth(n.Handle, "up0", "up0-peer")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range []string{"10.0.1.10/24", "fd00:1::10/64"} {
				addr, _ := netlink.ParseAddr(a)
				addr.Flags = unix.IFA_F_NODAD
				if err := n.Handle.AddrAdd(l, addr); err != nil {
					t.Fatal(err)
				}
			}
			all := slices.Concat(ours, learned, others)
			for _, r := range all {
				if err := n.Handle.RouteAdd(kernelRoute(r, l.Attrs().Index)); err != nil {
					t.Fatalf("add %+v: %v", r, err)
				}
			}

			var rep Report
			opts := Options{RouteProtocol: 80, BGPRouteProtocol: tc.proto}
			if err := n.NetNS.Do(func(ns.NetNS) error { return removeOwnedRoutes(opts, &rep, quiet) }); err != nil {
				t.Fatalf("removeOwnedRoutes: %v", err)
			}

			var want []string
			for _, r := range tc.removed {
				want = append(want, r.dst)
			}
			slices.Sort(want)
			got := slices.Clone(rep.Routes)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("removed %q, want %q", got, want)
			}
			for _, r := range all {
				present := hasRoute(t, n.Handle, r)
				if gone := slices.Contains(tc.removed, r); present == gone {
					t.Errorf("route %s proto %d: present %v, want %v", r.dst, r.proto, present, !gone)
				}
			}
		})
	}
}

// kernelRoute is r in the main table: via its gateway on the link, or a
// blackhole.
func kernelRoute(r routeSpec, link int) *netlink.Route {
	_, dst, _ := net.ParseCIDR(r.dst)
	k := &netlink.Route{Dst: dst, Table: unix.RT_TABLE_MAIN, Protocol: netlink.RouteProtocol(r.proto)}
	if r.gw == "" {
		k.Type = unix.RTN_BLACKHOLE
		return k
	}
	k.LinkIndex, k.Gw = link, net.IP(netip.MustParseAddr(r.gw).AsSlice())
	return k
}

// hasRoute reports whether the namespace's main table holds r's
// destination with r's protocol.
func hasRoute(t *testing.T, h *netlink.Handle, r routeSpec) bool {
	t.Helper()
	p := netip.MustParsePrefix(r.dst)
	fam := netlink.FAMILY_V4
	if p.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	rs, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: netlink.RouteProtocol(r.proto)},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(rs, func(k netlink.Route) bool { return k.Dst != nil && k.Dst.String() == r.dst })
}
