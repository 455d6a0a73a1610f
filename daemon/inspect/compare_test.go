package inspect

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/debugapi"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// TestCompareDirectPeerAndDrift: a peer routed directly over the parent
// is PathDirect; a kernel route with another gateway is not programmed
// and says what the kernel holds; a routelet route nobody wants is listed
// as unexpected; a missing blackhole is counted as not programmed.
func TestCompareDirectPeerAndDrift(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	d := &Desired{
		Loop: true, IfacePrefix: "cali", Node: debugapi.Node{RouteProtocol: 80},
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
	if b.Path != debugapi.PathDirect || b.Device != "eth0" || !b.Routes.Wanted || b.Routes.Present || b.Routes.Fact != "10.244.2.0/24 dev eth0: kernel has via 10.0.0.9" {
		t.Errorf("peer b = %+v", b)
	}
	if b.ARP.Wanted || b.FDB.Wanted || b.Allowlist.Wanted {
		t.Errorf("peer b wants L2 or allowlist entries without VXLAN or an allowlist: %+v", b)
	}
	tables := map[string]debugapi.RouteTable{}
	for _, tb := range st.Tables {
		tables[tb.Name] = tb
	}
	if w := tables[debugapi.TableWorkloadsV4]; w.Desired != 1 || w.Programmed != 0 || len(w.Routes) != 1 || w.Routes[0].Type != "blackhole" {
		t.Errorf("workloads-ipv4 = %+v", w)
	}
	o := tables[debugapi.TableOverlayV4]
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
