package diagnose

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/daemon/bgpmgr"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// TestBGPStepsRealKernel: in a namespace of its own, node a on the
// uplink ul (192.0.2.1/24) with peer b on another subnet, whose block
// has the route routeletd's BGP manager programs, "via 192.0.2.254 dev
// ul proto 186": diagnose in program mode reads it through netlink and
// passes bgp-route and path-mtu. The same block routed by routelet's own
// protocol fails bgp-route as not learned; with the route gone and the
// daemon's session to b in active, bgp-route and bgp-session fail naming
// the session and its last error.
func TestBGPStepsRealKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates a network namespace, links and routes")
	n := netnstest.NewT(t)
	if _, err := netnstest.AddVeth(n.Handle, "ul", "ul-peer"); err != nil {
		t.Fatal(err)
	}
	ul, err := n.Handle.LinkByName("ul")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Handle.AddrAdd(ul, &netlink.Addr{IPNet: netlinkNet("192.0.2.1/24")}); err != nil {
		t.Fatal(err)
	}
	block := netip.MustParsePrefix("10.100.1.0/24")
	gw := net.ParseIP("192.0.2.254")
	addRoute := func(proto int) {
		t.Helper()
		if err := n.Handle.RouteReplace(&netlink.Route{LinkIndex: ul.Attrs().Index, Dst: netlinkNet(block.String()), Gw: gw, Protocol: netlink.RouteProtocol(proto)}); err != nil {
			t.Fatal(err)
		}
	}
	addRoute(bgpmgr.DefaultRouteProtocol)

	cfg := Config{NodeName: "a", StateDir: "/run/routelet", IfacePrefix: "cali", RouteProtocol: routes.DefaultProtocol, Mode: overlay.ModeNone, Now: time.Now(),
		BGP: true, BGPProgram: true, BGPRouteProtocol: bgpmgr.DefaultRouteProtocol}
	st := &fakeState{running: true, wl: map[string]*state.Workload{},
		status: &state.DaemonStatus{Ready: true, PodMTU: 1500, Blocks: []string{"10.244.1.0/24"}, RouteProtocol: routes.DefaultProtocol},
		nodes: []peers.Record{
			{Name: "a", HostIPv4: "192.0.2.1", Blocks: []string{"10.244.1.0/24"}},
			{Name: "b", HostIPv4: "198.51.100.2", Blocks: []string{block.String()}},
		}}
	diagnose := func(opts Options) map[string]Step {
		t.Helper()
		var rep *Report
		if err := n.NetNS.Do(func(ns.NetNS) error {
			k, closeK, err := NewKernel(KernelOptions{RouteProtocol: routes.DefaultProtocol})
			if err != nil {
				return err
			}
			defer closeK()
			rep, err = Run(cfg, st, k, "a", "10.100.1.5", opts)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got := map[string]Step{}
		for _, s := range rep.Steps {
			got[s.ID] = s
			if s.ID == StepRoute {
				t.Errorf("the overlay's route step shows in program mode: %+v", s)
			}
		}
		return got
	}

	steps := diagnose(Options{})
	if s := steps[StepBGPRoute]; s.Status != Pass || s.Fact != "10.100.1.0/24 via 192.0.2.254 dev ul proto 186 (BGP)" {
		t.Errorf("bgp-route: %+v, want it passed on the kernel's learned route", s)
	}
	if s := steps[StepPathMTU]; s.Status != Pass || !strings.Contains(s.Fact, "ul 1500 (direct)") {
		t.Errorf("path-mtu: %+v, want it passed over ul", s)
	}

	addRoute(routes.DefaultProtocol)
	steps = diagnose(Options{})
	if s := steps[StepBGPRoute]; s.Status != Fail || !strings.Contains(s.Problem, "routelet's own (proto 80), not one learned from BGP") {
		t.Errorf("bgp-route with the overlay's route: %+v", s)
	}

	if err := n.Handle.RouteDel(&netlink.Route{LinkIndex: ul.Attrs().Index, Dst: netlinkNet(block.String()), Gw: gw, Protocol: routes.DefaultProtocol}); err != nil {
		t.Fatal(err)
	}
	d := &statusapi.State{Source: statusapi.SourceDaemon, Loop: true,
		Node:  statusapi.Node{Name: "a", HostIPv4: "192.0.2.1", LocalBlocks: []string{"10.244.1.0/24"}, PodMTU: 1500},
		Peers: []statusapi.Peer{{Name: "b", HostIPv4: "198.51.100.2", Blocks: []string{block.String()}}},
		BGP: &statusapi.BGP{ASN: 64512, Programmed: true, Converged: true, Peers: []statusapi.BGPPeer{{Address: "198.51.100.2", ASN: 64512,
			Description: "mesh b", State: "active", LastError: "dial tcp 198.51.100.2:179: i/o timeout"}}}}
	steps = diagnose(Options{Daemon: d})
	if s := steps[StepBGPRoute]; s.Status != Fail || !strings.Contains(s.Problem, "the session that should announce it is not established: 198.51.100.2 (mesh b, AS 64512): active") {
		t.Errorf("bgp-route without the route: %+v", s)
	}
	if s := steps[StepBGPSession]; s.Status != Fail || !strings.Contains(s.Fact, "i/o timeout") || !strings.Contains(s.Fix, "TCP MD5") {
		t.Errorf("bgp-session in active: %+v", s)
	}
}
