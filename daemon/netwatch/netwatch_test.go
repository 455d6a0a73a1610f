package netwatch

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
)

func TestRouteEvent(t *testing.T) {
	names := &ifNames{byIndex: map[int]string{1: "lo", 7: "cali1"}}
	_, dst, _ := net.ParseCIDR("10.244.1.2/32")
	_, dst6, _ := net.ParseCIDR("fd00::2/128")
	for _, tc := range []struct {
		name string
		u    netlink.RouteUpdate
		want RouteEvent
		ok   bool
	}{
		{"pod route added", netlink.RouteUpdate{Type: unix.RTM_NEWROUTE, Route: netlink.Route{LinkIndex: 7, Dst: dst, Protocol: 80, Table: 254, Family: netlink.FAMILY_V4}},
			RouteEvent{Iface: "cali1", Dst: netip.MustParsePrefix("10.244.1.2/32"), Protocol: 80, Table: 254}, true},
		{"v6 route deleted", netlink.RouteUpdate{Type: unix.RTM_DELROUTE, Route: netlink.Route{LinkIndex: 7, Dst: dst6, Protocol: 4, Table: 254, Family: netlink.FAMILY_V6}},
			RouteEvent{IPv6: true, Iface: "cali1", Dst: netip.MustParsePrefix("fd00::2/128"), Protocol: 4, Table: 254, Deleted: true}, true},
		{"blackhole", netlink.RouteUpdate{Type: unix.RTM_DELROUTE, Route: netlink.Route{Dst: dst, Protocol: 80, Table: 254, Type: unix.RTN_BLACKHOLE}},
			RouteEvent{Iface: routes.InterfaceNone, Dst: netip.MustParsePrefix("10.244.1.2/32"), Protocol: 80, Table: 254, Deleted: true}, true},
		// The kernel reports IPv6 reject routes with the loopback device as
		// their output interface; they are still no-interface routes.
		{"v6 blackhole via lo", netlink.RouteUpdate{Type: unix.RTM_DELROUTE, Route: netlink.Route{LinkIndex: 1, Dst: dst6, Protocol: 80, Table: 254, Type: unix.RTN_BLACKHOLE, Family: netlink.FAMILY_V6}},
			RouteEvent{IPv6: true, Iface: routes.InterfaceNone, Dst: netip.MustParsePrefix("fd00::2/128"), Protocol: 80, Table: 254, Deleted: true}, true},
		{"default route", netlink.RouteUpdate{Type: unix.RTM_NEWROUTE, Route: netlink.Route{LinkIndex: 7, Table: 254}}, RouteEvent{}, false},
	} {
		got, ok := routeEvent(tc.u, names)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: routeEvent = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLinkUp(t *testing.T) {
	for _, tc := range []struct {
		flags net.Flags
		oper  netlink.LinkOperState
		want  bool
	}{
		{net.FlagUp, netlink.OperUp, true},
		{net.FlagUp, netlink.OperUnknown, true},
		{net.FlagUp, netlink.OperLowerLayerDown, false},
		{0, netlink.OperUp, false},
	} {
		l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Flags: tc.flags, OperState: tc.oper}}
		if got := linkUp(l); got != tc.want {
			t.Errorf("linkUp(flags %v, oper %v) = %v, want %v", tc.flags, tc.oper, got, tc.want)
		}
	}
}
