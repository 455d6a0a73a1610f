package inspect

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// TestCompareBGP: the BGP tables own only the BGP protocol's routes on
// their interfaces: a desired route the kernel holds with that protocol
// is programmed, one held with routelet's own protocol is missing (that
// route is the overlay's, not the BGP table's), a BGP route nobody wants
// is unexpected; the peer whose block a learned route routes has path
// bgp and the route as its fact; the bgp block is the document's.
func TestCompareBGP(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	d := &Desired{
		Loop: true, Node: statusapi.Node{RouteProtocol: 80},
		BGP: &BGPWant{Status: statusapi.BGP{ASN: 64512, Programmed: true}, Protocol: 186, Families: []BGPFamily{
			{Version: 4, Routes: map[string][]routes.Target{"eth0": {
				{CIDR: p("10.244.2.0/24"), Type: routes.TypeGateway, Gateway: a("10.0.0.2")},
				{CIDR: p("10.244.3.0/24"), Type: routes.TypeGateway, Gateway: a("10.0.0.3")},
			}}},
			{Version: 6, Routes: map[string][]routes.Target{"eth0": {}}},
		}},
		Peers: []Peer{
			{NodeInfo: peers.NodeInfo{Name: "b", Blocks: []netip.Prefix{p("10.244.2.0/24")}}},
			{NodeInfo: peers.NodeInfo{Name: "c", Blocks: []netip.Prefix{p("10.244.3.0/24")}}},
		},
	}
	k := &Kernel{Links: map[string]Link{}, Routes: [2][]Route{{
		{Iface: "eth0", Dst: p("10.244.2.0/24"), Type: unix.RTN_UNICAST, Protocol: 186, Gateway: a("10.0.0.2")},
		{Iface: "eth0", Dst: p("10.244.3.0/24"), Type: unix.RTN_UNICAST, Protocol: 80, Gateway: a("10.0.0.3")},
		{Iface: "eth0", Dst: p("10.244.9.0/24"), Type: unix.RTN_UNICAST, Protocol: 186, Gateway: a("10.0.0.9")},
	}}}
	st := Compare(d, k, time.Now())
	if st.BGP == nil || st.BGP.ASN != 64512 {
		t.Fatalf("bgp block %+v", st.BGP)
	}
	var v4, v6 *statusapi.RouteTable
	for i := range st.Tables {
		switch st.Tables[i].Name {
		case statusapi.TableBGPV4:
			v4 = &st.Tables[i]
		case statusapi.TableBGPV6:
			v6 = &st.Tables[i]
		}
	}
	if v4 == nil || v6 == nil {
		t.Fatalf("tables %+v, want bgp-ipv4 and bgp-ipv6", st.Tables)
	}
	if v4.Desired != 2 || v4.Programmed != 1 || len(v4.Routes) != 3 || v4.Routes[2].CIDR != "10.244.9.0/24" || v4.Routes[2].Desired {
		t.Errorf("bgp-ipv4 %+v", v4)
	}
	b, c := st.Peers[0], st.Peers[1]
	if b.Path != statusapi.PathBGP || b.Device != "eth0" || !b.Routes.OK() || b.Routes.Fact != "10.244.2.0/24 via 10.0.0.2 dev eth0" {
		t.Errorf("peer b %+v", b)
	}
	if c.Path != statusapi.PathBGP || c.Routes.OK() || c.Routes.Fact != "10.244.3.0/24 via 10.0.0.3 dev eth0 missing" {
		t.Errorf("peer c %+v", c)
	}
}
