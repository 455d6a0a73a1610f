package routes_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
)

// drift is a kernel route changed by someone else under the key of a
// route the RouteTable programmed: same destination and device.
type drift struct {
	name   string
	iface  string
	target routes.Target
	change func(r *netlink.Route)
	want   string // Mismatch of the changed route
}

// drifts are the changes TestMismatchIsWhatTheTableRewrites shows the
// RouteTable rewriting, one per attribute Mismatch compares.
func drifts() []drift {
	host := routes.Target{CIDR: pfx("10.0.0.1/32")}
	gw := routes.Target{CIDR: pfx("10.1.0.0/26"), Type: routes.TypeGateway, Gateway: addr("10.1.0.0"), OnLink: true}
	return []drift{
		{"host route scope global", "cali1", host, func(r *netlink.Route) { r.Scope = netlink.SCOPE_UNIVERSE }, "scope global"},
		{"host route with a source", "cali1", host, func(r *netlink.Route) { r.Src = net.ParseIP("192.168.0.9") }, "src 192.168.0.9"},
		{"host route with an MTU", "cali1", host, func(r *netlink.Route) { r.MTU = 1400 }, "mtu 1400"},
		{"host route of another protocol", "cali1", host, func(r *netlink.Route) { r.Protocol = unix.RTPROT_STATIC }, "proto 4"},
		{"overlay route without onlink", "vxlan.calico", gw, func(r *netlink.Route) { r.Flags = 0 }, "no onlink"},
		{"overlay route via another gateway", "vxlan.calico", gw, func(r *netlink.Route) { r.Gw = net.ParseIP("10.1.0.9") }, "via 10.1.0.9"},
		{"overlay route with a source", "vxlan.calico", gw, func(r *netlink.Route) { r.Src = net.ParseIP("192.168.0.9") }, "src 192.168.0.9"},
	}
}

// TestMismatchIsWhatTheTableRewrites: the route Spec.Route builds, as the
// RouteTable programs it, satisfies its target (Mismatch ""); each drift
// makes Mismatch name the attribute, and a resync rewrites exactly those
// routes back to what Mismatch accepts.
func TestMismatchIsWhatTheTableRewrites(t *testing.T) {
	spec := routes.Spec{IPVersion: 4, Protocol: routes.DefaultProtocol}
	for _, d := range drifts() {
		t.Run(d.name, func(t *testing.T) {
			f := newFixture(t, 4, nil)
			l := f.nl.AddLink(d.iface, true)
			if d.target.Type == routes.TypeGateway {
				// A connected route covers the gateway, as an address on
				// the device makes one: the route is valid without onlink.
				f.addForeign(netlink.Route{Dst: ipnet("10.1.0.0/24"), LinkIndex: l.Index, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL})
			}
			f.rt.SetRoutes(d.iface, []routes.Target{d.target})
			f.apply()
			r := f.route(d.target.CIDR)
			if m := spec.Mismatch(&r, d.target); m != "" {
				t.Fatalf("programmed route %s: Mismatch = %q, want \"\"", f.dump(), m)
			}
			d.change(&r)
			if err := f.nl.RouteReplace(&r); err != nil {
				t.Fatal(err)
			}
			r = f.route(d.target.CIDR)
			if m := spec.Mismatch(&r, d.target); m != d.want {
				t.Errorf("changed route: Mismatch = %q, want %q", m, d.want)
			}
			before := f.rt.Stats().Writes
			f.rt.QueueResync()
			f.apply()
			if f.rt.Stats().Writes == before {
				t.Errorf("the resync left the changed route alone: %s", f.dump())
			}
			r = f.route(d.target.CIDR)
			if m := spec.Mismatch(&r, d.target); m != "" {
				t.Errorf("after the resync: %s: Mismatch = %q", f.dump(), m)
			}
		})
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
