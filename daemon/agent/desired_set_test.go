package agent

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/state"
)

// TestDesiredSetMatchesDesiredRoutes drives random sequences of record
// additions, changes and removals and of link changes through desiredSet
// and checks after every step that it equals DesiredRoutes over the same
// input from scratch, and that the interfaces it reports changed are
// exactly those whose routes differ from the step before.
func TestDesiredSetMatchesDesiredRoutes(t *testing.T) {
	blocks := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/120")}
	for _, cfg := range []struct {
		name   string
		blocks []netip.Prefix
		space  nodespace.Host
	}{
		{name: "both families", blocks: blocks},
		{name: "IPv6 without blocks", blocks: blocks[:1], space: nodespace.Host{Addrs: []netip.Prefix{netip.MustParsePrefix("fd00:1::1/120")}}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
			// A record's key names its container and interface (the
			// source checks the record belongs under its key), so no two
			// records tie in beats.
			record := func(cid, ifName string) *state.Workload {
				w := &state.Workload{ContainerID: cid, IfName: ifName,
					HostIface:    pick("cali1", "cali2", "cali3", "cali4", "eth0", "calibr"),
					ContainerMAC: pick("02:00:00:00:00:01", "02:00:00:00:00:02", "bogus"), Created: t0.Add(time.Duration(rng.IntN(3)) * time.Second)}
				for range rng.IntN(4) {
					w.IPs = append(w.IPs, pick("10.244.1.2/32", "10.244.1.3/32", "10.244.1.4/32", "10.244.1.0/32", "10.9.0.1/32",
						"fd00:1::2/128", "fd00:1::3/128", "fd00:1::1/128", "fd00:9::2/128", "127.0.0.1/32"))
				}
				return w
			}
			in := RouteInput{Workloads: map[string]*state.Workload{}, Links: map[string]string{}, LocalBlocks: cfg.blocks, NodeSpace: cfg.space,
				IfacePrefix: "cali", StaticARP: true}
			s, _ := newDesiredSet(in)
			prev := DesiredRoutes(in)
			for step := range 4000 {
				keys, links := map[string]struct{}{}, map[string]struct{}{}
				for range 1 + rng.IntN(3) {
					if rng.IntN(4) == 0 {
						name := pick("cali1", "cali2", "cali3", "cali4", "calibr")
						if _, ok := in.Links[name]; ok && rng.IntN(2) == 0 {
							delete(in.Links, name)
						} else {
							in.Links[name] = pick("veth", "veth", "bridge")
						}
						links[name] = struct{}{}
						continue
					}
					cid, ifName := pick("a", "b", "c", "d"), pick("eth0", "eth0", "net1")
					key := cid + "_" + ifName
					if _, ok := in.Workloads[key]; ok && rng.IntN(3) == 0 {
						delete(in.Workloads, key)
					} else {
						in.Workloads[key] = record(cid, ifName)
					}
					keys[key] = struct{}{}
				}
				delta := s.update(keys, links)
				want := DesiredRoutes(in)
				if !reflect.DeepEqual(s.d, want) {
					t.Fatalf("step %d: incremental\n%+v\nwant\n%+v", step, s.d, want)
				}
				for fam := range want.Routes {
					var changed []string
					for iface := range want.Routes[fam] {
						if !reflect.DeepEqual(want.Routes[fam][iface], prev.Routes[fam][iface]) {
							changed = append(changed, iface)
						}
					}
					for iface := range prev.Routes[fam] {
						if _, ok := want.Routes[fam][iface]; !ok {
							changed = append(changed, iface)
						}
					}
					slices.Sort(changed)
					if !slices.Equal(delta.ifaces[fam], changed) {
						t.Fatalf("step %d: family %d: changed interfaces %v, want %v", step, fam, delta.ifaces[fam], changed)
					}
				}
				prev = want
			}
		})
	}
}
