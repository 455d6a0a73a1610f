package bgpmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/routes"
)

// TestRoutesKernel: as root, on a real kernel (a network namespace of its
// own; a veth stands in for the uplink, 192.0.2.1/24 and 2001:db8::1/64,
// with a static route to 198.51.100.0/24 via 192.0.2.254), with real
// route tables and the netlink seams: a learned route of an earlier run
// (proto 186) is kept until the sessions converge; learned routes are
// programmed "via <next hop> dev eth0 proto 186", a next hop behind the
// router via the router, an unreachable one not at all; a route deleted
// behind the manager's back is reported by its netlink event, and the
// Apply it asks for puts it back; a route of another protocol on the
// uplink stays.
func TestRoutesKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "routes in a network namespace of its own")
	n := netnstest.NewT(t)
	h := n.Handle
	l, err := netnstest.AddVeth(h, uplink, "router0")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"192.0.2.1/24", "2001:db8::1/64"} {
		addr, _ := netlink.ParseAddr(s)
		addr.Flags = unix.IFA_F_NODAD
		if err := h.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
	}
	idx := l.Attrs().Index
	add := func(dst, gw string, proto int) {
		t.Helper()
		_, d, _ := net.ParseCIDR(dst)
		if err := h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: d, Gw: net.ParseIP(gw), Protocol: netlink.RouteProtocol(proto), Table: unix.RT_TABLE_MAIN}); err != nil {
			t.Fatalf("add %s via %s proto %d: %v", dst, gw, proto, err)
		}
	}
	add("198.51.100.0/24", "192.0.2.254", unix.RTPROT_STATIC)
	add("10.244.9.0/24", "192.0.2.9", 186)                // an earlier run's, learned no more
	add("10.244.8.0/24", "192.0.2.8", unix.RTPROT_STATIC) // an operator's: never ours

	quiet := slog.New(slog.DiscardHandler)
	sp := newFakeSpeaker()
	var woken atomic.Int32
	var m *Manager
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	err = n.Do(func() error {
		var err error
		m, err = New(Config{
			NodeName: "node-a", HostIPv4: a("192.0.2.1"), HostIPv6: a("2001:db8::1"), Iface: uplink,
			Subnets: prefixes("192.0.2.0/24", "2001:db8::/64"), ASN: 64512, NodeMesh: true,
			LocalBlocks: prefixes("10.244.1.0/24", "fd00:1::/120"), Program: true, GracefulRestart: true, RestartTime: time.Hour,
			Logger: quiet,
		}, sp, func(v int) (RouteTable, error) {
			return routes.New(routes.Config{IPVersion: v, Protocol: 186, InterfaceNames: []string{uplink}, Logger: quiet})
		})
		if err != nil {
			return err
		}
		w := netwatch.New(quiet)
		w.Register("bgp", m.Interest(), m.Events(func() { woken.Add(1) }))
		return w.Start(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.routes.Close() })
	apply := func() {
		t.Helper()
		if err := n.Do(m.Apply); err != nil {
			t.Fatal(err)
		}
	}
	dump := func() []string {
		var out []string
		for _, v := range []int{4, 6} {
			rs, err := nlutil.MainRoutes(h, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Protocol == 186 {
					out = append(out, fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gw, uplink))
				}
			}
		}
		slices.Sort(out)
		return out
	}
	m.OnNodes(nodes())
	sp.learn(
		route("10.244.2.0/24", "192.0.2.2", "192.0.2.2"),
		route("10.244.3.0/24", "198.51.100.3", "198.51.100.3"),
		route("fd00:2::/120", "2001:db8::2", "2001:db8::2"),
		route("fd00:5::/120", "2001:db8:77::5", "2001:db8:5::5"), // no route to it
	)
	apply()
	want := []string{
		"10.244.2.0/24 via 192.0.2.2 dev eth0",
		"10.244.3.0/24 via 192.0.2.254 dev eth0",
		"10.244.9.0/24 via 192.0.2.9 dev eth0",
		"fd00:2::/120 via 2001:db8::2 dev eth0",
	}
	if got := dump(); !slices.Equal(got, want) {
		t.Fatalf("before converging, routes\n got %q\nwant %q", got, want)
	}
	if st := m.Status(); st.RefusedNow != 1 || st.Refused[0].Reason != reasonUnreachable {
		t.Errorf("refused %+v, want fd00:5::/120 with its unreachable next hop", st.Refused)
	}
	sp.establish(true, time.Now())
	m.QueueCheck()
	apply()
	want = slices.DeleteFunc(want, func(s string) bool { return s == "10.244.9.0/24 via 192.0.2.9 dev eth0" })
	if got := dump(); !slices.Equal(got, want) {
		t.Fatalf("converged, routes\n got %q\nwant %q", got, want)
	}

	before := woken.Load()
	_, d, _ := net.ParseCIDR("10.244.3.0/24")
	if err := h.RouteDel(&netlink.Route{LinkIndex: idx, Dst: d, Protocol: 186, Table: unix.RT_TABLE_MAIN}); err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 5*time.Second, "the deleted route's event", func() error {
		if woken.Load() > before {
			return nil
		}
		return errors.New("no wake yet")
	})
	apply()
	if got := dump(); !slices.Equal(got, want) {
		t.Errorf("after the route was deleted\n got %q\nwant %q", got, want)
	}
	rs, err := nlutil.MainRoutes(h, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rs, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == "10.244.8.0/24" }) {
		t.Error("the operator's route on the uplink was removed")
	}

	// The default seams on their own: the kernel's route to a next hop,
	// the uplink's routes of the protocol.
	err = n.Do(func() error {
		gw, iface, err := NetlinkResolve(a("198.51.100.7"))
		if err != nil || gw != a("192.0.2.254") || iface != uplink {
			return fmt.Errorf("resolve 198.51.100.7: %s %s %v, want 192.0.2.254 eth0", gw, iface, err)
		}
		if gw, iface, err := NetlinkResolve(a("192.0.2.7")); err != nil || gw.IsValid() || iface != uplink {
			return fmt.Errorf("resolve 192.0.2.7: %s %s %v, want no gateway, eth0", gw, iface, err)
		}
		if _, _, err := NetlinkResolve(a("2001:db8:77::5")); err == nil {
			return errors.New("resolve 2001:db8:77::5: no error, want unreachable")
		}
		ts, err := NetlinkRoutes(4, 186, uplink)
		if err != nil || len(ts) != 2 || ts[0].Type != routes.TypeGateway {
			return fmt.Errorf("the uplink's IPv4 routes of proto 186: %+v %v, want 2", ts, err)
		}
		if ts, err := NetlinkRoutes(4, 186, "nosuch0"); err != nil || len(ts) != 0 {
			return fmt.Errorf("routes of a missing uplink: %+v %v, want none", ts, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
