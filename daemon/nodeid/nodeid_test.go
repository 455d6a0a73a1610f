package nodeid

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// fakeNL is an in-memory Netlink: links, their addresses and routes.
type fakeNL struct {
	links  []netlink.Link
	addrs  map[string][]string // link name → CIDRs
	routes []netlink.Route
	err    error
}

var _ Netlink = (*fakeNL)(nil)

func (f *fakeNL) LinkList() ([]netlink.Link, error) { return f.links, f.err }

func (f *fakeNL) AddrList(l netlink.Link, fam int) ([]netlink.Addr, error) {
	var out []netlink.Addr
	for _, s := range f.addrs[l.Attrs().Name] {
		ip, n, _ := net.ParseCIDR(s)
		if (ip.To4() != nil) != (fam == netlink.FAMILY_V4) {
			continue
		}
		n.IP = ip
		out = append(out, netlink.Addr{IPNet: n})
	}
	return out, nil
}

func (f *fakeNL) RouteListFiltered(fam int, _ *netlink.Route, _ uint64) ([]netlink.Route, error) {
	var out []netlink.Route
	for _, r := range f.routes {
		if r.Family == fam {
			out = append(out, r)
		}
	}
	return out, nil
}

func link(idx int, name string, mtu int) netlink.Link {
	return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: idx, Name: name, MTU: mtu}}
}

func loopback() netlink.Link {
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo", MTU: 65536, Flags: net.FlagLoopback}}
}

// ownVXLAN stands for routelet's own devices.
func ownVXLAN(l netlink.Link) bool { return l.Attrs().Name == "vxlan.calico" }

func newFake() *fakeNL {
	return &fakeNL{
		links: []netlink.Link{loopback(), link(2, "eth0", 9000), link(3, "eth1", 1500), link(4, "vxlan.calico", 1450)},
		addrs: map[string][]string{
			"lo":           {"127.0.0.1/8", "::1/128"},
			"vxlan.calico": {"10.244.0.0/32"},
			"eth0":         {"10.0.0.5/24", "fe80::1/64", "2001:db8::5/64"},
			"eth1":         {"192.168.7.9/24"},
		},
		routes: []netlink.Route{
			{Family: netlink.FAMILY_V4, LinkIndex: 3, Dst: &net.IPNet{IP: net.IPv4(192, 168, 7, 0).To4(), Mask: net.CIDRMask(24, 32)}},
			{Family: netlink.FAMILY_V4, LinkIndex: 3, Priority: 100},
			{Family: netlink.FAMILY_V4, LinkIndex: 2, Priority: 10},
			{Family: netlink.FAMILY_V6, LinkIndex: 2},
		},
	}
}

func TestDetectFake(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		spec      string
		v4, v6    string
		iface     string
		mtu       int
		wantError bool
		errWords  []string
	}{
		{spec: "", v4: "10.0.0.5", v6: "2001:db8::5", iface: "eth0", mtu: 9000},
		{spec: "192.168.7.9", v4: "192.168.7.9", iface: "eth1", mtu: 1500},
		{spec: "203.0.113.1", v4: "203.0.113.1"},
		{spec: "cidr:192.168.0.0/16", v4: "192.168.7.9", iface: "eth1", mtu: 1500},
		{spec: "cidr:2001:db8::/32", v6: "2001:db8::5", iface: "eth0", mtu: 9000},
		{spec: "cidr:172.16.0.0/12", wantError: true},
		{spec: "interface:^eth1$", v4: "192.168.7.9", iface: "eth1", mtu: 1500},
		{spec: "interface:^eth", v4: "10.0.0.5", v6: "2001:db8::5", iface: "eth0", mtu: 9000},
		{spec: "interface:^wlan", wantError: true},
		// Never loopback or routelet's own devices.
		{spec: "cidr:0.0.0.0/0", v4: "10.0.0.5", iface: "eth0", mtu: 9000},
		{spec: "cidr:::/0", v6: "2001:db8::5", iface: "eth0", mtu: 9000},
		{spec: "cidr:127.0.0.0/8", wantError: true, errWords: []string{"127.0.0.1 on lo"}},
		{spec: "cidr:10.244.0.0/16", wantError: true, errWords: []string{"10.244.0.0 on vxlan.calico", "routelet's own"}},
		{spec: "interface:^vxlan", wantError: true, errWords: []string{"skipped vxlan.calico"}},
		{spec: "interface:.*", v4: "10.0.0.5", v6: "2001:db8::5", iface: "eth0", mtu: 9000},
	} {
		id, err := Detect(newFake(), tc.spec, ownVXLAN)
		if tc.wantError {
			if err == nil {
				t.Errorf("Detect(%q) = %+v, want error", tc.spec, id)
			}
			for _, w := range tc.errWords {
				if err != nil && !strings.Contains(err.Error(), w) {
					t.Errorf("Detect(%q): error %q lacks %q", tc.spec, err, w)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("Detect(%q): %v", tc.spec, err)
			continue
		}
		var want Identity
		if tc.v4 != "" {
			want.IPv4 = a(tc.v4)
		}
		if tc.v6 != "" {
			want.IPv6 = a(tc.v6)
		}
		want.Iface, want.MTU = tc.iface, tc.mtu
		if id != want {
			t.Errorf("Detect(%q) = %+v, want %+v", tc.spec, id, want)
		}
	}
	f := newFake()
	f.routes = nil
	if _, err := Detect(f, "", nil); err == nil {
		t.Error("autodetect without a default route succeeded")
	}
}

func TestPodMTU(t *testing.T) {
	v4 := Identity{IPv4: netip.MustParseAddr("10.0.0.1"), MTU: 1500}
	v6 := Identity{IPv6: netip.MustParseAddr("2001:db8::1"), MTU: 1500}
	dual := Identity{IPv4: netip.MustParseAddr("10.0.0.1"), IPv6: netip.MustParseAddr("2001:db8::1"), MTU: 9000}
	for _, tc := range []struct {
		cfg       int
		id        Identity
		encap     string
		encrypted bool
		want      int
	}{
		{0, v4, "vxlan", false, 1450}, {0, v6, "vxlan", false, 1430}, {0, v4, "ipip", false, 1480},
		{0, v4, "none", false, 1500}, {1400, v4, "vxlan", false, 1400}, {0, Identity{}, "none", false, 1500},
		// WireGuard's overhead replaces the overlay's, in every mode.
		{0, v4, "vxlan", true, 1440}, {0, v4, "none", true, 1440}, {0, v4, "ipip", true, 1440},
		{0, v6, "vxlan", true, 1420}, {0, dual, "vxlan", true, 8940}, {0, Identity{}, "none", true, 1440},
		{1400, v4, "vxlan", true, 1400},
	} {
		if got := PodMTU(tc.cfg, tc.id, tc.encap, tc.encrypted); got != tc.want {
			t.Errorf("PodMTU(%d, %+v, %s, encrypted %v) = %d, want %d", tc.cfg, tc.id, tc.encap, tc.encrypted, got, tc.want)
		}
	}
}
