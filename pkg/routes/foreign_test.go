package routes_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
)

// foreignCase is a route of another owner and a desired route under its key.
type foreignCase struct {
	name    string
	foreign func(f *fixture) netlink.Route // added before the desired route
	iface   string
	target  routes.Target
}

// foreignCases covers every kind of desired route (pod, blackhole, overlay)
// against connected, default, static and foreign-protocol routes.
func foreignCases() []foreignCase {
	eth := func(f *fixture) int {
		l, err := f.nl.LinkByName("eth0")
		if err != nil {
			f.t.Fatal(err)
		}
		return l.Index
	}
	vx := func(f *fixture) int {
		l, err := f.nl.LinkByName("vxlan.calico")
		if err != nil {
			f.t.Fatal(err)
		}
		return l.Index
	}
	connected := func(f *fixture) netlink.Route {
		return netlink.Route{Dst: ipnet("192.168.0.0/24"), LinkIndex: eth(f), Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL}
	}
	def := func(proto netlink.RouteProtocol) func(f *fixture) netlink.Route {
		return func(f *fixture) netlink.Route {
			return netlink.Route{Dst: ipnet("0.0.0.0/0"), LinkIndex: eth(f), Gw: net.ParseIP("192.168.0.1"), Protocol: proto}
		}
	}
	hostStatic := func(f *fixture) netlink.Route {
		return netlink.Route{Dst: ipnet("10.0.0.5/32"), LinkIndex: eth(f), Gw: net.ParseIP("192.168.0.1"), Protocol: unix.RTPROT_STATIC}
	}
	blockStatic := func(f *fixture) netlink.Route {
		return netlink.Route{Dst: ipnet("10.0.0.0/26"), LinkIndex: eth(f), Gw: net.ParseIP("192.168.0.1"), Protocol: unix.RTPROT_STATIC}
	}
	onVXLAN := func(f *fixture) netlink.Route {
		return netlink.Route{Dst: ipnet("10.1.0.0/26"), LinkIndex: vx(f), Gw: net.ParseIP("10.1.0.9"), Flags: int(netlink.FLAG_ONLINK), Protocol: unix.RTPROT_STATIC}
	}
	bootBlackhole := func(*fixture) netlink.Route {
		return netlink.Route{Dst: ipnet("10.0.0.0/26"), Type: unix.RTN_BLACKHOLE, Protocol: unix.RTPROT_BOOT}
	}
	pod := func(cidr string) routes.Target { return routes.Target{CIDR: pfx(cidr)} }
	hole := func(cidr string) routes.Target { return routes.Target{CIDR: pfx(cidr), Type: routes.TypeBlackhole} }
	peer := func(cidr string) routes.Target {
		return routes.Target{CIDR: pfx(cidr), Type: routes.TypeGateway, Gateway: addr("10.1.0.0"), OnLink: true, MTU: 1450}
	}
	return []foreignCase{
		{"pod route vs connected", connected, "cali1", pod("192.168.0.0/24")},
		{"blackhole vs connected", connected, routes.InterfaceNone, hole("192.168.0.0/24")},
		{"overlay route vs connected", connected, "vxlan.calico", peer("192.168.0.0/24")},
		{"pod route vs default boot", def(unix.RTPROT_BOOT), "cali1", pod("0.0.0.0/0")},
		{"blackhole vs default static", def(unix.RTPROT_STATIC), routes.InterfaceNone, hole("0.0.0.0/0")},
		{"overlay route vs default dhcp", def(unix.RTPROT_DHCP), "vxlan.calico", peer("0.0.0.0/0")},
		{"pod route vs static /32", hostStatic, "cali1", pod("10.0.0.5/32")},
		{"blackhole vs static block", blockStatic, routes.InterfaceNone, hole("10.0.0.0/26")},
		{"blackhole vs boot blackhole", bootBlackhole, routes.InterfaceNone, hole("10.0.0.0/26")},
		{"overlay route vs static on the shared device", onVXLAN, "vxlan.calico", peer("10.1.0.0/26")},
	}
}

// newForeignFixture is a fixture with eth0 (192.168.0.0/24 connected unless
// the case adds that itself), cali1 and vxlan.calico, counting OnConflict.
func newForeignFixture(t *testing.T, calls *int) *fixture {
	f := newFixture(t, 4, func(c *routes.Config) {
		c.OnConflict = func(netip.Prefix, string, int) { *calls++ }
	})
	eth := f.nl.AddLink("eth0", true)
	f.nl.AddLink("cali1", true)
	f.nl.AddLink("vxlan.calico", true)
	// Gateways on eth0 need a link route covering them.
	f.addForeign(netlink.Route{Dst: ipnet("192.168.0.1/32"), LinkIndex: eth.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL})
	return f
}

// TestForeignRouteNeverReplaced: whichever way the desired route reaches
// the kernel (first full resync, or an incremental Apply that knows only
// its own routes), a route of another owner under its key stays, Apply
// reports ErrForeignRoute, the conflict is counted once, and the route is
// programmed by the first Apply after the other one went away.
func TestForeignRouteNeverReplaced(t *testing.T) {
	for _, tc := range foreignCases() {
		for _, path := range []string{"full resync", "incremental"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				calls := 0
				f := newForeignFixture(t, &calls)
				if path == "incremental" {
					f.apply() // the table knows the kernel; the next Apply goes from memory
				}
				foreign := tc.foreign(f)
				f.addForeign(foreign)
				before := f.dump()
				f.rt.SetRoutes(tc.iface, []routes.Target{tc.target})
				for i := range 3 {
					err := f.rt.Apply()
					if !errors.Is(err, routes.ErrForeignRoute) {
						t.Fatalf("Apply #%d: %v, want ErrForeignRoute", i+1, err)
					}
					if !strings.Contains(err.Error(), tc.target.CIDR.String()) {
						t.Fatalf("error %q does not name %s", err, tc.target.CIDR)
					}
					if got := f.dump(); got != before {
						t.Fatalf("Apply #%d changed the table:\n%s\nwant:\n%s", i+1, got, before)
					}
				}
				if st := f.rt.Stats(); st.Conflicts != 1 || st.ConflictsTotal != 1 || calls != 1 {
					t.Fatalf("Stats %+v, OnConflict calls %d: want one conflict, counted once", st, calls)
				}
				// The owner removes its route: ours follows on the next Apply.
				if err := f.nl.RouteDel(&foreign); err != nil {
					t.Fatal(err)
				}
				f.apply()
				if !strings.Contains(f.dump(), tc.target.CIDR.String()) {
					t.Fatalf("desired %s not programmed after the other route went:\n%s", tc.target.CIDR, f.dump())
				}
				if st := f.rt.Stats(); st.Conflicts != 0 || st.ConflictsTotal != 1 {
					t.Fatalf("Stats after the conflict cleared: %+v", st)
				}
			})
		}
	}
}

// TestForeignRouteAppearsBeforeWrite: a route of another owner that takes
// the key after the table's last read is met by the exclusive create, not
// overwritten.
func TestForeignRouteAppearsBeforeWrite(t *testing.T) {
	calls := 0
	f := newForeignFixture(t, &calls)
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.4/32")}})
	f.apply()
	eth, _ := f.nl.LinkByName("eth0")
	static := netlink.Route{Dst: ipnet("10.0.0.5/32"), LinkIndex: eth.Index, Gw: net.ParseIP("192.168.0.1"), Protocol: unix.RTPROT_STATIC}
	f.addForeign(static)
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.4/32")}, {CIDR: pfx("10.0.0.5/32")}})
	if err := f.rt.Apply(); !errors.Is(err, routes.ErrForeignRoute) {
		t.Fatalf("Apply: %v, want ErrForeignRoute", err)
	}
	if n := f.nl.Calls("RouteReplace"); n != 0 {
		t.Fatalf("%d RouteReplace calls: nothing of ours held a key", n)
	}
	f.wantDump(
		"10.0.0.4/32 dev cali1 proto 80 scope link",
		"10.0.0.5/32 via 192.168.0.1 dev eth0 proto 4",
		"192.168.0.1/32 dev eth0 proto 2 scope link",
	)
	// Withdrawing the desired route clears the conflict.
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.4/32")}})
	f.apply()
	if st := f.rt.Stats(); st.Conflicts != 0 {
		t.Fatalf("conflict kept after the route was withdrawn: %+v", st)
	}
}

// TestOwnRoutesStillReplacedInPlace: routes of ours — our protocol on a
// shared device or no device, anything on a workload interface, also one
// the table did not know about — are replaced, never deleted first.
func TestOwnRoutesStillReplacedInPlace(t *testing.T) {
	f := newFixture(t, 4, nil)
	a := f.nl.AddLink("caliA", true)
	f.nl.AddLink("caliB", true)
	vx := f.nl.AddLink("vxlan.calico", true)
	f.apply()
	// Written behind the table's back (as the CNI plugin does): ours.
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.1/32"), LinkIndex: a.Index, Scope: netlink.SCOPE_LINK, Protocol: 80})
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.2/32"), LinkIndex: a.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT})
	f.addForeign(netlink.Route{Dst: ipnet("10.1.0.0/26"), LinkIndex: vx.Index, Gw: net.ParseIP("10.1.0.9"), Flags: int(netlink.FLAG_ONLINK), Protocol: 80})
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.0/26"), Type: unix.RTN_UNREACHABLE, Protocol: 80})
	f.rt.SetRoutes("caliB", []routes.Target{{CIDR: pfx("10.0.0.1/32")}, {CIDR: pfx("10.0.0.2/32")}})
	f.rt.SetRoutes("vxlan.calico", []routes.Target{{CIDR: pfx("10.1.0.0/26"), Type: routes.TypeGateway, Gateway: addr("10.1.0.0"), OnLink: true}})
	f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("10.0.0.0/26"), Type: routes.TypeBlackhole}})
	f.apply()
	f.wantDump(
		"blackhole 10.0.0.0/26 proto 80",
		"10.0.0.1/32 dev caliB proto 80 scope link",
		"10.0.0.2/32 dev caliB proto 80 scope link",
		"10.1.0.0/26 via 10.1.0.0 dev vxlan.calico proto 80 onlink",
	)
	if n := f.nl.Calls("RouteDel"); n != 0 {
		t.Fatalf("%d deletes: routes of ours are replaced in place", n)
	}
	if st := f.rt.Stats(); st.Conflicts != 0 || st.ConflictsTotal != 0 {
		t.Fatalf("own routes counted as conflicts: %+v", st)
	}
}

// TestForeignRouteIPv6Metric: IPv6 keys include the metric, so another
// owner's route to the same prefix with another metric is no conflict,
// and one with the metric routelet uses is.
func TestForeignRouteIPv6Metric(t *testing.T) {
	f := newFixture(t, 6, nil)
	eth := f.nl.AddLink("eth0", true)
	f.nl.AddLink("cali1", true)
	f.addForeign(netlink.Route{Dst: ipnet("fd00:1::/64"), LinkIndex: eth.Index, Protocol: unix.RTPROT_KERNEL, Priority: 256})
	f.addForeign(netlink.Route{Dst: ipnet("fd00:2::/64"), LinkIndex: eth.Index, Protocol: unix.RTPROT_STATIC})
	f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("fd00:1::/64"), Type: routes.TypeBlackhole}, {CIDR: pfx("fd00:2::/64"), Type: routes.TypeBlackhole}})
	if err := f.rt.Apply(); !errors.Is(err, routes.ErrForeignRoute) || !strings.Contains(err.Error(), "fd00:2::/64") || strings.Contains(err.Error(), "fd00:1::/64") {
		t.Fatalf("Apply: %v, want ErrForeignRoute for fd00:2::/64 only", err)
	}
	f.wantDump(
		"fd00:1::/64 dev eth0 proto 2 metric 256",
		"blackhole fd00:1::/64 dev lo proto 80 metric 1024",
		"fd00:2::/64 dev eth0 proto 4 metric 1024",
	)
}
