package netguard

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestReadHostKernel reads a namespace with an uplink (address, default
// route), a static on-link route and a routelet veth: the uplink is found,
// and the veth's address and routelet-protocol routes are not the node's.
func TestReadHostKernel(t *testing.T) {
	n := netnstest.NewT(t)
	h := n.Handle
	for _, l := range []netlink.Link{
		&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "up0"}},
		&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cali0"}, PeerName: "peer0"},
	} {
		if err := h.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	up0, _ := h.LinkByName("up0")
	cali0, _ := h.LinkByName("cali0")
	for l, a := range map[netlink.Link]string{up0: "192.0.2.10/24", cali0: "10.244.0.1/32"} {
		addr, _ := netlink.ParseAddr(a)
		if err := h.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
	}
	_, static, _ := net.ParseCIDR("172.31.0.0/16")
	_, pod, _ := net.ParseCIDR("10.244.0.5/32")
	for _, r := range []*netlink.Route{
		{LinkIndex: up0.Attrs().Index, Gw: net.ParseIP("192.0.2.1")},
		{LinkIndex: up0.Attrs().Index, Dst: static, Scope: netlink.SCOPE_LINK, Protocol: 4},
		{LinkIndex: cali0.Attrs().Index, Dst: pod, Scope: netlink.SCOPE_LINK, Protocol: 80},
	} {
		if err := h.RouteAdd(r); err != nil {
			t.Fatalf("add %v: %v", r, err)
		}
	}
	host, err := ReadHost(h, 80, func(l Link) bool { return Owned(l, "cali") })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(host.Uplinks, []string{"up0"}) {
		t.Errorf("uplinks %v, want [up0]", host.Uplinks)
	}
	if !slices.Contains(host.Addrs, netip.MustParsePrefix("192.0.2.10/24")) || slices.Contains(host.Addrs, netip.MustParsePrefix("10.244.0.1/32")) {
		t.Errorf("addrs %v: want the uplink's, not the veth's", host.Addrs)
	}
	if !slices.Contains(host.Connected, netip.MustParsePrefix("172.31.0.0/16")) || slices.Contains(host.Connected, netip.MustParsePrefix("10.244.0.5/32")) {
		t.Errorf("connected %v: want the static route, not the pod route", host.Connected)
	}
	if err := host.CheckInterfacePrefix("up"); err == nil {
		t.Error(`prefix "up" accepted although up0 is the uplink`)
	}
}
