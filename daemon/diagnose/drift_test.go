package diagnose

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
)

// TestRouteDriftFails: a pod's host route or a peer block's overlay route
// that the route table would not leave as it is — same destination and
// device, drifted in one attribute the table compares (routestest.Drifts)
// — fails its step; the route as the table writes it passes.
func TestRouteDriftFails(t *testing.T) {
	_, _, veth, a4, a6 := fakePod(0)
	_, _, b4, _ := fakePeer(1)
	for _, c := range []struct {
		step   string
		v      int
		iface  string
		target routes.Target
	}{
		{"src-host-route", 4, veth, routes.Target{CIDR: netip.PrefixFrom(a4, 32)}},
		{"src-host-route", 6, veth, routes.Target{CIDR: netip.PrefixFrom(a6, 128)}},
		{"route", 4, overlay.DeviceVXLAN, routes.Target{CIDR: b4, Type: routes.TypeGateway, Gateway: b4.Addr(), OnLink: true, MTU: fakeVXLAN4}},
	} {
		spec := routes.Spec{IPVersion: c.v, Protocol: fakeProto}
		status := func(kr netlink.Route) (Status, string) {
			n := newFakeNode(3, 3)
			rs := slices.DeleteFunc(n.k.routes[c.v], func(r Route) bool { return r.Dst == c.target.CIDR })
			n.k.routes[c.v] = append(rs, inspect.RouteOf(&kr, c.v, c.iface))
			rep, err := Run(n.cfg, n.st, n.k, "demo/pod-0", "10.100.1.5", Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range rep.Steps {
				if s.ID == c.step && s.Family == c.v {
					return s.Status, s.Fact + " / " + s.Problem
				}
			}
			t.Fatalf("no step %s/%d", c.step, c.v)
			return "", ""
		}
		if st, why := status(spec.Route(c.target, 0)); st != Pass {
			t.Errorf("%s/%d with %s as the table writes it: %s (%s), want pass", c.step, c.v, c.target.CIDR, st, why)
		}
		for _, d := range routestest.Drifts(c.target, c.v) {
			kr := spec.Route(c.target, 0)
			d.Change(&kr)
			if st, why := status(kr); st != Fail {
				t.Errorf("%s/%d with %s drifted (%s): %s (%s), want fail", c.step, c.v, c.target.CIDR, d.Name, st, why)
			}
		}
	}
}
