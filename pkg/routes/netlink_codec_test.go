package routes

import (
	"encoding/binary"
	"net"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The hand-written rtnetlink encoder (appendRouteRequest) and decoders
// (decodeRoute, decodeLink) are checked here without a kernel: what the
// encoder writes decodes to the same route, messages built with the
// library's own serialisers decode as the kernel's would, and no input makes
// the decoders panic.

// cidr parses a CIDR into the *net.IPNet shape decodeRoute produces: a
// 4-byte IP for IPv4, a 16-byte one for IPv6.
func cidr(t testing.TB, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	if ip4 := n.IP.To4(); ip4 != nil {
		n.IP = ip4
	}
	return n
}

// ip parses an address into the length decodeRoute produces.
func ip(s string) net.IP {
	a := net.ParseIP(s)
	if a4 := a.To4(); a4 != nil {
		return a4
	}
	return a
}

// roundTripRoutes are the shapes of route the RouteTable writes: links,
// gateways (onlink), blackholes and the like, in the main table and in
// tables above 255, with and without source, metric and MTU.
func roundTripRoutes(t testing.TB) map[string]netlink.Route {
	return map[string]netlink.Route{
		"v4 link": {Family: unix.AF_INET, Dst: cidr(t, "10.244.1.5/32"), LinkIndex: 7, Table: unix.RT_TABLE_MAIN,
			Protocol: DefaultProtocol, Scope: netlink.SCOPE_LINK, Type: unix.RTN_UNICAST},
		"v4 gateway onlink mtu": {Family: unix.AF_INET, Dst: cidr(t, "10.244.2.0/26"), Gw: ip("10.244.2.0"), LinkIndex: 3,
			Table: unix.RT_TABLE_MAIN, Protocol: DefaultProtocol, Scope: netlink.SCOPE_UNIVERSE, Type: unix.RTN_UNICAST,
			Flags: int(netlink.FLAG_ONLINK), MTU: 1450},
		"v4 src priority": {Family: unix.AF_INET, Dst: cidr(t, "192.0.2.0/24"), Src: ip("192.0.2.1"), LinkIndex: 2,
			Table: unix.RT_TABLE_MAIN, Protocol: 81, Scope: netlink.SCOPE_UNIVERSE, Type: unix.RTN_UNICAST, Priority: 100, Tos: 0x10},
		"v4 blackhole": {Family: unix.AF_INET, Dst: cidr(t, "10.244.1.0/24"), Table: unix.RT_TABLE_MAIN,
			Protocol: DefaultProtocol, Scope: netlink.SCOPE_UNIVERSE, Type: unix.RTN_BLACKHOLE},
		"v4 default": {Family: unix.AF_INET, Dst: cidr(t, "0.0.0.0/0"), Gw: ip("10.0.0.1"), LinkIndex: 2, Table: unix.RT_TABLE_MAIN,
			Protocol: DefaultProtocol, Type: unix.RTN_UNICAST},
		"v4 table 1000": {Family: unix.AF_INET, Dst: cidr(t, "10.244.9.9/32"), LinkIndex: 9, Table: 1000,
			Protocol: DefaultProtocol, Scope: netlink.SCOPE_LINK, Type: unix.RTN_UNICAST},
		"v4 table 200": {Family: unix.AF_INET, Dst: cidr(t, "10.244.9.8/32"), LinkIndex: 9, Table: 200,
			Protocol: DefaultProtocol, Scope: netlink.SCOPE_LINK, Type: unix.RTN_UNICAST},
		"v6 link": {Family: unix.AF_INET6, Dst: cidr(t, "fd00:244:1::5/128"), LinkIndex: 7, Table: unix.RT_TABLE_MAIN,
			Protocol: DefaultProtocol, Scope: netlink.SCOPE_UNIVERSE, Type: unix.RTN_UNICAST, Priority: 1024},
		"v6 gateway mtu": {Family: unix.AF_INET6, Dst: cidr(t, "fd00:244:2::/120"), Gw: ip("fd00:244:2::"), LinkIndex: 4,
			Table: unix.RT_TABLE_MAIN, Protocol: DefaultProtocol, Type: unix.RTN_UNICAST, Flags: int(netlink.FLAG_ONLINK),
			MTU: 1430, Priority: 1024},
		"v6 unreachable table 70000": {Family: unix.AF_INET6, Dst: cidr(t, "fd00:244::/64"), Table: 70000,
			Protocol: 255, Type: unix.RTN_UNREACHABLE, Priority: 1024},
		"v6 src": {Family: unix.AF_INET6, Dst: cidr(t, "2001:db8::/32"), Src: ip("2001:db8::1"), LinkIndex: 5,
			Table: unix.RT_TABLE_MAIN, Protocol: DefaultProtocol, Type: unix.RTN_UNICAST, Priority: 1024},
	}
}

// TestRouteRequestRoundTrip: every route shape the RouteTable writes,
// encoded by appendRouteRequest, decodes with decodeRoute to the same route,
// and the netlink header carries the length, type, flags and sequence given.
func TestRouteRequestRoundTrip(t *testing.T) {
	for name, want := range roundTripRoutes(t) {
		for kind, flags := range map[string]uint16{"replace": flagsReplace, "create": flagsCreate} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				prefix := []byte("earlier request")
				b, err := appendRouteRequest(prefix, 42, flags, &want)
				if err != nil {
					t.Fatal(err)
				}
				if string(b[:len(prefix)]) != "earlier request" {
					t.Fatalf("encoder overwrote what was already in the buffer: %q", b[:len(prefix)])
				}
				m := b[len(prefix):]
				ne := binary.NativeEndian
				if got := ne.Uint32(m[0:4]); int(got) != len(m) {
					t.Errorf("nlmsg_len %d, message is %d bytes", got, len(m))
				}
				if got := ne.Uint16(m[4:6]); got != unix.RTM_NEWROUTE {
					t.Errorf("nlmsg_type %d, want RTM_NEWROUTE", got)
				}
				if got := ne.Uint16(m[6:8]); got != flags {
					t.Errorf("nlmsg_flags %#x, want %#x", got, flags)
				}
				if got := ne.Uint32(m[8:12]); got != 42 {
					t.Errorf("nlmsg_seq %d, want 42", got)
				}
				if len(m)%unix.NLMSG_ALIGNTO != 0 {
					t.Errorf("message length %d not aligned", len(m))
				}
				got, ok := decodeRoute(m[unix.SizeofNlMsghdr:])
				if !ok {
					t.Fatal("decodeRoute refused the encoded route")
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
				}
			})
		}
	}
}

// TestRouteRequestSixteenByteIPv4: a route whose IPv4 addresses are held in
// 16-byte form (as net.ParseIP returns them) is still encoded as AF_INET
// with 4-byte addresses.
func TestRouteRequestSixteenByteIPv4(t *testing.T) {
	_, dst, _ := net.ParseCIDR("10.244.3.0/26")
	dst.IP = dst.IP.To16()
	in := netlink.Route{Dst: dst, Gw: net.ParseIP("10.244.3.0"), Src: net.ParseIP("10.0.0.1"), LinkIndex: 3, Table: unix.RT_TABLE_MAIN}
	b, err := appendRouteRequest(nil, 1, flagsReplace, &in)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := decodeRoute(b[unix.SizeofNlMsghdr:])
	if !ok {
		t.Fatal("decodeRoute refused the encoded route")
	}
	want := netlink.Route{Family: unix.AF_INET, Dst: cidr(t, "10.244.3.0/26"), Gw: ip("10.244.3.0"), Src: ip("10.0.0.1"), LinkIndex: 3, Table: unix.RT_TABLE_MAIN}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestRouteRequestWithoutDestination: the encoder refuses a route without a
// destination instead of sending the kernel a default route by accident.
func TestRouteRequestWithoutDestination(t *testing.T) {
	b, err := appendRouteRequest([]byte("x"), 1, flagsReplace, &netlink.Route{LinkIndex: 1})
	if err == nil {
		t.Fatal("route without destination encoded")
	}
	if string(b) != "x" {
		t.Errorf("buffer changed on error: %q", b)
	}
}

// serialize builds an RTM_NEWROUTE body with the library's serialisers, the
// way the kernel lays one out: the rtmsg header, then the attributes.
func serialize(h unix.RtMsg, attrs ...*nl.RtAttr) []byte {
	m := (&nl.RtMsg{RtMsg: h}).Serialize()
	for _, a := range attrs {
		m = append(m, a.Serialize()...)
	}
	return m
}

// u32 is a native-endian uint32 attribute value.
func u32(v uint32) []byte { return nl.Uint32Attr(v) }

// TestDecodeRouteKernelLayout: messages laid out by the library's
// serialisers (as the kernel sends them in a dump) decode to what the
// RouteTable compares; cloned entries are skipped; multipath, nexthop
// objects and encapsulation mark the route as not ours; unknown attributes
// are ignored.
func TestDecodeRouteKernelLayout(t *testing.T) {
	metrics := nl.NewRtAttr(unix.RTA_METRICS, nil)
	metrics.AddRtAttr(unix.RTAX_ADVMSS, u32(1400))
	metrics.AddRtAttr(unix.RTAX_MTU, u32(1450))
	main4 := unix.RtMsg{Family: unix.AF_INET, Dst_len: 24, Table: unix.RT_TABLE_MAIN, Protocol: DefaultProtocol, Type: unix.RTN_UNICAST}
	for _, tc := range []struct {
		name string
		msg  []byte
		ok   bool
		want netlink.Route
	}{
		{
			name: "gateway with metrics and unknown attributes",
			msg: serialize(main4,
				nl.NewRtAttr(unix.RTA_DST, ip("10.1.2.0")),
				nl.NewRtAttr(unix.RTA_CACHEINFO, make([]byte, 32)),
				nl.NewRtAttr(unix.RTA_GATEWAY, ip("10.0.0.9")),
				nl.NewRtAttr(unix.RTA_OIF, u32(4)),
				metrics,
				nl.NewRtAttr(unix.RTA_PREF, []byte{0}),
			),
			ok: true,
			want: netlink.Route{Family: unix.AF_INET, Dst: cidr(t, "10.1.2.0/24"), Gw: ip("10.0.0.9"), LinkIndex: 4,
				Table: unix.RT_TABLE_MAIN, Protocol: DefaultProtocol, Type: unix.RTN_UNICAST, MTU: 1450},
		},
		{
			name: "table attribute overrides the header",
			msg: serialize(unix.RtMsg{Family: unix.AF_INET6, Dst_len: 64, Table: unix.RT_TABLE_COMPAT, Type: unix.RTN_UNICAST},
				nl.NewRtAttr(unix.RTA_TABLE, u32(5000)),
				nl.NewRtAttr(unix.RTA_DST, ip("fd00::")),
				nl.NewRtAttr(unix.RTA_PRIORITY, u32(1024)),
			),
			ok:   true,
			want: netlink.Route{Family: unix.AF_INET6, Dst: cidr(t, "fd00::/64"), Table: 5000, Type: unix.RTN_UNICAST, Priority: 1024},
		},
		{
			name: "default route has no destination",
			msg:  serialize(unix.RtMsg{Family: unix.AF_INET, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST}, nl.NewRtAttr(unix.RTA_GATEWAY, ip("10.0.0.1"))),
			ok:   true,
			want: netlink.Route{Family: unix.AF_INET, Gw: ip("10.0.0.1"), Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST},
		},
		{
			name: "cloned entry skipped",
			msg:  serialize(unix.RtMsg{Family: unix.AF_INET6, Dst_len: 128, Table: unix.RT_TABLE_MAIN, Flags: unix.RTM_F_CLONED}, nl.NewRtAttr(unix.RTA_DST, ip("fd00::1"))),
		},
		{
			name: "too short",
			msg:  []byte{unix.AF_INET, 32, 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := decodeRoute(tc.msg)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if ok && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	for _, attr := range []uint16{unix.RTA_MULTIPATH, unix.RTA_VIA, unix.RTA_ENCAP, rtaNHID} {
		got, ok := decodeRoute(serialize(main4, nl.NewRtAttr(unix.RTA_DST, ip("10.1.2.0")), nl.NewRtAttr(int(attr), make([]byte, 8))))
		if !ok || len(got.MultiPath) != 1 {
			t.Errorf("route with attribute %d: ok %v, MultiPath %v; want it marked (one element)", attr, ok, got.MultiPath)
		}
	}
}

// TestDecodeLink: RTM_NEWLINK messages laid out by the library's
// serialisers decode to index, administrative state and name; a message
// without a name or too short for the header is refused.
func TestDecodeLink(t *testing.T) {
	msg := func(index int32, flags uint32, attrs ...*nl.RtAttr) []byte {
		info := nl.NewIfInfomsg(unix.AF_UNSPEC)
		info.Index, info.Flags = index, flags
		m := info.Serialize()
		for _, a := range attrs {
			m = append(m, a.Serialize()...)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		ok   bool
		want Link
	}{
		{"up", msg(7, unix.IFF_UP|unix.IFF_RUNNING, nl.NewRtAttr(unix.IFLA_MTU, u32(1500)), nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("cali0123456789a"))),
			true, Link{Index: 7, Name: "cali0123456789a", Up: true}},
		{"down", msg(2, 0, nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("eth0")), nl.NewRtAttr(unix.IFLA_MTU, u32(9000))),
			true, Link{Index: 2, Name: "eth0"}},
		{"no name", msg(3, unix.IFF_UP, nl.NewRtAttr(unix.IFLA_MTU, u32(1500))), false, Link{}},
		{"too short", []byte{0, 0, 0}, false, Link{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := decodeLink(tc.msg)
			if ok != tc.ok || (ok && got != tc.want) {
				t.Errorf("decodeLink = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// plainRoute reports whether rt is a route appendRouteRequest can express
// exactly: a destination whose address length matches the family, source
// and gateway of that length, no multipath.
func plainRoute(rt netlink.Route) bool {
	n := map[int]int{unix.AF_INET: 4, unix.AF_INET6: 16}[rt.Family]
	if n == 0 || rt.Dst == nil || len(rt.Dst.IP) != n || rt.Dst.Mask == nil || len(rt.MultiPath) > 0 {
		return false
	}
	if n == 16 && rt.Dst.IP.To4() != nil {
		return false // an IPv4-mapped destination is encoded as IPv4
	}
	for _, a := range []net.IP{rt.Gw, rt.Src} {
		if a != nil && len(a) != n {
			return false
		}
	}
	return true
}

// FuzzDecodeRoute feeds arbitrary RTM_NEWROUTE bodies to decodeRoute: it
// never panics, and a route it decodes that the encoder can express comes
// back unchanged through appendRouteRequest and decodeRoute.
func FuzzDecodeRoute(f *testing.F) {
	for _, rt := range roundTripRoutes(f) {
		b, err := appendRouteRequest(nil, 1, flagsReplace, &rt)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[unix.SizeofNlMsghdr:])
	}
	f.Add(serialize(unix.RtMsg{Family: unix.AF_INET, Dst_len: 40}, nl.NewRtAttr(unix.RTA_DST, ip("10.0.0.0"))))
	f.Add(serialize(unix.RtMsg{Family: unix.AF_INET6}, nl.NewRtAttr(unix.RTA_METRICS, []byte{8, 0, 2, 0, 1})))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, m []byte) {
		rt, ok := decodeRoute(m)
		if !ok || !plainRoute(rt) {
			return
		}
		b, err := appendRouteRequest(nil, 1, flagsCreate, &rt)
		if err != nil {
			t.Fatalf("decoded route %+v not encodable: %v", rt, err)
		}
		again, ok := decodeRoute(b[unix.SizeofNlMsghdr:])
		if !ok {
			t.Fatalf("re-encoded route %+v not decodable", rt)
		}
		if !reflect.DeepEqual(again, rt) {
			t.Fatalf("round trip changed the route:\nfrom %+v\n  to %+v", rt, again)
		}
	})
}

// FuzzDecodeLink feeds arbitrary RTM_NEWLINK bodies to decodeLink: it never
// panics, and a link it accepts has a name without NUL bytes at its end.
func FuzzDecodeLink(f *testing.F) {
	info := nl.NewIfInfomsg(unix.AF_UNSPEC)
	info.Index = 5
	f.Add(append(info.Serialize(), nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("vxlan.calico")).Serialize()...))
	f.Add(append(info.Serialize(), 4, 0, 3, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, m []byte) {
		l, ok := decodeLink(m)
		if ok && (l.Name == "" || l.Name[len(l.Name)-1] == 0) {
			t.Fatalf("decodeLink accepted %+v", l)
		}
	})
}
