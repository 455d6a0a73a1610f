package diagnose

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/bgpmgr"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

// The BGP fakes' gateways: the peers' host IPs are on another subnet, so
// their next hops are resolved through this node's router on eth0.
var (
	fakeGW4 = netip.MustParseAddr("10.0.1.1")
	fakeGW6 = netip.MustParseAddr("fd00:1::1")
)

// bgpProgram turns n into a node running bgp with encapsulation none as
// routeletd programs it: no VXLAN device, no VTEP fields in any record,
// no overlay route, neighbour, FDB entry or allowlist, and every peer
// block routed "via <the router> dev eth0 proto 186", learned from BGP.
func bgpProgram(n *fakeNode) {
	n.cfg.Mode, n.cfg.BGP, n.cfg.BGPProgram, n.cfg.BGPRouteProtocol = overlay.ModeNone, true, true, bgpmgr.DefaultRouteProtocol
	for i := range n.st.nodes {
		r := &n.st.nodes[i]
		r.VTEPMAC, r.VTEPMACv6, r.TunnelIPv4, r.TunnelIPv6 = "", "", "", ""
	}
	n.k.links = slices.DeleteFunc(n.k.links, func(l Link) bool { return strings.HasPrefix(l.Name, "vxlan") })
	n.k.neighs[overlay.DeviceVXLAN+"/4"], n.k.neighs[overlay.DeviceVXLANv6+"/6"] = nil, nil
	n.k.fdb = map[string][]FDB{}
	n.k.sets = map[string][]netip.Prefix{}
	n.st.status.PodMTU, n.k.podMTU = 1500, 1500
	for v := range n.k.routes {
		n.k.routes[v] = slices.DeleteFunc(n.k.routes[v], func(r Route) bool { return strings.HasPrefix(r.Iface, "vxlan") })
	}
	for _, r := range n.st.nodes {
		if r.Name == "a" {
			continue
		}
		for _, s := range r.Blocks {
			b := netip.MustParsePrefix(s)
			v, gw := 4, fakeGW4
			if b.Addr().Is6() {
				v, gw = 6, fakeGW6
			}
			n.k.routes[v] = append(n.k.routes[v], Route{Dst: b, Iface: "eth0", Type: routes.TypeGateway.KernelType(), Gateway: gw, Protocol: bgpmgr.DefaultRouteProtocol})
		}
	}
}

// bgpDaemon makes the daemon's state endpoint serve n's peers (datastore
// etcd) with the bgp block and tables as the BGP manager fills them in:
// a mesh session per family to every peer, established, each announcing
// its blocks, all of them accepted and programmed.
func bgpDaemon(n *fakeNode) {
	fromEndpoint(n, "etcd")
	n.daemon.Node.Mode = string(overlay.ModeNone)
	bs := &statusapi.BGP{ASN: 64512, RouterID: fakeHost4.String(), Programmed: true, Converged: true,
		Announced: []string{fakeBlock4.String(), fakeBlock6.String()}}
	t4 := statusapi.RouteTable{Name: statusapi.TableBGPV4}
	t6 := statusapi.RouteTable{Name: statusapi.TableBGPV6}
	for _, p := range n.daemon.Peers {
		for _, h := range []string{p.HostIPv4, p.HostIPv6} {
			bs.Peers = append(bs.Peers, statusapi.BGPPeer{Address: h, ASN: 64512, Description: "mesh " + p.Name, State: "established",
				Since: fakeNow.Add(-10 * 60e9), Received: 1, Accepted: 1, Advertised: 1, EndOfRIB: true})
		}
		for _, s := range p.Blocks {
			b := netip.MustParsePrefix(s)
			if b.Addr().Is4() {
				t4.Routes = append(t4.Routes, statusapi.Route{Iface: "eth0", CIDR: s, Type: "gateway", Via: fakeGW4.String(), Desired: true, Programmed: true})
			} else {
				t6.Routes = append(t6.Routes, statusapi.Route{Iface: "eth0", CIDR: s, Type: "gateway", Via: fakeGW6.String(), Desired: true, Programmed: true})
			}
		}
		bs.Learned += 2
		bs.Accepted += 2
	}
	t4.Desired, t4.Programmed, t6.Desired, t6.Programmed = len(t4.Routes), len(t4.Routes), len(t6.Routes), len(t6.Routes)
	slices.SortFunc(bs.Peers, func(a, b statusapi.BGPPeer) int {
		return netip.MustParseAddr(a.Address).Compare(netip.MustParseAddr(b.Address))
	})
	n.daemon.BGP = bs
	n.daemon.Tables = append(n.daemon.Tables, t4, t6)
}

// bgpSession returns the daemon's session to address a.
func bgpSession(n *fakeNode, a string) *statusapi.BGPPeer {
	for i := range n.daemon.BGP.Peers {
		if n.daemon.BGP.Peers[i].Address == a {
			return &n.daemon.BGP.Peers[i]
		}
	}
	return nil
}

// dropBGPRoute deletes the kernel's and (with a daemon) the wanted route
// to block b.
func dropBGPRoute(n *fakeNode, b string) {
	p := netip.MustParsePrefix(b)
	v := familyOf(p.Addr())
	n.k.routes[v] = slices.DeleteFunc(n.k.routes[v], func(r Route) bool { return r.Dst == p })
	if n.daemon == nil {
		return
	}
	for i := range n.daemon.Tables {
		n.daemon.Tables[i].Routes = slices.DeleteFunc(n.daemon.Tables[i].Routes, func(r statusapi.Route) bool { return r.CIDR == b })
	}
}

func init() {
	const block1 = "10.100.1.0/24"
	goldenCases = append(goldenCases, []struct {
		name     string
		src, dst string
		breakIt  func(n *fakeNode)
		failing  []string
		opts     Options
	}{
		{name: "bgp-healthy", src: "demo/pod-0", dst: "10.100.1.5", breakIt: bgpProgram},
		{name: "bgp-daemon-healthy", src: "demo/pod-0", dst: "10.100.1.5", breakIt: func(n *fakeNode) { bgpProgram(n); bgpDaemon(n) }},
		{name: "bgp-daemon-healthy-node", src: "demo/pod-1", dst: "node-0002", breakIt: func(n *fakeNode) { bgpProgram(n); bgpDaemon(n) }},
		{name: "bgp-daemon-session-active", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4", "bgp-session/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				bgpDaemon(n)
				dropBGPRoute(n, block1)
				s := bgpSession(n, "10.1.0.2")
				s.State, s.Received, s.Accepted, s.Advertised, s.EndOfRIB = "active", 0, 0, 0, false
				s.LastError = "dial tcp 10.1.0.2:179: connect: connection refused"
			}},
		{name: "bgp-daemon-route-refused", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				bgpDaemon(n)
				dropBGPRoute(n, block1)
				n.daemon.BGP.RefusedNow = 1
				n.daemon.BGP.RefusedTotal = map[string]uint64{statusapi.BGPRefusedNextHopUnreachable: 1}
				n.daemon.BGP.Refused = []statusapi.BGPRefusal{{Prefix: block1, NextHop: "10.1.0.2", Peer: "10.1.0.2",
					Reason: statusapi.BGPRefusedNextHopUnreachable, Detail: "the next hop 10.1.0.2 is reached through eth1, not the uplink eth0", Since: fakeNow}}
			}},
		{name: "bgp-daemon-not-announced", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				bgpDaemon(n)
				dropBGPRoute(n, block1)
				s := bgpSession(n, "10.1.0.2")
				s.Received, s.Accepted = 0, 0
			}},
		{name: "bgp-daemon-no-session", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4", "bgp-session/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				bgpDaemon(n)
				dropBGPRoute(n, block1)
				n.daemon.BGP.Peers = slices.DeleteFunc(n.daemon.BGP.Peers, func(p statusapi.BGPPeer) bool { return p.Description == "mesh node-0001" })
			}},
		{name: "bgp-daemon-router-established", src: "demo/pod-0", dst: "10.100.1.5",
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				bgpDaemon(n)
				n.daemon.BGP.Peers = []statusapi.BGPPeer{{Address: "10.0.1.1", ASN: 65000, Description: "global", RouteReflector: true, State: "established",
					Since: fakeNow.Add(-60e9), Received: 6, Accepted: 6, Advertised: 2, EndOfRIB: true}}
			}},
		{name: "bgp-daemon-router-md5", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4", "bgp-session/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				bgpDaemon(n)
				dropBGPRoute(n, block1)
				n.daemon.BGP.Peers = []statusapi.BGPPeer{{Address: "10.0.1.1", ASN: 65000, Description: "global", State: "connect", Since: fakeNow.Add(-60e9)}}
			}},
		{name: "bgp-daemon-route-unwanted", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				bgpDaemon(n)
				for i := range n.daemon.Tables {
					n.daemon.Tables[i].Routes = slices.DeleteFunc(n.daemon.Tables[i].Routes, func(r statusapi.Route) bool { return r.CIDR == block1 })
				}
			}},
		{name: "bgp-daemon-down", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4", "bgp-session/4"},
			opts: Options{DaemonDown: "routeletd is not running"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				n.st.running, n.st.status.Ready, n.st.status.Reason = false, false, "routeletd stopped"
				dropBGPRoute(n, block1)
			}},
		{name: "bgp-route-overlay-leftover", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				dropBGPRoute(n, block1)
				n.k.routes[4] = append(n.k.routes[4], Route{Dst: netip.MustParsePrefix(block1), Iface: "eth0", Type: routes.TypeGateway.KernelType(), Gateway: netip.MustParseAddr("10.1.0.2"), Protocol: fakeProto})
			}},
		{name: "bgp-route-other-daemon", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"bgp-route/4"},
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				dropBGPRoute(n, block1)
				n.k.routes[4] = append(n.k.routes[4], Route{Dst: netip.MustParsePrefix(block1), Iface: "eth1", Type: routes.TypeGateway.KernelType(), Gateway: netip.MustParseAddr("10.9.0.1"), Protocol: bgpmgr.DefaultRouteProtocol})
			}},
		{name: "bgp-route-pool", src: "demo/pod-0", dst: "10.100.1.5",
			breakIt: func(n *fakeNode) {
				bgpProgram(n)
				dropBGPRoute(n, block1)
				n.k.routes[4] = append(n.k.routes[4], Route{Dst: netip.MustParsePrefix("10.100.0.0/16"), Iface: "eth0", Type: routes.TypeGateway.KernelType(), Gateway: fakeGW4, Protocol: bgpmgr.DefaultRouteProtocol})
			}},
		{name: "bgp-announce-only", src: "demo/pod-0", dst: "10.100.1.5",
			breakIt: func(n *fakeNode) { n.cfg.BGP = true }},
	}...)
}

// TestBGPStepsReplaceOverlayRoute: in program mode a remote node's path
// has the BGP steps and none of the overlay's (no route, device, VTEP,
// ARP, FDB or allowlist step), per family; announcing only, the overlay's
// steps stay and one Info step says BGP only announces.
func TestBGPStepsReplaceOverlayRoute(t *testing.T) {
	n := newFakeNode(3, 3)
	bgpProgram(n)
	bgpDaemon(n)
	rep, err := Run(n.cfg, n.st, n.k, "demo/pod-1", "node-0002", Options{Daemon: n.daemon})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range rep.Steps {
		count[s.ID]++
		if s.Status == Fail {
			t.Errorf("step %s IPv%d failed: %s; %s", s.ID, s.Family, s.Fact, s.Problem)
		}
	}
	for _, id := range []string{StepRoute, StepOverlayDevice, StepVTEP, StepVTEPARP, StepVTEPFDB, StepAllowlist, StepBGP} {
		if count[id] > 0 {
			t.Errorf("step %s shows in program mode", id)
		}
	}
	for id, want := range map[string]int{StepBGPRoute: 2, StepBGPSession: 2, StepPathMTU: 2} {
		if count[id] != want {
			t.Errorf("step %s shows %d times, want %d", id, count[id], want)
		}
	}

	n = newFakeNode(3, 3)
	n.cfg.BGP = true
	rep, err = Run(n.cfg, n.st, n.k, "demo/pod-1", "node-0002", Options{})
	if err != nil {
		t.Fatal(err)
	}
	count = map[string]int{}
	for _, s := range rep.Steps {
		count[s.ID]++
		if s.ID == StepBGP && (s.Status != Info || !strings.Contains(s.Fact, "announcing only")) {
			t.Errorf("bgp step %+v, want Info saying BGP only announces", s)
		}
	}
	if count[StepBGP] != 1 || count[StepBGPRoute] != 0 || count[StepBGPSession] != 0 || count[StepRoute] != 2 {
		t.Errorf("announcing only: steps %v, want one bgp step, the overlay's route steps and no BGP route or session step", count)
	}
}
