package routes_test

import (
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
)

// TestRouteUpdatesMatchSetRoutes: two tables on two fake kernels, one fed
// random single-route RouteUpdate/RouteRemove calls on three shared
// interfaces (CIDRs moving between them and contested by two at once), the
// other the same desired state through SetRoutes; after every Apply with
// nothing contested both kernels hold the same routes, and the first
// table's Apply (after its first, full one) read no routes.
func TestRouteUpdatesMatchSetRoutes(t *testing.T) {
	ifaces := []string{"vxlan.calico", "tunl0", "eth0"}
	newTable := func() (*routestest.FakeNetlink, *routes.RouteTable) {
		nl := routestest.NewFakeNetlink()
		for _, name := range ifaces {
			nl.AddLink(name, true)
		}
		rt, err := routes.NewWithDeps(routes.Config{IPVersion: 4, InterfaceNames: ifaces, Logger: slog.New(slog.DiscardHandler)}, nl, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		return nl, rt
	}
	inc, rtInc := newTable()
	full, rtFull := newTable()
	rng := rand.New(rand.NewPCG(7, 8))
	desired := map[string]map[netip.Prefix]routes.Target{}
	for _, name := range ifaces {
		desired[name] = map[netip.Prefix]routes.Target{}
	}
	for step := range 500 {
		for range 1 + rng.IntN(3) {
			name := ifaces[rng.IntN(len(ifaces))]
			cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(rng.IntN(20)), 0}), 24)
			if rng.IntN(3) == 0 {
				delete(desired[name], cidr)
				rtInc.RouteRemove(name, cidr)
				continue
			}
			tg := routes.Target{CIDR: cidr, Type: routes.TypeGateway, Gateway: netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rng.IntN(3))}), OnLink: true, MTU: 1400 + rng.IntN(2)}
			desired[name][cidr] = tg
			rtInc.RouteUpdate(name, tg)
		}
		// The other table gets the same state. Which interface wins a
		// contested CIDR depends on the order of the calls, so the
		// kernels are compared only when nothing is contested.
		for _, name := range ifaces {
			var ts []routes.Target
			for _, tg := range desired[name] {
				ts = append(ts, tg)
			}
			rtFull.SetRoutes(name, ts)
		}
		reads := inc.Calls("RouteList")
		if err := rtInc.Apply(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if err := rtFull.Apply(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if rtInc.Contested() > 0 || rtFull.Contested() > 0 {
			continue
		}
		if n := inc.Calls("RouteList") - reads; n != 0 && step > 0 {
			t.Fatalf("step %d: %d route reads for memory-only changes", step, n)
		}
		if a, b := inc.Dump(netlink.FAMILY_V4, 0), full.Dump(netlink.FAMILY_V4, 0); a != b {
			t.Fatalf("step %d: RouteUpdate/RouteRemove left\n%s\nSetRoutes left\n%s", step, a, b)
		}
	}
}
