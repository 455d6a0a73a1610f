package routes_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
)

var errInjected = errors.New("injected failure")

// fixture is a RouteTable on a fake kernel with the usual routelet setup:
// cali* workload interfaces, a shared vxlan.calico, no-interface routes.
type fixture struct {
	t     *testing.T
	rt    *routes.RouteTable
	nl    *routestest.FakeNetlink
	ct    *routestest.FakeConntrack
	clock *routes.FakeClock
	fam   int
}

func newFixture(t *testing.T, ipVersion int, mod func(*routes.Config)) *fixture {
	t.Helper()
	cfg := routes.UsualConfig(ipVersion)
	if mod != nil {
		mod(&cfg)
	}
	f := &fixture{t: t, nl: routestest.NewFakeNetlink(), ct: routestest.NewFakeConntrack(), clock: routes.NewFakeClock(time.Unix(1_700_000_000, 0))}
	f.fam = netlink.FAMILY_V4
	if ipVersion == 6 {
		f.fam = netlink.FAMILY_V6
	}
	rt, err := routes.NewWithDeps(cfg, f.nl, f.ct, f.clock)
	if err != nil {
		t.Fatalf("NewWithDeps: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	f.rt = rt
	return f
}

func (f *fixture) apply() {
	f.t.Helper()
	if err := f.rt.Apply(); err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
}

func (f *fixture) dump() string { return f.nl.Dump(f.fam, 0) }

func (f *fixture) wantDump(want ...string) {
	f.t.Helper()
	got := f.dump()
	w := strings.Join(want, "\n")
	if w != "" {
		w += "\n"
	}
	if got != w {
		f.t.Fatalf("kernel table:\n%s\nwant:\n%s", got, w)
	}
}

// addForeign adds a route as another program would.
func (f *fixture) addForeign(r netlink.Route) {
	f.t.Helper()
	if err := f.nl.AddRoute(r); err != nil {
		f.t.Fatalf("AddRoute %v: %v", r, err)
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }
func ipnet(s string) *net.IPNet {
	p := pfx(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func TestTargetTypesIPv4(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.nl.AddLink("cali1", true)
	vx := f.nl.AddLink("vxlan.calico", true)
	f.rt.SetRoutes("cali1", []routes.Target{
		{CIDR: pfx("10.0.0.1/32")},
		{CIDR: pfx("10.0.0.2/32"), Src: addr("192.168.0.1"), MTU: 1400},
	})
	f.rt.SetRoutes("vxlan.calico", []routes.Target{
		{CIDR: pfx("10.1.0.0/26"), Type: routes.TypeGateway, Gateway: addr("10.1.0.0"), OnLink: true},
	})
	f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{
		{CIDR: pfx("10.0.0.0/26"), Type: routes.TypeBlackhole},
		{CIDR: pfx("10.2.0.0/26"), Type: routes.TypeUnreachable},
		{CIDR: pfx("10.3.0.0/26"), Type: routes.TypeProhibit},
		{CIDR: pfx("10.4.0.0/26"), Type: routes.TypeThrow},
	})
	f.apply()
	f.wantDump(
		"blackhole 10.0.0.0/26 proto 80",
		"10.0.0.1/32 dev cali1 proto 80 scope link",
		"10.0.0.2/32 dev cali1 proto 80 scope link src 192.168.0.1 mtu 1400",
		"10.1.0.0/26 via 10.1.0.0 dev vxlan.calico proto 80 onlink",
		"unreachable 10.2.0.0/26 proto 80",
		"prohibit 10.3.0.0/26 proto 80",
		"throw 10.4.0.0/26 proto 80",
	)

	// A gateway route without onlink needs a link route covering the gateway.
	f.rt.RouteUpdate("vxlan.calico", routes.Target{CIDR: pfx("10.5.0.0/26"), Type: routes.TypeGateway, Gateway: addr("172.16.0.9")})
	if err := f.rt.Apply(); !errors.Is(err, unix.ENETUNREACH) {
		t.Fatalf("Apply with unreachable gateway = %v, want ENETUNREACH", err)
	}
	if f.rt.Stats().DirtyIfaces != 1 {
		t.Fatalf("failed interface should stay dirty, stats %+v", f.rt.Stats())
	}
	f.addForeign(netlink.Route{Dst: ipnet("172.16.0.0/24"), LinkIndex: vx.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL})
	f.apply()
	if !strings.Contains(f.dump(), "10.5.0.0/26 via 172.16.0.9 dev vxlan.calico proto 80\n") {
		t.Fatalf("gateway route missing after retry:\n%s", f.dump())
	}
}

func TestTargetTypesIPv6(t *testing.T) {
	f := newFixture(t, 6, nil)
	f.nl.AddLink("cali1", true)
	f.nl.AddLink("vxlan.calico", true)
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("fd00::1/128")}})
	f.rt.SetRoutes("vxlan.calico", []routes.Target{
		{CIDR: pfx("fd00:1::/122"), Type: routes.TypeGateway, Gateway: addr("fd00:1::"), OnLink: true},
	})
	f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("fd00::/122"), Type: routes.TypeBlackhole}})
	f.apply()
	f.wantDump(
		"blackhole fd00::/122 dev lo proto 80 metric 1024",
		"fd00::1/128 dev cali1 proto 80 metric 1024",
		"fd00:1::/122 via fd00:1:: dev vxlan.calico proto 80 metric 1024 onlink",
	)
	// IPv4 targets are refused by an IPv6 table.
	f.rt.RouteUpdate("cali1", routes.Target{CIDR: pfx("10.0.0.1/32")})
	f.rt.QueueResync()
	before := f.nl.Writes()
	f.apply()
	if w := f.nl.Writes() - before; w != 0 {
		t.Fatalf("no-change IPv6 resync made %d writes", w)
	}
}

func TestNoChangeResyncMakesNoWrites(t *testing.T) {
	f := newFixture(t, 4, nil)
	for i := range 20 {
		name := fmt.Sprintf("cali%d", i)
		f.nl.AddLink(name, true)
		f.rt.SetRoutes(name, []routes.Target{
			{CIDR: pfx(fmt.Sprintf("10.0.%d.1/32", i))},
			{CIDR: pfx(fmt.Sprintf("10.0.%d.2/32", i)), MTU: 1450, DestMAC: net.HardwareAddr{0xee, 0, 0, 0, 0, byte(i)}},
		})
	}
	f.nl.AddLink("vxlan.calico", true)
	f.rt.SetRoutes("vxlan.calico", []routes.Target{{CIDR: pfx("10.9.0.0/26"), Type: routes.TypeGateway, Gateway: addr("10.9.0.0"), OnLink: true}})
	f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("10.0.0.0/16"), Type: routes.TypeBlackhole}})
	f.apply()
	before := f.nl.Writes()
	lists := f.nl.Calls("RouteList")
	f.rt.QueueResync()
	f.apply()
	if w := f.nl.Writes() - before; w != 0 {
		t.Fatalf("no-change resync made %d writes, want 0", w)
	}
	if n := f.nl.Calls("RouteList") - lists; n != 1 {
		t.Fatalf("full resync made %d route dumps, want 1 per table", n)
	}
	if s := f.rt.Stats(); s.Routes != 42 || s.DirtyIfaces != 0 || s.Writes != uint64(f.nl.Writes()) {
		t.Fatalf("stats %+v, want 42 routes, 0 dirty, %d writes", s, f.nl.Writes())
	}
	// An incremental Apply with nothing dirty touches nothing at all.
	f.apply()
	if w := f.nl.Writes() - before; w != 0 {
		t.Fatalf("idle Apply made %d writes", w)
	}
}

func TestOwnership(t *testing.T) {
	f := newFixture(t, 4, nil)
	cali := f.nl.AddLink("cali1", true)
	eth := f.nl.AddLink("eth0", true)
	vx := f.nl.AddLink("vxlan.calico", true)
	// On a workload interface every route is ours.
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.9/32"), LinkIndex: cali.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT})
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.8/32"), LinkIndex: cali.Index, Scope: netlink.SCOPE_LINK, Protocol: 80})
	// Elsewhere only routes with our protocol, and only on managed devices.
	f.addForeign(netlink.Route{Dst: ipnet("192.168.0.0/24"), LinkIndex: eth.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL})
	f.addForeign(netlink.Route{Dst: ipnet("192.168.9.0/24"), LinkIndex: eth.Index, Scope: netlink.SCOPE_LINK, Protocol: 80})
	f.addForeign(netlink.Route{Dst: ipnet("10.1.0.0/26"), LinkIndex: vx.Index, Gw: net.ParseIP("10.1.0.0"), Flags: int(netlink.FLAG_ONLINK), Protocol: 80})
	f.addForeign(netlink.Route{Dst: ipnet("10.2.0.0/26"), LinkIndex: vx.Index, Gw: net.ParseIP("10.2.0.0"), Flags: int(netlink.FLAG_ONLINK), Protocol: unix.RTPROT_STATIC})
	f.addForeign(netlink.Route{Dst: ipnet("10.3.0.0/26"), Type: unix.RTN_BLACKHOLE, Protocol: 80})
	f.addForeign(netlink.Route{Dst: ipnet("10.4.0.0/26"), Type: unix.RTN_BLACKHOLE, Protocol: unix.RTPROT_BOOT})
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.apply()
	f.wantDump(
		"10.0.0.1/32 dev cali1 proto 80 scope link",
		"10.2.0.0/26 via 10.2.0.0 dev vxlan.calico proto 4 onlink",
		"blackhole 10.4.0.0/26 proto 3",
		"192.168.0.0/24 dev eth0 proto 2 scope link",
		"192.168.9.0/24 dev eth0 proto 80 scope link",
	)
	// Desired routes for an interface we do not own are refused.
	f.rt.SetRoutes("eth0", []routes.Target{{CIDR: pfx("10.7.0.0/24")}})
	f.apply()
	if strings.Contains(f.dump(), "10.7.0.0") {
		t.Fatalf("route programmed on unmanaged eth0:\n%s", f.dump())
	}
}

func TestKeepExternalRoutesWhenDisabled(t *testing.T) {
	f := newFixture(t, 4, func(c *routes.Config) { c.RemoveExternalRoutes = false })
	cali := f.nl.AddLink("cali1", true)
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.9/32"), LinkIndex: cali.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT})
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.8/32"), LinkIndex: cali.Index, Scope: netlink.SCOPE_LINK, Protocol: 80})
	f.apply()
	f.wantDump("10.0.0.9/32 dev cali1 proto 3 scope link")
}

func TestIPv6LinkLocalKept(t *testing.T) {
	f := newFixture(t, 6, nil)
	cali := f.nl.AddLink("cali1", true)
	f.addForeign(netlink.Route{Dst: ipnet("fe80::/64"), LinkIndex: cali.Index, Protocol: unix.RTPROT_KERNEL, Priority: 256})
	f.addForeign(netlink.Route{Dst: ipnet("fd00::9/128"), LinkIndex: cali.Index, Protocol: unix.RTPROT_BOOT})
	f.apply()
	f.wantDump("fe80::/64 dev cali1 proto 2 metric 256")
}

// The kernel's fe80::/64 on a fresh veth is not an "unexpected route held
// by the grace period": the interface must settle at once, not be re-read on
// every Apply until the period ends.
func TestIPv6LinkLocalDoesNotHoldGrace(t *testing.T) {
	f := newFixture(t, 6, func(c *routes.Config) { c.GracePeriod = 10 * time.Second })
	cali := f.nl.AddLink("cali1", true)
	f.addForeign(netlink.Route{Dst: ipnet("fe80::/64"), LinkIndex: cali.Index, Protocol: unix.RTPROT_KERNEL, Priority: 256})
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("fd00::1/128")}})
	f.apply()
	if d, ok := f.rt.RetryAfter(); ok {
		t.Fatalf("RetryAfter = %v, true: the link-local route holds the interface in grace", d)
	}
	if s := f.rt.Stats(); s.DirtyIfaces != 0 {
		t.Fatalf("DirtyIfaces = %d after Apply, want 0", s.DirtyIfaces)
	}
}

func TestGracePeriod(t *testing.T) {
	f := newFixture(t, 4, func(c *routes.Config) { c.GracePeriod = 10 * time.Second })
	cali := f.nl.AddLink("cali1", true)
	// The CNI plugin added the pod's route before the daemon knew the pod.
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.9/32"), LinkIndex: cali.Index, Scope: netlink.SCOPE_LINK, Protocol: 80})
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.apply()
	f.wantDump(
		"10.0.0.1/32 dev cali1 proto 80 scope link",
		"10.0.0.9/32 dev cali1 proto 80 scope link",
	)
	d, ok := f.rt.RetryAfter()
	if !ok || d != 10*time.Second {
		t.Fatalf("RetryAfter = %v, %v; want 10s, true", d, ok)
	}
	f.clock.Advance(9 * time.Second)
	f.apply()
	if !strings.Contains(f.dump(), "10.0.0.9/32") {
		t.Fatal("route removed inside the grace period")
	}
	// A route we programmed ourselves is not "unexpected": removing it from
	// the desired state removes it at once, grace period or not.
	f.rt.RouteRemove("cali1", pfx("10.0.0.1/32"))
	f.apply()
	f.wantDump("10.0.0.9/32 dev cali1 proto 80 scope link")
	f.rt.RouteUpdate("cali1", routes.Target{CIDR: pfx("10.0.0.1/32")})
	// The daemon learns about the pod: the route becomes desired and stays.
	f.rt.RouteUpdate("cali1", routes.Target{CIDR: pfx("10.0.0.9/32")})
	f.clock.Advance(2 * time.Second)
	f.apply()
	f.wantDump(
		"10.0.0.1/32 dev cali1 proto 80 scope link",
		"10.0.0.9/32 dev cali1 proto 80 scope link",
	)
	if _, ok := f.rt.RetryAfter(); ok {
		t.Fatal("RetryAfter still reports a wait after the grace period")
	}

	// A second interface seen later gets its own grace period; an undesired
	// route on it goes once the period is over, without a new event.
	cali2 := f.nl.AddLink("cali2", true)
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.20/32"), LinkIndex: cali2.Index, Scope: netlink.SCOPE_LINK, Protocol: 80})
	f.rt.OnIfaceStateChanged("cali2", true)
	f.apply()
	if !strings.Contains(f.dump(), "10.0.0.20/32") {
		t.Fatal("route on a fresh interface removed inside its grace period")
	}
	f.clock.Advance(10 * time.Second)
	f.apply()
	if strings.Contains(f.dump(), "10.0.0.20/32") {
		t.Fatalf("route still there after the grace period:\n%s", f.dump())
	}
}

// serve adds the up workload interface iface, gives it a route to each of
// cidrs and applies.
func (f *fixture) serve(iface string, cidrs ...string) {
	f.t.Helper()
	f.nl.AddLink(iface, true)
	var ts []routes.Target
	for _, c := range cidrs {
		ts = append(ts, routes.Target{CIDR: pfx(c)})
	}
	f.rt.SetRoutes(iface, ts)
	f.apply()
}

// flowsAfterApply applies, waits for the conntrack cleanups that started
// and returns the flows left.
func (f *fixture) flowsAfterApply() []string {
	f.t.Helper()
	f.apply()
	f.rt.WaitConntrackCleanups()
	return f.ct.Flows()
}

func TestConntrackCleanupOnRemove(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.serve("cali1", "10.0.0.1/32", "10.0.0.2/32")
	f.ct.AddFlow(addr("10.0.0.1"), addr("8.8.8.8"), 1234, 53)              // from the pod
	f.ct.AddNATFlow(addr("10.9.9.9"), addr("10.96.0.1"), addr("10.0.0.1")) // to the pod via a service
	f.ct.AddFlow(addr("10.0.0.2"), addr("8.8.8.8"), 1234, 53)              // another pod
	f.rt.RouteRemove("cali1", pfx("10.0.0.1/32"))
	if got := f.flowsAfterApply(); !slices.Equal(got, []string{"10.0.0.2->8.8.8.8"}) {
		t.Fatalf("flows left %v, want only the other pod's", got)
	}
	if n := f.rt.Stats().ConntrackFlowsDeleted; n != 2 {
		t.Fatalf("ConntrackFlowsDeleted = %d, want 2", n)
	}
	f.wantDump("10.0.0.2/32 dev cali1 proto 80 scope link")
}

func TestConntrackCleanupAfterInterfaceGone(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.serve("cali1", "10.0.0.1/32")
	f.ct.AddFlow(addr("10.0.0.1"), addr("8.8.8.8"), 1234, 53)
	// CNI DEL removes the veth first; the kernel drops the route with it.
	if err := f.nl.DelLink("cali1"); err != nil {
		t.Fatal(err)
	}
	f.rt.OnIfaceStateChanged("cali1", false)
	f.rt.SetRoutes("cali1", nil)
	if got := f.flowsAfterApply(); len(got) != 0 {
		t.Fatalf("flows left %v after the pod went away", got)
	}
}

func TestConntrackCleanupWhenPluginMovedIP(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.serve("caliA", "10.0.0.1/32")
	f.ct.AddFlow(addr("10.0.0.1"), addr("8.8.8.8"), 1, 53)
	// The old pod goes, a new pod gets the same IP on caliB; the plugin
	// programs the route before the daemon has caught up.
	b := f.nl.AddLink("caliB", true)
	if err := f.nl.RouteReplace(&netlink.Route{Dst: ipnet("10.0.0.1/32"), LinkIndex: b.Index, Scope: netlink.SCOPE_LINK, Protocol: 80}); err != nil {
		t.Fatal(err)
	}
	f.rt.SetRoutes("caliA", nil)
	f.rt.SetRoutes("caliB", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.rt.OnIfaceStateChanged("caliB", true)
	if got := f.flowsAfterApply(); len(got) != 0 {
		t.Fatalf("old pod's flows %v survived the IP moving to a new pod", got)
	}
	f.wantDump("10.0.0.1/32 dev caliB proto 80 scope link")
}

func TestConntrackFailureDoesNotBlockRoutes(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.serve("cali1", "10.0.0.1/32")
	f.ct.FailDump(errInjected)
	f.rt.SetRoutes("cali1", nil)
	f.apply()
	f.rt.WaitConntrackCleanups()
	// Re-adding the IP waits for the (failed) cleanup, then proceeds.
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link")
}

func TestHungConntrackDoesNotStopRoutes(t *testing.T) {
	f := newFixture(t, 4, func(c *routes.Config) { c.NetlinkTimeout = 20 * time.Millisecond })
	f.serve("cali1", "10.0.0.1/32")
	release := f.ct.HoldDumps()
	defer release()
	f.rt.SetRoutes("cali1", nil) // starts a cleanup that hangs
	f.apply()
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.apply() // waits for the cleanup at most NetlinkTimeout
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link")
}

// orderedNetlink records route writes and checks conntrack state at each add.
type orderedNetlink struct {
	*routestest.FakeNetlink
	ct      *routestest.FakeConntrack
	ops     []string
	flowsAt map[string][]string
}

// write records a write of r; one that programs a route (add, replace)
// also notes the conntrack flows at that moment.
func (o *orderedNetlink) write(op string, r *netlink.Route) {
	o.ops = append(o.ops, fmt.Sprintf("%s %s if%d", op, r.Dst, r.LinkIndex))
	if op != "del" {
		o.flowsAt[r.Dst.String()] = o.ct.Flows()
	}
}

func (o *orderedNetlink) RouteReplace(r *netlink.Route) error {
	o.write("replace", r)
	return o.FakeNetlink.RouteReplace(r)
}

func (o *orderedNetlink) RouteReplaceMany(rs []*netlink.Route) []error {
	return routestest.OneByOne(rs, o.RouteReplace)
}

func (o *orderedNetlink) RouteAdd(r *netlink.Route) error {
	o.write("add", r)
	return o.FakeNetlink.RouteAdd(r)
}

func (o *orderedNetlink) RouteAddMany(rs []*netlink.Route) []error {
	return routestest.OneByOne(rs, o.RouteAdd)
}

func (o *orderedNetlink) RouteDel(r *netlink.Route) error {
	o.write("del", r)
	return o.FakeNetlink.RouteDel(r)
}

func TestMoveBetweenInterfaces(t *testing.T) {
	fnl := routestest.NewFakeNetlink()
	ct := routestest.NewFakeConntrack()
	onl := &orderedNetlink{FakeNetlink: fnl, ct: ct, flowsAt: map[string][]string{}}
	rt, err := routes.NewWithDeps(routes.Config{IPVersion: 4, InterfacePrefixes: []string{"cali"}, RemoveExternalRoutes: true, GracePeriod: -1, Logger: slog.New(slog.DiscardHandler)}, onl, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	a := fnl.AddLink("caliA", true)
	b := fnl.AddLink("caliB", true)
	rt.SetRoutes("caliA", []routes.Target{{CIDR: pfx("10.0.0.1/32")}, {CIDR: pfx("10.0.0.2/32")}})
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	ct.AddFlow(addr("10.0.0.1"), addr("8.8.8.8"), 1, 53)
	ct.AddFlow(addr("10.0.0.2"), addr("8.8.8.8"), 1, 53)
	onl.ops = nil
	// The IP moves: the new owner is set first, the old one drops it later.
	rt.SetRoutes("caliB", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	rt.SetRoutes("caliA", []routes.Target{{CIDR: pfx("10.0.0.2/32"), MTU: 1400}})
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("replace 10.0.0.1/32 if%d", b.Index),
		fmt.Sprintf("replace 10.0.0.2/32 if%d", a.Index),
	}
	got := slices.Clone(onl.ops)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("ops %v, want %v (a move is one atomic replace, no delete)", onl.ops, want)
	}
	if left := onl.flowsAt["10.0.0.1/32"]; !slices.Equal(left, []string{"10.0.0.2->8.8.8.8"}) {
		t.Fatalf("flows when the moved route was added: %v; the old owner's must be gone first", left)
	}
	if d := fnl.Dump(netlink.FAMILY_V4, 0); d != "10.0.0.1/32 dev caliB proto 80 scope link\n10.0.0.2/32 dev caliA proto 80 scope link mtu 1400\n" {
		t.Fatalf("table after move:\n%s", d)
	}
}

func TestAddBeforeDelete(t *testing.T) {
	fnl := routestest.NewFakeNetlink()
	onl := &orderedNetlink{FakeNetlink: fnl, ct: routestest.NewFakeConntrack(), flowsAt: map[string][]string{}}
	rt, err := routes.NewWithDeps(routes.Config{IPVersion: 4, InterfacePrefixes: []string{"cali"}, RemoveExternalRoutes: true, GracePeriod: -1, Logger: slog.New(slog.DiscardHandler)}, onl, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for i := range 5 {
		fnl.AddLink(fmt.Sprintf("cali%d", i), true)
		rt.SetRoutes(fmt.Sprintf("cali%d", i), []routes.Target{{CIDR: pfx(fmt.Sprintf("10.0.0.%d/32", i))}})
	}
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	onl.ops = nil
	for i := range 5 {
		rt.SetRoutes(fmt.Sprintf("cali%d", i), []routes.Target{{CIDR: pfx(fmt.Sprintf("10.0.1.%d/32", i))}})
	}
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	lastAdd, firstDel := -1, len(onl.ops)
	for i, op := range onl.ops {
		if strings.HasPrefix(op, "replace") || strings.HasPrefix(op, "add") {
			lastAdd = i
		} else if i < firstDel {
			firstDel = i
		}
	}
	if lastAdd > firstDel || len(onl.ops) != 10 {
		t.Fatalf("ops %v: want 5 adds, then 5 deletes", onl.ops)
	}
}

func TestConflictNewestClaimWins(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.nl.AddLink("caliA", true)
	f.nl.AddLink("caliB", true)
	f.rt.SetRoutes("caliA", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.rt.SetRoutes("caliB", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.apply()
	f.wantDump("10.0.0.1/32 dev caliB proto 80 scope link")
	before := f.nl.Writes()
	f.rt.QueueResync()
	f.apply()
	if w := f.nl.Writes() - before; w != 0 {
		t.Fatalf("resync with a conflict made %d writes; it must not flap", w)
	}
	f.rt.SetRoutes("caliB", nil)
	f.apply()
	f.wantDump("10.0.0.1/32 dev caliA proto 80 scope link")
}

func TestSetAllRoutesAndWants(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.nl.AddLink("cali1", true)
	f.nl.AddLink("cali2", true)
	all := map[string][]routes.Target{
		"cali1":              {{CIDR: pfx("10.0.0.1/32")}},
		"cali2":              {{CIDR: pfx("10.0.0.2/32")}, {CIDR: pfx("10.0.0.9/32")}},
		routes.InterfaceNone: {{CIDR: pfx("10.0.0.0/24"), Type: routes.TypeBlackhole}},
	}
	if !f.rt.SetAllRoutes(all) {
		t.Fatal("first SetAllRoutes reported no change")
	}
	f.apply()
	f.wantDump(
		"blackhole 10.0.0.0/24 proto 80",
		"10.0.0.1/32 dev cali1 proto 80 scope link",
		"10.0.0.2/32 dev cali2 proto 80 scope link",
		"10.0.0.9/32 dev cali2 proto 80 scope link",
	)
	for _, tc := range []struct {
		iface string
		dst   string
		want  bool
	}{
		{"cali1", "10.0.0.1/32", true},
		{"cali2", "10.0.0.9/32", true},
		{"cali1", "10.0.0.2/32", false}, // cali2's, not cali1's
		{routes.InterfaceNone, "10.0.0.0/24", true},
		{routes.InterfaceNone, "10.0.0.5/24", true}, // compared masked
		{"cali3", "10.0.0.1/32", false},
	} {
		if got := f.rt.Wants(tc.iface, pfx(tc.dst)); got != tc.want {
			t.Errorf("Wants(%s, %s) = %v, want %v", tc.iface, tc.dst, got, tc.want)
		}
	}

	// The same routes again: nothing changed, nothing to do. A target the
	// table refuses (wrong family) is left out both times.
	same := map[string][]routes.Target{
		"cali1":              {{CIDR: pfx("10.0.0.1/32")}, {CIDR: pfx("fd00::1/128")}},
		"cali2":              {{CIDR: pfx("10.0.0.9/32")}, {CIDR: pfx("10.0.0.2/32")}},
		routes.InterfaceNone: {{CIDR: pfx("10.0.0.0/24"), Type: routes.TypeBlackhole}},
	}
	if f.rt.SetAllRoutes(same) {
		t.Error("SetAllRoutes with the same routes reported a change")
	}
	if s := f.rt.Stats(); s.DirtyIfaces != 0 {
		t.Errorf("unchanged SetAllRoutes left %d interfaces dirty", s.DirtyIfaces)
	}

	// A CIDR given twice counts once: cali2 then wants only 10.0.0.2.
	twice := map[string][]routes.Target{
		"cali1":              same["cali1"],
		"cali2":              {{CIDR: pfx("10.0.0.2/32")}, {CIDR: pfx("10.0.0.2/32")}},
		routes.InterfaceNone: same[routes.InterfaceNone],
	}
	if !f.rt.SetAllRoutes(twice) || f.rt.Wants("cali2", pfx("10.0.0.9/32")) {
		t.Fatal("a CIDR given twice in place of two hid the change")
	}
	if f.rt.SetAllRoutes(twice) {
		t.Error("the same routes, a CIDR given twice, reported a change")
	}

	// An interface missing from the map wants nothing any more.
	delete(same, "cali2")
	if !f.rt.SetAllRoutes(same) {
		t.Fatal("SetAllRoutes without cali2 reported no change")
	}
	if f.rt.Wants("cali2", pfx("10.0.0.2/32")) {
		t.Error("cali2's route still wanted after SetAllRoutes left it out")
	}
	f.apply()
	f.wantDump(
		"blackhole 10.0.0.0/24 proto 80",
		"10.0.0.1/32 dev cali1 proto 80 scope link",
	)

	// A changed target on one interface is a change.
	same["cali1"] = []routes.Target{{CIDR: pfx("10.0.0.1/32"), MTU: 1400}}
	if !f.rt.SetAllRoutes(same) {
		t.Error("SetAllRoutes with a changed MTU reported no change")
	}
}

func TestInterfaceDownUpRename(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.nl.AddLink("cali1", true)
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.rt.SetRoutes("cali2", []routes.Target{{CIDR: pfx("10.0.0.2/32")}}) // does not exist yet
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link")

	// cali2 appears down: nothing to program, no error.
	f.nl.AddLink("cali2", false)
	f.rt.OnIfaceStateChanged("cali2", false)
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link")
	// It comes up: programmed.
	if err := f.nl.SetLinkUp("cali2", true); err != nil {
		t.Fatal(err)
	}
	f.rt.OnIfaceStateChanged("cali2", true)
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link", "10.0.0.2/32 dev cali2 proto 80 scope link")

	// cali1 goes down (the kernel flushes its routes) and up again.
	if err := f.nl.SetLinkUp("cali1", false); err != nil {
		t.Fatal(err)
	}
	f.rt.OnIfaceStateChanged("cali1", false)
	f.apply()
	if got := f.rt.Stats().Routes; got != 1 {
		t.Fatalf("Stats.Routes = %d with cali1 down, want 1", got)
	}
	if err := f.nl.SetLinkUp("cali1", true); err != nil {
		t.Fatal(err)
	}
	f.rt.OnIfaceStateChanged("cali1", true)
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link", "10.0.0.2/32 dev cali2 proto 80 scope link")

	// cali2 is renamed to cali3: its route is no longer desired where it is.
	if err := f.nl.RenameLink("cali2", "cali3"); err != nil {
		t.Fatal(err)
	}
	f.rt.OnIfaceStateChanged("cali2", false)
	f.rt.OnIfaceStateChanged("cali3", true)
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link")
	// And renamed back: the desired route returns.
	if err := f.nl.RenameLink("cali3", "cali2"); err != nil {
		t.Fatal(err)
	}
	f.rt.OnIfaceStateChanged("cali2", true)
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link", "10.0.0.2/32 dev cali2 proto 80 scope link")
}

func TestTamperingRepairedOnResync(t *testing.T) {
	f := newFixture(t, 4, nil)
	cali := f.nl.AddLink("cali1", true)
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}, {CIDR: pfx("10.0.0.2/32")}})
	f.apply()
	// Someone deletes one route and changes the other.
	if err := f.nl.RouteDel(&netlink.Route{Dst: ipnet("10.0.0.1/32")}); err != nil {
		t.Fatal(err)
	}
	if err := f.nl.RouteReplace(&netlink.Route{Dst: ipnet("10.0.0.2/32"), LinkIndex: cali.Index, Protocol: 80, MTU: 9000}); err != nil {
		t.Fatal(err)
	}
	f.rt.QueueResync()
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link", "10.0.0.2/32 dev cali1 proto 80 scope link")
	// The same through MarkDirty (what a route event does).
	if err := f.nl.RouteDel(&netlink.Route{Dst: ipnet("10.0.0.2/32")}); err != nil {
		t.Fatal(err)
	}
	f.rt.MarkDirty("cali1")
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link", "10.0.0.2/32 dev cali1 proto 80 scope link")
}

func TestStaticARP(t *testing.T) {
	f := newFixture(t, 4, nil)
	cali := f.nl.AddLink("cali1", true)
	mac := net.HardwareAddr{0xee, 0xee, 0, 0, 0, 1}
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32"), DestMAC: mac}})
	f.apply()
	n := f.nl.Neighbours()
	if len(n) != 1 || n[0].LinkIndex != cali.Index || n[0].State != netlink.NUD_PERMANENT || n[0].HardwareAddr.String() != mac.String() {
		t.Fatalf("neighbours %v, want one permanent entry for 10.0.0.1 lladdr %s", n, mac)
	}
	// Tampered with: the next resync re-asserts it.
	f.nl.SetNeighbour(netlink.Neigh{LinkIndex: cali.Index, IP: net.ParseIP("10.0.0.1").To4(), HardwareAddr: net.HardwareAddr{1, 2, 3, 4, 5, 6}, State: netlink.NUD_REACHABLE})
	f.rt.QueueResync()
	f.apply()
	if n := f.nl.Neighbours(); len(n) != 1 || n[0].HardwareAddr.String() != mac.String() || n[0].State != netlink.NUD_PERMANENT {
		t.Fatalf("neighbours after resync %v", n)
	}
	// Deleted by hand; a neighbour event makes the daemon mark the
	// interface dirty, which re-asserts it.
	if err := f.nl.NeighDel(&netlink.Neigh{LinkIndex: cali.Index, IP: net.ParseIP("10.0.0.1").To4()}); err != nil {
		t.Fatal(err)
	}
	f.rt.MarkDirty("cali1")
	f.apply()
	if n := f.nl.Neighbours(); len(n) != 1 || n[0].HardwareAddr.String() != mac.String() {
		t.Fatalf("neighbours after MarkDirty %v", n)
	}
	// Removing the target removes the entry.
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.apply()
	if n := f.nl.Neighbours(); len(n) != 0 {
		t.Fatalf("neighbours after removal %v, want none", n)
	}
}

func TestInvalidTargetsIgnored(t *testing.T) {
	f := newFixture(t, 4, nil)
	f.nl.AddLink("cali1", true)
	f.rt.SetRoutes("cali1", []routes.Target{
		{},                                   // no CIDR
		{CIDR: pfx("fd00::1/128")},           // wrong family
		{CIDR: pfx("10.0.0.0/24"), Type: 42}, // unknown type
		{CIDR: pfx("10.0.1.0/24"), Type: routes.TypeBlackhole},                  // no-interface type on a device
		{CIDR: pfx("10.0.2.0/24"), Type: routes.TypeGateway},                    // no gateway
		{CIDR: pfx("10.0.3.0/24"), DestMAC: net.HardwareAddr{1, 2, 3, 4, 5, 6}}, // ARP on a /24
		{CIDR: pfx("10.0.0.1/32"), MTU: -1},
		{CIDR: pfx("10.0.0.7/32")},
	})
	f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("10.0.4.0/24")}}) // link type without a device
	f.apply()
	f.wantDump("10.0.0.7/32 dev cali1 proto 80 scope link")
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []routes.Config{
		{IPVersion: 5},
		{IPVersion: 4, Protocol: 300},
		{IPVersion: 4, Table: -1},
		{IPVersion: 4, InterfacePrefixes: []string{""}},
	} {
		if _, err := routes.NewWithDeps(cfg, routestest.NewFakeNetlink(), nil, nil); err == nil {
			t.Errorf("NewWithDeps(%+v) succeeded", cfg)
		}
	}
}

func TestLivenessCalledDuringLongLoops(t *testing.T) {
	calls := 0
	f := newFixture(t, 4, func(c *routes.Config) { c.Liveness = func() { calls++ } })
	f.nl.AddLink("cali1", true)
	var targets []routes.Target
	for i := range 1000 {
		targets = append(targets, routes.Target{CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 32)})
	}
	f.rt.SetRoutes("cali1", targets)
	f.apply()
	if calls < 1000/routes.LivenessEvery {
		t.Fatalf("liveness called %d times while programming 1000 routes", calls)
	}
}

func TestOtherTable(t *testing.T) {
	f := newFixture(t, 4, func(c *routes.Config) { c.Table = 300 })
	cali := f.nl.AddLink("cali1", true)
	f.addForeign(netlink.Route{Dst: ipnet("10.0.0.9/32"), LinkIndex: cali.Index, Scope: netlink.SCOPE_LINK, Protocol: 80}) // main table
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
	f.apply()
	f.wantDump("10.0.0.9/32 dev cali1 proto 80 scope link")
	if got := f.nl.Dump(netlink.FAMILY_V4, 300); got != "10.0.0.1/32 dev cali1 proto 80 scope link\n" {
		t.Fatalf("table 300:\n%s", got)
	}
}

// TestFailureMatrix injects one failure into each kernel call, at each of its
// first few invocations, in three scenarios, and checks the table converges
// to the same state as without failures within three Apply calls.
func TestFailureMatrix(t *testing.T) {
	type scenario struct {
		name  string
		setup func(f *fixture) // before the first Apply
		step  func(f *fixture) // then, before the Applies under test
	}
	mac := net.HardwareAddr{0xee, 0xee, 0, 0, 0, 1}
	scenarios := []scenario{
		{
			name: "from empty",
			setup: func(f *fixture) {
				c := f.nl.AddLink("cali1", true)
				f.nl.AddLink("cali2", true)
				f.nl.AddLink("vxlan.calico", true)
				f.addForeign(netlink.Route{Dst: ipnet("10.0.0.9/32"), LinkIndex: c.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT})
				f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32"), DestMAC: mac}, {CIDR: pfx("10.0.0.2/32")}})
				f.rt.SetRoutes("cali2", []routes.Target{{CIDR: pfx("10.0.0.3/32")}})
				f.rt.SetRoutes("vxlan.calico", []routes.Target{{CIDR: pfx("10.1.0.0/26"), Type: routes.TypeGateway, Gateway: addr("10.1.0.0"), OnLink: true}})
				f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("10.0.0.0/26"), Type: routes.TypeBlackhole}})
			},
		},
		{
			name: "incremental change",
			setup: func(f *fixture) {
				f.nl.AddLink("cali1", true)
				f.nl.AddLink("cali2", true)
				f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32"), DestMAC: mac}, {CIDR: pfx("10.0.0.2/32")}})
				f.rt.SetRoutes("cali2", []routes.Target{{CIDR: pfx("10.0.0.3/32")}})
				f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("10.0.0.0/26"), Type: routes.TypeBlackhole}})
				f.apply()
			},
			step: func(f *fixture) {
				f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.2/32"), MTU: 1400}, {CIDR: pfx("10.0.0.4/32"), DestMAC: mac}})
				f.rt.SetRoutes("cali2", []routes.Target{{CIDR: pfx("10.0.0.1/32")}})
				f.rt.SetRoutes(routes.InterfaceNone, []routes.Target{{CIDR: pfx("10.0.0.0/26"), Type: routes.TypeUnreachable}})
			},
		},
		{
			name: "resync repairs tampering",
			setup: func(f *fixture) {
				f.nl.AddLink("cali1", true)
				f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32"), DestMAC: mac}, {CIDR: pfx("10.0.0.2/32")}})
				f.apply()
			},
			step: func(f *fixture) {
				if err := f.nl.RouteDel(&netlink.Route{Dst: ipnet("10.0.0.1/32")}); err != nil {
					f.t.Fatal(err)
				}
				c, _ := f.nl.LinkByName("cali1")
				f.addForeign(netlink.Route{Dst: ipnet("10.0.0.7/32"), LinkIndex: c.Index, Scope: netlink.SCOPE_LINK, Protocol: 80})
				f.nl.SetNeighbour(netlink.Neigh{LinkIndex: c.Index, IP: net.ParseIP("10.0.0.1").To4(), HardwareAddr: net.HardwareAddr{1, 2, 3, 4, 5, 6}, State: netlink.NUD_STALE})
				f.rt.QueueResync()
			},
		},
	}
	scenarios = append(scenarios, scenario{
		name: "kernel hints",
		setup: func(f *fixture) {
			f.nl.AddLink("cali1", true)
			f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32"), DestMAC: mac}, {CIDR: pfx("10.0.0.2/32")}})
			f.rt.SetRoutes("cali3", []routes.Target{{CIDR: pfx("10.0.0.3/32")}})
			f.apply()
		},
		step: func(f *fixture) {
			if err := f.nl.RouteDel(&netlink.Route{Dst: ipnet("10.0.0.2/32")}); err != nil {
				f.t.Fatal(err)
			}
			c, _ := f.nl.LinkByName("cali1")
			f.addForeign(netlink.Route{Dst: ipnet("10.0.0.7/32"), LinkIndex: c.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT})
			f.nl.AddLink("cali3", true)
			f.rt.MarkDirty("cali1")
			f.rt.OnIfaceStateChanged("cali3", true)
		},
	})
	calls := []string{"LinkList", "LinkByName", "RouteList", "RouteReplace", "RouteAdd", "RouteDel", "NeighList", "NeighSet", "NeighDel"}
	state := func(f *fixture) string {
		return f.dump() + fmt.Sprint(f.nl.Neighbours())
	}
	for _, sc := range scenarios {
		ref := newFixture(t, 4, nil)
		sc.setup(ref)
		if sc.step != nil {
			sc.step(ref)
		}
		ref.apply()
		want := state(ref)
		for _, call := range calls {
			for nth := 1; nth <= 3; nth++ {
				t.Run(fmt.Sprintf("%s/%s#%d", sc.name, call, nth), func(t *testing.T) {
					f := newFixture(t, 4, nil)
					sc.setup(f)
					if sc.step != nil {
						sc.step(f)
					}
					f.nl.FailOn(call, nth, fmt.Errorf("%s: %w", call, errInjected))
					var errs []error
					for range 3 {
						errs = append(errs, f.rt.Apply())
					}
					if got := state(f); got != want {
						t.Fatalf("not converged after 3 Applies (errors %v):\n%s\nwant:\n%s", errs, got, want)
					}
					if errs[len(errs)-1] != nil {
						t.Fatalf("last Apply still failing: %v", errs[len(errs)-1])
					}
				})
			}
		}
	}
}

// TestHoldKeepsRoutes: while an interface is held, neither a full resync
// nor a change of its desired routes deletes a route or static ARP entry
// there (a plugin's route the table never wanted included), nor cleans
// the flows of its addresses; desired routes are still written. Released,
// the next Apply removes what is not desired.
func TestHoldKeepsRoutes(t *testing.T) {
	f := newFixture(t, 4, nil)
	cali := f.nl.AddLink("cali1", true)
	mac := net.HardwareAddr{0xee, 0xee, 0, 0, 0, 1}
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.1/32"), DestMAC: mac}})
	f.apply()
	// The plugin's route of another pod address the table was never told of.
	f.addForeign(netlink.Route{LinkIndex: cali.Index, Dst: ipnet("10.0.0.2/32"), Scope: netlink.SCOPE_LINK, Protocol: 80})
	f.ct.AddFlow(addr("10.0.0.1"), addr("8.8.8.8"), 1234, 53)
	f.rt.Hold("cali1", true)
	f.rt.SetRoutes("cali1", []routes.Target{{CIDR: pfx("10.0.0.3/32")}})
	if got := f.flowsAfterApply(); len(got) != 1 {
		t.Errorf("flows of a held interface's address cleaned: %v", got)
	}
	f.rt.QueueResync()
	f.apply()
	f.wantDump("10.0.0.1/32 dev cali1 proto 80 scope link", "10.0.0.2/32 dev cali1 proto 80 scope link", "10.0.0.3/32 dev cali1 proto 80 scope link")
	if n := f.nl.Neighbours(); len(n) != 1 || n[0].HardwareAddr.String() != mac.String() {
		t.Errorf("neighbours of the held interface %v, want the static ARP entry kept", n)
	}
	f.rt.Hold("cali1", false)
	f.apply()
	f.wantDump("10.0.0.3/32 dev cali1 proto 80 scope link")
	if n := f.nl.Neighbours(); len(n) != 0 {
		t.Errorf("neighbours after release %v, want none", n)
	}
}
