package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
	"github.com/routelet/routelet/pkg/state"
)

// BenchmarkPassOneRecord measures one pass of the loop for one changed
// record among 200 served ones, up to the RouteTables' Apply: re-reading
// the record, deriving every desired route and setting them in the tables
// (real RouteTables on a fake kernel). It is the daemon's share of
// BenchmarkRecordToRoute (daemon/bench_test.go) before the kernel write.
func BenchmarkPassOneRecord(b *testing.B) {
	f := newFixture(b)
	for v, rt := range map[int]*RouteTable{4: &f.a.wl.rt4, 6: &f.a.wl.rt6} {
		t, err := routes.NewWithDeps(routes.Config{IPVersion: v, InterfacePrefixes: []string{"cali"}, IncludeNoInterface: true,
			Logger: slog.New(slog.DiscardHandler)}, routestest.NewFakeNetlink(), routestest.NewFakeConntrack(), nil)
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

// bench200 returns 200 dual-stack workload records on veths that exist.
func bench200() (map[string]*state.Workload, map[string]string) {
	ws, links := map[string]*state.Workload{}, map[string]string{}
	for i := range 200 {
		iface := fmt.Sprintf("cali%d", i)
		ws[fmt.Sprintf("c%d_eth0.json", i)] = &state.Workload{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", HostIface: iface,
			IPs: []string{fmt.Sprintf("10.244.1.%d/32", i+1), fmt.Sprintf("fd00:1::%x/128", i+1)}, ContainerMAC: "02:00:00:00:00:01"}
		links[iface] = "veth"
	}
	return ws, links
}

// BenchmarkDesiredRoutes200: one derivation of the desired routes from 200
// dual-stack records, what status, diagnose and the snapshot pay (a loop
// pass updates only the changed records: BenchmarkPassOneRecord).
func BenchmarkDesiredRoutes200(b *testing.B) {
	ws, links := bench200()
	in := RouteInput{Workloads: ws, Links: links, IfacePrefix: "cali", StaticARP: true,
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/120")}}
	b.ReportAllocs()
	for b.Loop() {
		DesiredRoutes(in)
	}
}

// BenchmarkKeeperVeths200: a pass that read one of 200 records again
// deriving its veth and handing the keeper that one (a fake keeper).
func BenchmarkKeeperVeths200(b *testing.B) {
	f := newFixture(b)
	f.setKeeper(&fakeKeeper{}, 0)
	ws, links := bench200()
	f.a.wl.workloads, f.a.wl.links = ws, links
	f.syncDesired()
	f.keeper.keeperVeths()
	b.ReportAllocs()
	for b.Loop() {
		w := *ws["c5_eth0.json"]
		ws["c5_eth0.json"] = &w
		f.keeper.keepKeys["c5_eth0.json"] = struct{}{}
		f.keeper.keeperVeths()
	}
}
