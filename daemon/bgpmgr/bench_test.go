package bgpmgr

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/routelet/routelet/pkg/bgp"
	"github.com/routelet/routelet/pkg/peers"
)

// BenchmarkRecheck1000 is one pass's checks over 1000 learned routes, one
// per node of a 1000-node mesh, every next hop resolved already and
// nothing changed: the cost of a speaker read that finds nothing new.
func BenchmarkRecheck1000(b *testing.B) {
	f := newFixture(&testing.T{}, func(c *Config) { c.Subnets = nil })
	var nodes []peers.NodeInfo
	var learned []bgp.Route
	for i := range 1000 {
		host := netip.AddrFrom4([4]byte{198, 51, byte(100 + i/250), byte(1 + i%250)})
		block := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i/256), byte(i % 256), 0}), 24)
		nodes = append(nodes, peers.NodeInfo{Name: fmt.Sprintf("node-%04d", i), IPv4: peers.Endpoint{HostIP: host},
			Blocks: []netip.Prefix{block}, BGP: peers.BGPNode{ASN: 64512}})
		learned = append(learned, bgp.Route{Prefix: block, NextHop: host, Peer: host})
	}
	f.m.cfg.Resolve = func(netip.Addr) (netip.Addr, string, error) { return a("192.0.2.254"), uplink, nil }
	f.m.OnNodes(nodes)
	f.m.learned = learned
	f.m.updateRoutes()
	if f.m.accepted != 1000 {
		b.Fatalf("accepted %d of 1000", f.m.accepted)
	}
	b.ReportAllocs()
	for b.Loop() {
		f.m.updateRoutes()
	}
}
