package nodespace

import (
	"net"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

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

// TestReadHostOwnedLinks reads a fresh namespace with an uplink veth (address,
// connected subnet, default route), a bridge, a routelet-owned veth with an
// address and a proto-80 route: the uplink is found, the owned link and the
// own-protocol route contribute nothing.
func TestReadHostOwnedLinks(t *testing.T) {
	n := netnstest.NewT(t)
	h := n.Handle
	add := func(l netlink.Link) netlink.Link { return addUp(t, h, l) }
	up := add(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up0p"})
	add(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-x"}})
	own := add(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cali0a"}, PeerName: "cali0ap"})
	addr := func(l netlink.Link, cidr string) {
		t.Helper()
		a, err := netlink.ParseAddr(cidr)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.AddrAdd(l, a); err != nil {
			t.Fatalf("add %s: %v", cidr, err)
		}
	}
	addr(up, "192.168.77.2/24")
	addr(own, "10.55.0.1/24")
	if err := h.RouteAdd(&netlink.Route{Gw: net.ParseIP("192.168.77.1"), LinkIndex: up.Attrs().Index}); err != nil {
		t.Fatalf("default route: %v", err)
	}
	_, dst, _ := net.ParseCIDR("10.66.0.0/24")
	if err := h.RouteAdd(&netlink.Route{Dst: dst, LinkIndex: up.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: 80}); err != nil {
		t.Fatalf("proto 80 route: %v", err)
	}

	host, err := ReadHost(h, 80, func(l Link) bool { return Owned(l, "cali") })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(host.Uplinks, []string{"up0"}) {
		t.Errorf("uplinks %v, want [up0]", host.Uplinks)
	}
	for _, tc := range []struct {
		block, want string
	}{
		{"192.168.77.0/26", "192.168.77"},
		{"10.55.0.0/24", ""}, // only on a routelet-owned veth
		{"10.66.0.0/24", ""}, // only routelet's own protocol
	} {
		err := host.CheckBlock(netip.MustParsePrefix(tc.block))
		if (err != nil) != (tc.want != "") {
			t.Errorf("CheckBlock(%s) = %v, want error %v", tc.block, err, tc.want != "")
		}
	}
	if err := host.CheckInterfacePrefix("up"); err == nil {
		t.Error("prefix \"up\" accepted, but up0 carries the default route")
	}
	if err := host.CheckInterfacePrefix("br"); err == nil {
		t.Error("prefix \"br\" accepted, but br-x is a bridge")
	}
	if err := host.CheckInterfacePrefix("cali"); err != nil {
		t.Errorf("prefix cali: %v", err)
	}
}

// TestReadHostAtKernel reads one namespace both ways, the library's full
// decoding (ReadHost with a handle) and the raw reader (ReadHostAt), and
// wants the same Host: links of several kinds (veth, bridge, dummy, tun),
// IPv4 and IPv6 addresses, a multipath default route whose second hop is
// an uplink too, an IPv6 default, a blackhole default, static on-link
// routes of both families and routes of the own protocol.
func TestReadHostAtKernel(t *testing.T) {
	n := netnstest.NewT(t)
	h := n.Handle
	add := func(l netlink.Link) netlink.Link { return addUp(t, h, l) }
	up := add(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up0p"})
	up2 := add(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up1"}, PeerName: "up1p"})
	add(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-x"}})
	own := add(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cali0a"}, PeerName: "cali0ap"})
	for l, cidrs := range map[netlink.Link][]string{
		up:  {"192.168.77.2/24", "2001:db8:77::2/64"},
		up2: {"198.51.100.7/28"},
		own: {"10.55.0.1/24", "2001:db8:55::1/128"},
	} {
		for _, c := range cidrs {
			a, err := netlink.ParseAddr(c)
			if err != nil {
				t.Fatal(err)
			}
			a.Flags = unix.IFA_F_NODAD
			if err := h.AddrAdd(l, a); err != nil {
				t.Fatalf("add %s: %v", c, err)
			}
		}
	}
	cidr := func(s string) *net.IPNet { _, p, _ := net.ParseCIDR(s); return p }
	for _, r := range []*netlink.Route{
		{Dst: cidr("0.0.0.0/0"), MultiPath: []*netlink.NexthopInfo{
			{LinkIndex: up.Attrs().Index, Gw: net.ParseIP("192.168.77.1")},
			{LinkIndex: up2.Attrs().Index, Gw: net.ParseIP("198.51.100.1")},
		}},
		{Gw: net.ParseIP("2001:db8:77::1"), LinkIndex: up.Attrs().Index},
		{Dst: cidr("0.0.0.0/0"), Type: unix.RTN_BLACKHOLE, Priority: 500},
		{Dst: cidr("172.31.0.0/16"), LinkIndex: up.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: 4},
		{Dst: cidr("2001:db8:99::/64"), LinkIndex: up.Attrs().Index, Protocol: 4},
		{Dst: cidr("10.66.0.0/24"), LinkIndex: up.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: 80},
		{Dst: cidr("10.55.0.9/32"), LinkIndex: own.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: 4},
	} {
		if err := h.RouteAdd(r); err != nil {
			t.Fatalf("add %v: %v", r, err)
		}
	}
	owned := func(l Link) bool { return Owned(l, "cali") }
	want, err := ReadHost(h, 80, owned)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadHostAt(netns.NsHandle(n.NetNS.Fd()), 80, owned)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadHostAt:\n%+v\nReadHost with the library:\n%+v", got, want)
	}
	if !slices.Equal(got.Uplinks, []string{"up0", "up1"}) {
		t.Errorf("uplinks %v, want [up0 up1]", got.Uplinks)
	}
}

// addUp adds l through h, sets it up and returns it as the kernel has it.
func addUp(t *testing.T, h *netlink.Handle, l netlink.Link) netlink.Link {
	t.Helper()
	if err := h.LinkAdd(l); err != nil {
		t.Fatalf("add link %s: %v", l.Attrs().Name, err)
	}
	got, err := h.LinkByName(l.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(got); err != nil {
		t.Fatal(err)
	}
	return got
}
