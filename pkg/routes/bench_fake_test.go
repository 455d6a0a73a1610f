package routes_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
)

// BenchmarkSetAllRoutesUnchanged measures what the daemon's loop pays on
// every pass that re-sets the whole table with nothing changed: 250
// workload interfaces with one host route and static ARP each, plus the
// blackholes (memory only, no kernel).
func BenchmarkSetAllRoutesUnchanged(b *testing.B) {
	rt, err := routes.NewWithDeps(routes.UsualConfig(4), routestest.NewFakeNetlink(), routestest.NewFakeConntrack(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	all := map[string][]routes.Target{routes.InterfaceNone: {{CIDR: netip.MustParsePrefix("10.244.0.0/16"), Type: routes.TypeBlackhole}}}
	for i := range 250 {
		all[fmt.Sprintf("cali%04d", i)] = []routes.Target{{
			CIDR:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i / 200), byte(10 + i%200)}), 32),
			DestMAC: []byte{2, 0, 0, 0, 0, 1},
		}}
	}
	rt.SetAllRoutes(all)
	b.ReportAllocs()
	for b.Loop() {
		if rt.SetAllRoutes(all) {
			b.Fatal("unchanged routes reported as a change")
		}
	}
}
