package agent

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/routelet/routelet/pkg/routes"
)

// BenchmarkPassOneRecord measures one pass of the loop for one changed
// record among 200 served ones, up to the RouteTables' Apply: re-reading
// the record, deriving every desired route and setting them in the tables
// (real RouteTables on a fake kernel). It is the daemon's share of
// BenchmarkRecordToRoute (daemon/bench_test.go) before the kernel write.
func BenchmarkPassOneRecord(b *testing.B) {
	f := newFixture(b)
	for v, rt := range map[int]*RouteTable{4: &f.a.rt4, 6: &f.a.rt6} {
		t, err := routes.NewWithDeps(routes.Config{IPVersion: v, InterfacePrefixes: []string{"cali"}, IncludeNoInterface: true,
			Logger: slog.New(slog.DiscardHandler)}, routes.NewFakeNetlink(), routes.NewFakeConntrack(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer t.Close()
		*rt = t
	}
	for i := range 200 {
		iface := fmt.Sprintf("cali%d", i)
		f.put(b, fmt.Sprintf("c%d", i), iface, fmt.Sprintf("10.244.1.%d/32", i+1))
		f.host.links[iface] = true
	}
	f.a.fullSync()
	b.ReportAllocs()
	for b.Loop() {
		f.a.NotifyWorkload("c5_eth0.json")
		f.a.processPending()
	}
}
