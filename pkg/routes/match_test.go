package routes_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
)

// TestMismatchIsWhatTheTableRewrites: the route the RouteTable programs
// for a target (a pod's host route of each family, an overlay route
// onlink, a direct route) satisfies it (Spec.Mismatch ""); after each
// drift (routestest.Drifts) Mismatch names the attribute, and a resync
// rewrites the route back to one Mismatch accepts (or, for a route of
// another protocol on a shared device, reports the conflict).
func TestMismatchIsWhatTheTableRewrites(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      int
		iface  string
		target routes.Target
	}{
		{"IPv4 host route", 4, "cali1", routes.Target{CIDR: pfx("10.0.0.1/32")}},
		{"IPv6 host route", 6, "cali1", routes.Target{CIDR: pfx("fd00::1/128")}},
		{"overlay route", 4, "vxlan.calico", routes.Target{CIDR: pfx("10.1.0.0/26"), Type: routes.TypeGateway, Gateway: addr("10.1.0.0"), OnLink: true, MTU: 1450}},
		{"direct route", 4, "vxlan.calico", routes.Target{CIDR: pfx("10.2.0.0/26"), Type: routes.TypeGateway, Gateway: addr("10.1.0.2")}},
	} {
		spec := routes.Spec{IPVersion: c.v, Protocol: routes.DefaultProtocol}
		for _, d := range routestest.Drifts(c.target, c.v) {
			t.Run(c.name+" "+d.Name, func(t *testing.T) {
				f := newFixture(t, c.v, nil)
				l := f.nl.AddLink(c.iface, true)
				if c.target.Type == routes.TypeGateway {
					// A connected route covers the gateways, as an address
					// on the device makes one: valid without onlink.
					f.addForeign(netlink.Route{Dst: ipnet("10.1.0.0/24"), LinkIndex: l.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL})
				}
				f.rt.SetRoutes(c.iface, []routes.Target{c.target})
				f.apply()
				r := f.route(c.target.CIDR)
				if m := spec.Mismatch(&r, c.target); m != "" {
					t.Fatalf("programmed route %s: Mismatch = %q, want \"\"", f.dump(), m)
				}
				d.Change(&r)
				if err := f.nl.RouteReplace(&r); err != nil {
					t.Fatal(err)
				}
				r = f.route(c.target.CIDR)
				if m := spec.Mismatch(&r, c.target); m != d.Want {
					t.Errorf("changed route: Mismatch = %q, want %q", m, d.Want)
				}
				before := f.rt.Stats().Writes
				f.rt.QueueResync()
				if d.Disowns && c.iface == "vxlan.calico" {
					// A shared device: the route is someone else's now.
					if err := f.rt.Apply(); !errors.Is(err, routes.ErrForeignRoute) {
						t.Errorf("Apply = %v, want ErrForeignRoute", err)
					}
					return
				}
				f.apply()
				if f.rt.Stats().Writes == before {
					t.Errorf("the resync left the changed route alone: %s", f.dump())
				}
				r = f.route(c.target.CIDR)
				if m := spec.Mismatch(&r, c.target); m != "" {
					t.Errorf("after the resync: %s: Mismatch = %q", f.dump(), m)
				}
			})
		}
	}
}

// route returns the kernel's route to dst in the fixture's table.
func (f *fixture) route(dst netip.Prefix) netlink.Route {
	f.t.Helper()
	for _, r := range f.nl.Routes(f.fam, 0) {
		if r.Dst != nil && r.Dst.String() == dst.String() {
			return r
		}
	}
	f.t.Fatalf("no route %s in %s", dst, f.dump())
	return netlink.Route{}
}
