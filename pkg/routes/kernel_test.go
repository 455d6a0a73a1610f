package routes

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// kernelEnv is a fresh network namespace for one privileged test, with a
// netlink handle into it for setup and checks. Everything is removed in
// t.Cleanup, also when the test fails.
type kernelEnv struct {
	t    testing.TB
	ns   ns.NetNS
	name string // as "ip -n" knows it
	h    *netlink.Handle
}

func newKernelEnv(t testing.TB) *kernelEnv {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces, veths, routes and conntrack entries")
	n := netnstest.NewT(t)
	return &kernelEnv{t: t, ns: n.NetNS, name: n.Name, h: n.Handle}
}

// veth creates a veth pair, both ends up, and returns the first end.
func (e *kernelEnv) veth(name, peer string) netlink.Link {
	e.t.Helper()
	l, err := netnstest.AddVeth(e.h, name, peer)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// dummy creates an up device that is not a workload interface (a veth: the
// test kernel may lack the dummy driver); its peer is name+"-p".
func (e *kernelEnv) dummy(name string) netlink.Link {
	e.t.Helper()
	return e.veth(name, name+"-p")
}

// table creates a RouteTable bound to the namespace (the netlink and
// conntrack sockets are opened inside it on a locked thread).
func (e *kernelEnv) table(cfg Config, clock Clock) *RouteTable {
	e.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var rt *RouteTable
	err := e.ns.Do(func(ns.NetNS) error {
		var err error
		if clock == nil {
			rt, err = New(cfg)
			return err
		}
		nl, err := newRealNetlink(time.Second)
		if err != nil {
			return err
		}
		ct, err := newRealConntrack(int(nl.ns))
		if err != nil {
			return err
		}
		rt, err = NewWithDeps(cfg, nl, ct, clock)
		return err
	})
	if err != nil {
		e.t.Fatalf("new RouteTable: %v", err)
	}
	e.t.Cleanup(func() { rt.Close() })
	return rt
}

// ip runs "ip -n <ns> args..." and returns its output.
func (e *kernelEnv) ip(args ...string) string {
	e.t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", e.name}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// wantIP asserts that "ip ... " prints exactly the lines want (order kept,
// trailing spaces trimmed).
func (e *kernelEnv) wantIP(args []string, want ...string) {
	e.t.Helper()
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(e.ip(args...)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			got = append(got, l)
		}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("ip %s:\n%s\nwant:\n%s", strings.Join(args, " "), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func mustApply(t *testing.T, rt *RouteTable) {
	t.Helper()
	if err := rt.Apply(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// noWritesIn fails t when the Applies that resync, run after a full resync
// was queued, make any netlink write: what is already programmed is left
// alone. what names the check.
func noWritesIn(t *testing.T, rt *RouteTable, what string, resync func()) {
	t.Helper()
	before := rt.Stats().Writes
	rt.QueueResync()
	resync()
	if w := rt.Stats().Writes - before; w != 0 {
		t.Fatalf("%s made %d writes on the real kernel", what, w)
	}
}

func TestKernelProgramsRoutesIPv4(t *testing.T) {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	e.dummy("vxlan.calico")
	if err := e.h.AddrAdd(mustLink(t, e.h, "pod1"), &netlink.Addr{IPNet: ipnet("192.168.50.1/24")}); err != nil {
		t.Fatal(err)
	}
	rt := e.table(usualConfig(4), nil)
	rt.SetRoutes("cali1", []Target{
		{CIDR: pfx("10.0.0.1/32")},
		{CIDR: pfx("10.0.0.2/32"), Src: addr("192.168.50.1"), MTU: 1400, DestMAC: net.HardwareAddr{0xee, 0xee, 0, 0, 0, 2}},
	})
	rt.SetRoutes("vxlan.calico", []Target{{CIDR: pfx("10.1.0.0/26"), Type: TypeGateway, Gateway: addr("10.1.0.0"), OnLink: true}})
	rt.SetRoutes(InterfaceNone, []Target{
		{CIDR: pfx("10.0.0.0/26"), Type: TypeBlackhole},
		{CIDR: pfx("10.2.0.0/26"), Type: TypeUnreachable},
		{CIDR: pfx("10.3.0.0/26"), Type: TypeProhibit},
		{CIDR: pfx("10.4.0.0/26"), Type: TypeThrow},
	})
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show", "proto", "80"},
		"blackhole 10.0.0.0/26",
		"10.0.0.1 dev cali1 scope link",
		"10.0.0.2 dev cali1 scope link src 192.168.50.1 mtu 1400",
		"10.1.0.0/26 via 10.1.0.0 dev vxlan.calico onlink",
		"unreachable 10.2.0.0/26",
		"prohibit 10.3.0.0/26",
		"throw 10.4.0.0/26",
	)
	e.wantIP([]string{"-4", "neigh", "show", "dev", "cali1"}, "10.0.0.2 lladdr ee:ee:00:00:00:02 PERMANENT")

	// A no-change resync reads the kernel and writes nothing.
	noWritesIn(t, rt, "no-change resync", func() { mustApply(t, rt) })
}

func TestKernelProgramsRoutesIPv6(t *testing.T) {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	e.dummy("vxlan.calico")
	rt := e.table(usualConfig(6), nil)
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("fd00::1/128")}, {CIDR: pfx("fd00::2/128"), MTU: 1400}})
	rt.SetRoutes("vxlan.calico", []Target{{CIDR: pfx("fd00:1::/122"), Type: TypeGateway, Gateway: addr("fd00:1::"), OnLink: true}})
	rt.SetRoutes(InterfaceNone, []Target{{CIDR: pfx("fd00::/122"), Type: TypeBlackhole}, {CIDR: pfx("fd00:2::/122"), Type: TypeUnreachable}})
	mustApply(t, rt)
	e.wantIP([]string{"-6", "route", "show", "proto", "80"},
		"fd00::1 dev cali1 metric 1024 pref medium",
		"fd00::2 dev cali1 metric 1024 mtu 1400 pref medium",
		"blackhole fd00::/122 dev lo metric 1024 pref medium",
		"fd00:1::/122 via fd00:1:: dev vxlan.calico metric 1024 onlink pref medium",
		"unreachable fd00:2::/122 dev lo metric 1024 pref medium",
	)
	// The kernel's link-local route on the workload interface survives.
	if out := e.ip("-6", "route", "show", "dev", "cali1"); !strings.Contains(out, "fe80::/64") {
		t.Fatalf("fe80::/64 on cali1 was removed:\n%s", out)
	}
	noWritesIn(t, rt, "no-change IPv6 resync", func() { mustApply(t, rt) })
	// Removal works for every type (IPv6 reports no-device routes on lo).
	rt.SetRoutes("cali1", nil)
	rt.SetRoutes("vxlan.calico", nil)
	rt.SetRoutes(InterfaceNone, nil)
	mustApply(t, rt)
	e.wantIP([]string{"-6", "route", "show", "proto", "80"})
}

func mustLink(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

func TestKernelOwnership(t *testing.T) {
	e := newKernelEnv(t)
	cali := e.veth("cali1", "pod1")
	eth := e.dummy("eth0")
	vx := e.dummy("vxlan.calico")
	if err := e.h.AddrAdd(eth, &netlink.Addr{IPNet: ipnet("192.168.7.2/24")}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []netlink.Route{
		{Dst: ipnet("10.0.0.9/32"), LinkIndex: cali.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT},
		{Dst: ipnet("10.0.0.8/32"), LinkIndex: cali.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_STATIC, Priority: 50},
		{Dst: ipnet("10.9.0.0/24"), LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT},
		{Dst: ipnet("10.9.1.0/24"), LinkIndex: eth.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: 80},
		{Dst: ipnet("10.1.0.0/26"), LinkIndex: vx.Attrs().Index, Gw: net.ParseIP("10.1.0.0"), Flags: int(netlink.FLAG_ONLINK), Protocol: 80},
		{Dst: ipnet("10.2.0.0/26"), LinkIndex: vx.Attrs().Index, Gw: net.ParseIP("10.2.0.0"), Flags: int(netlink.FLAG_ONLINK), Protocol: unix.RTPROT_STATIC},
		{Dst: ipnet("10.3.0.0/26"), Type: unix.RTN_BLACKHOLE, Protocol: 80},
		{Dst: ipnet("10.4.0.0/26"), Type: unix.RTN_BLACKHOLE, Protocol: unix.RTPROT_BOOT},
	} {
		if err := e.h.RouteAdd(&r); err != nil {
			t.Fatalf("add foreign route %s: %v", r.Dst, err)
		}
	}
	rt := e.table(usualConfig(4), nil)
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.1/32")}})
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show"},
		"10.0.0.1 dev cali1 proto 80 scope link",
		"10.2.0.0/26 via 10.2.0.0 dev vxlan.calico proto static onlink",
		"blackhole 10.4.0.0/26", // ip hides "proto boot"
		"10.9.0.0/24 dev eth0 scope link",
		"10.9.1.0/24 dev eth0 proto 80 scope link",
		"192.168.7.0/24 dev eth0 proto kernel scope link src 192.168.7.2",
	)
}

func TestKernelGracePeriod(t *testing.T) {
	e := newKernelEnv(t)
	cali := e.veth("cali1", "pod1")
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	cfg := usualConfig(4)
	cfg.GracePeriod = 10 * time.Second
	rt := e.table(cfg, clock)
	// The plugin programmed the pod's route; the daemon does not know yet.
	if err := e.h.RouteAdd(&netlink.Route{Dst: ipnet("10.0.0.9/32"), LinkIndex: cali.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: 80}); err != nil {
		t.Fatal(err)
	}
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.1/32")}})
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show", "dev", "cali1"},
		"10.0.0.1 proto 80 scope link",
		"10.0.0.9 proto 80 scope link",
	)
	clock.Advance(11 * time.Second)
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show", "dev", "cali1"}, "10.0.0.1 proto 80 scope link")
}

func TestKernelTamperingRepaired(t *testing.T) {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	rt := e.table(usualConfig(4), nil)
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.1/32")}, {CIDR: pfx("10.0.0.2/32")}, {CIDR: pfx("10.0.0.3/32")}})
	mustApply(t, rt)
	e.ip("route", "del", "10.0.0.1/32", "dev", "cali1")
	e.ip("route", "change", "10.0.0.2/32", "dev", "cali1", "proto", "80", "mtu", "9000")
	e.ip("route", "add", "10.0.0.7/32", "dev", "cali1")
	rt.QueueResync()
	mustApply(t, rt)
	want := []string{"10.0.0.1 proto 80 scope link", "10.0.0.2 proto 80 scope link", "10.0.0.3 proto 80 scope link"}
	e.wantIP([]string{"-4", "route", "show", "dev", "cali1"}, want...)
	// A route event marks the interface dirty: incremental repair.
	e.ip("route", "del", "10.0.0.3/32", "dev", "cali1")
	rt.MarkDirty("cali1")
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show", "dev", "cali1"}, want...)
}

func TestKernelInterfaceDownUp(t *testing.T) {
	e := newKernelEnv(t)
	cali := e.veth("cali1", "pod1")
	rt := e.table(usualConfig(4), nil)
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.1/32")}})
	rt.SetRoutes("cali2", []Target{{CIDR: pfx("10.0.0.2/32")}})
	mustApply(t, rt) // cali2 does not exist yet: no error
	if err := e.h.LinkSetDown(cali); err != nil {
		t.Fatal(err)
	}
	rt.OnIfaceStateChanged("cali1", false)
	mustApply(t, rt)
	e.veth("cali2", "pod2")
	rt.OnIfaceStateChanged("cali2", true)
	if err := e.h.LinkSetUp(cali); err != nil {
		t.Fatal(err)
	}
	rt.OnIfaceStateChanged("cali1", true)
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show", "proto", "80"}, "10.0.0.1 dev cali1 scope link", "10.0.0.2 dev cali2 scope link")
}

// conntrack opens a conntrack connection inside e's namespace, closed when
// the test ends.
func (e *kernelEnv) conntrack() *conntrack.Conn {
	e.t.Helper()
	nsh, err := netns.GetFromPath(e.ns.Path())
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := conntrack.Dial(&mdnetlink.Config{NetNS: int(nsh)})
	if err != nil {
		nsh.Close()
		e.t.Fatalf("conntrack dial: %v", err)
	}
	e.t.Cleanup(func() {
		c.Close()
		nsh.Close()
	})
	return c
}

// addFlow creates a UDP flow src:sport -> dst:53 in c.
func addFlow(t *testing.T, c *conntrack.Conn, src, dst string, sport uint16) {
	t.Helper()
	f := conntrack.NewFlow(unix.IPPROTO_UDP, 0, addr(src), addr(dst), sport, 53, 120, 0)
	if err := c.Create(f); err != nil {
		t.Fatalf("create flow %s->%s: %v", src, dst, err)
	}
}

// flowsLeft applies rt, waits for the conntrack cleanups it started and
// returns the flows c still holds, each as "src->dst" of its original
// direction.
func flowsLeft(t *testing.T, rt *RouteTable, c *conntrack.Conn) []string {
	t.Helper()
	mustApply(t, rt)
	rt.WaitConntrackCleanups()
	flows, err := c.Dump(nil)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, f := range flows {
		left = append(left, f.TupleOrig.IP.SourceAddress.String()+"->"+f.TupleOrig.IP.DestinationAddress.String())
	}
	return left
}

// TestKernelConntrackCleanup injects flows with ti-mo/conntrack and checks
// the ones of a removed, and of a moved, pod IP are really gone.
func TestKernelConntrackCleanup(t *testing.T) {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	e.veth("cali2", "pod2")
	rt := e.table(usualConfig(4), nil)
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.1/32")}, {CIDR: pfx("10.0.0.2/32")}, {CIDR: pfx("10.0.0.3/32")}})
	mustApply(t, rt)

	c := e.conntrack()
	addFlow(t, c, "10.0.0.1", "192.0.2.1", 1001) // removed pod, original direction
	addFlow(t, c, "192.0.2.1", "10.0.0.1", 1002) // towards the removed pod (reply source)
	addFlow(t, c, "10.0.0.2", "192.0.2.1", 1003) // pod that moves to cali2
	addFlow(t, c, "10.0.0.3", "192.0.2.1", 1004) // pod that stays
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.3/32")}})
	rt.SetRoutes("cali2", []Target{{CIDR: pfx("10.0.0.2/32")}})
	if left := flowsLeft(t, rt, c); !slices.Equal(left, []string{"10.0.0.3->192.0.2.1"}) {
		t.Fatalf("flows left %v, want only 10.0.0.3's", left)
	}
	e.wantIP([]string{"-4", "route", "show", "proto", "80"}, "10.0.0.2 dev cali2 scope link", "10.0.0.3 dev cali1 scope link")
}

// TestKernelClosedTableTouchesNothing checks that a closed RouteTable fails
// instead of falling back to the calling thread's namespace (the host's).
func TestKernelClosedTableTouchesNothing(t *testing.T) {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	var rt *RouteTable
	if err := e.ns.Do(func(ns.NetNS) error {
		var err error
		rt, err = New(Config{IPVersion: 4, InterfacePrefixes: []string{"cali"}, Logger: slog.New(slog.DiscardHandler)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := rt.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.1/32")}})
	if err := rt.Apply(); err == nil {
		t.Fatal("Apply on a closed RouteTable succeeded")
	}
	e.wantIP([]string{"-4", "route", "show", "proto", "80"})
}

// TestKernelOtherTable programs a table above 255 (RTA_TABLE) and checks
// that main is left alone and a no-change resync writes nothing.
func TestKernelOtherTable(t *testing.T) {
	e := newKernelEnv(t)
	cali := e.veth("cali1", "pod1")
	if err := e.h.RouteAdd(&netlink.Route{Dst: ipnet("10.0.0.9/32"), LinkIndex: cali.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_BOOT}); err != nil {
		t.Fatal(err)
	}
	cfg := usualConfig(4)
	cfg.Table = 300
	rt := e.table(cfg, nil)
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("10.0.0.1/32")}, {CIDR: pfx("10.0.0.2/32"), MTU: 1300}})
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show", "table", "300"},
		"10.0.0.1 dev cali1 proto 80 scope link",
		"10.0.0.2 dev cali1 proto 80 scope link mtu 1300",
	)
	e.wantIP([]string{"-4", "route", "show", "table", "main"}, "10.0.0.9 dev cali1 scope link")
	noWritesIn(t, rt, "no-change resync of table 300", func() {
		mustApply(t, rt)
		rt.MarkDirty("cali1")
		mustApply(t, rt)
	})
}

// TestKernelBatchErrors checks that pipelined writes report each failure on
// the route that caused it, and that the others are programmed.
func TestKernelBatchErrors(t *testing.T) {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	e.dummy("vxlan.calico")
	rt := e.table(usualConfig(4), nil)
	var ts []Target
	for i := 1; i <= 100; i++ {
		ts = append(ts, Target{CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 32)})
	}
	rt.SetRoutes("cali1", ts)
	// No route covers 172.16.0.1 and onlink is not set: the kernel refuses.
	rt.SetRoutes("vxlan.calico", []Target{{CIDR: pfx("10.9.0.0/26"), Type: TypeGateway, Gateway: addr("172.16.0.1")}})
	err := rt.Apply()
	if !errors.Is(err, unix.ENETUNREACH) || !strings.Contains(err.Error(), "10.9.0.0/26") {
		t.Fatalf("Apply = %v, want ENETUNREACH naming 10.9.0.0/26", err)
	}
	if n := strings.Count(e.ip("-4", "route", "show", "dev", "cali1", "proto", "80"), "\n"); n != 100 {
		t.Fatalf("%d routes on cali1, want 100", n)
	}
	// Fixed by making the gateway reachable: the retry succeeds.
	e.ip("route", "add", "172.16.0.0/24", "dev", "vxlan.calico")
	mustApply(t, rt)
	e.wantIP([]string{"-4", "route", "show", "dev", "vxlan.calico", "proto", "80"}, "10.9.0.0/26 via 172.16.0.1")
}

// TestKernelConntrackCleanupIPv6 is the IPv6 twin: removing a /128 deletes
// its flows and leaves the others.
func TestKernelConntrackCleanupIPv6(t *testing.T) {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	rt := e.table(usualConfig(6), nil)
	rt.SetRoutes("cali1", []Target{{CIDR: pfx("fd00::1/128")}, {CIDR: pfx("fd00::2/128")}})
	mustApply(t, rt)
	c := e.conntrack()
	addFlow(t, c, "fd00::1", "2001:db8::53", 2000)
	addFlow(t, c, "fd00::2", "2001:db8::53", 2001)
	rt.RouteRemove("cali1", pfx("fd00::1/128"))
	if left := flowsLeft(t, rt, c); !slices.Equal(left, []string{"fd00::2->2001:db8::53"}) {
		t.Fatalf("flows left %v, want only fd00::2's", left)
	}
	e.wantIP([]string{"-6", "route", "show", "proto", "80"}, "fd00::2 dev cali1 metric 1024 pref medium")
}
