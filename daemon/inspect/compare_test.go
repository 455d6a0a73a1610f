package inspect

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
)

// TestCompareDirectPeerAndDrift: a peer routed directly over the parent
// is PathDirect; a kernel route with another gateway is not programmed
// and says what the kernel holds; a routelet route nobody wants is listed
// as unexpected; a missing blackhole is counted as not programmed.
func TestCompareDirectPeerAndDrift(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	d := &Desired{
		Loop: true, IfacePrefix: "cali", Node: statusapi.Node{RouteProtocol: 80},
		WorkloadRoutes: [2]map[string][]routes.Target{
			{routes.InterfaceNone: {{CIDR: p("10.244.1.0/24"), Type: routes.TypeBlackhole}}}, {},
		},
		Overlay: []OverlayFamily{{
			Version: 4,
			Routes: map[string][]routes.Target{
				"eth0":         {{CIDR: p("10.244.2.0/24"), Type: routes.TypeGateway, Gateway: a("10.0.0.2")}},
				"vxlan.calico": nil,
			},
			Devices: []DeviceWant{{Name: "vxlan.calico", Kind: "vxlan", MTU: 1450, MAC: "66:00:00:00:00:01"}},
		}},
		Peers: []Peer{{NodeInfo: peers.NodeInfo{Name: "b", IPv4: peers.Endpoint{HostIP: a("10.0.0.2")}, Blocks: []netip.Prefix{p("10.244.2.0/24")}}}},
	}
	k := &Kernel{
		Links: map[string]Link{
			"eth0":         {Index: 2, Name: "eth0", Kind: "veth", Up: true, MTU: 1500},
			"vxlan.calico": {Index: 3, Name: "vxlan.calico", Kind: "vxlan", Up: false, MTU: 1400, MAC: "66:00:00:00:00:01"},
		},
		Routes: [2][]Route{{
			{Iface: "eth0", Dst: p("10.244.2.0/24"), Type: unix.RTN_UNICAST, Protocol: 80, Gateway: a("10.0.0.9")},
			{Iface: "vxlan.calico", Dst: p("10.244.9.0/24"), Type: unix.RTN_UNICAST, Protocol: 80},
			{Iface: "eth0", Dst: p("192.168.0.0/16"), Type: unix.RTN_UNICAST, Protocol: unix.RTPROT_STATIC}, // not routelet's
		}},
	}
	st := Compare(d, k, time.Now())
	if len(st.Peers) != 1 {
		t.Fatalf("peers = %+v", st.Peers)
	}
	b := st.Peers[0]
	if b.Path != statusapi.PathDirect || b.Device != "eth0" || !b.Routes.Wanted || b.Routes.Present || b.Routes.Fact != "10.244.2.0/24 dev eth0: kernel has via 10.0.0.9" {
		t.Errorf("peer b = %+v", b)
	}
	if b.ARP.Wanted || b.FDB.Wanted || b.Allowlist.Wanted {
		t.Errorf("peer b wants L2 or allowlist entries without VXLAN or an allowlist: %+v", b)
	}
	tables := map[string]statusapi.RouteTable{}
	for _, tb := range st.Tables {
		tables[tb.Name] = tb
	}
	if w := tables[statusapi.TableWorkloadsV4]; w.Desired != 1 || w.Programmed != 0 || len(w.Routes) != 1 || w.Routes[0].Type != "blackhole" {
		t.Errorf("workloads-ipv4 = %+v", w)
	}
	o := tables[statusapi.TableOverlayV4]
	if o.Desired != 1 || o.Programmed != 0 || len(o.Routes) != 2 {
		t.Fatalf("overlay-ipv4 = %+v", o)
	}
	if u := o.Routes[1]; u.Desired || !u.Programmed || u.CIDR != "10.244.9.0/24" || u.Iface != "vxlan.calico" {
		t.Errorf("unexpected route = %+v", u)
	}
	if len(st.Devices) != 1 || st.Devices[0].Problem != "down; mtu 1400, want 1450" {
		t.Errorf("devices = %+v", st.Devices)
	}
}

// TestCompareCallsDriftWrong: a route the route table would not leave as
// it is — same destination and device as the desired one, but drifted in
// one attribute the table compares (routestest.Drifts: protocol, source,
// MTU, IPv4 scope, gateway, onlink) — is not programmed, and the row says
// what the kernel has; the route as the table writes it is programmed.
func TestCompareCallsDriftWrong(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	links := map[string]Link{
		"cali1":        {Index: 7, Name: "cali1", Kind: "veth", Up: true, MTU: 1450},
		"vxlan.calico": {Index: 3, Name: "vxlan.calico", Kind: "vxlan", Up: true, MTU: 1450},
	}
	for _, c := range []struct {
		v      int
		iface  string
		table  string
		target routes.Target
	}{
		{4, "cali1", statusapi.TableWorkloadsV4, routes.Target{CIDR: p("10.244.1.5/32")}},
		{6, "cali1", statusapi.TableWorkloadsV6, routes.Target{CIDR: p("fd00:244:1::5/128")}},
		{4, "vxlan.calico", statusapi.TableOverlayV4, routes.Target{CIDR: p("10.244.2.0/24"), Type: routes.TypeGateway, Gateway: a("10.244.2.0"), OnLink: true, MTU: 1450}},
	} {
		spec := routes.Spec{IPVersion: c.v, Protocol: 80}
		fam := famIndex(c.v)
		desired := func() *Desired {
			d := &Desired{Loop: true, IfacePrefix: "cali", Node: statusapi.Node{RouteProtocol: 80},
				WorkloadRoutes: [2]map[string][]routes.Target{{}, {}}}
			if c.iface == "cali1" {
				d.WorkloadRoutes[fam][c.iface] = []routes.Target{c.target}
			} else {
				d.Overlay = []OverlayFamily{{Version: c.v, Routes: map[string][]routes.Target{c.iface: {c.target}}}}
			}
			return d
		}
		row := func(kr netlink.Route) statusapi.Route {
			k := &Kernel{Links: links}
			k.Routes[fam] = []Route{RouteOf(&kr, c.v, c.iface)}
			for _, tb := range Compare(desired(), k, time.Now()).Tables {
				if tb.Name != c.table {
					continue
				}
				for _, r := range tb.Routes {
					if r.Desired && r.CIDR == c.target.CIDR.String() {
						return r
					}
				}
			}
			t.Fatalf("no desired row for %s in %s", c.target.CIDR, c.table)
			return statusapi.Route{}
		}
		written := spec.Route(c.target, links[c.iface].Index)
		if r := row(written); !r.Programmed || r.Kernel != "" {
			t.Errorf("%s dev %s as the table writes it: %+v, want programmed", c.target.CIDR, c.iface, r)
		}
		for _, d := range routestest.Drifts(c.target, c.v) {
			kr := spec.Route(c.target, links[c.iface].Index)
			d.Change(&kr)
			r := row(kr)
			want := d.Want
			if d.Disowns && c.iface == "vxlan.calico" {
				want = "" // not routelet's on a shared device: the desired route is missing
			}
			if r.Programmed || r.Kernel != want {
				t.Errorf("%s dev %s with %s: programmed %v, kernel %q; want not programmed, kernel %q", c.target.CIDR, c.iface, d.Name, r.Programmed, r.Kernel, want)
			}
		}
	}
}
