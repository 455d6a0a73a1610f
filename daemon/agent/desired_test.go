package agent

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// TestDesiredRoutes: the pure derivation of workload routes and blackholes,
// record checks and the choice between records claiming one address.
func TestDesiredRoutes(t *testing.T) {
	wl := func(cid, iface string, created time.Time, ips ...string) *state.Workload {
		return &state.Workload{ContainerID: cid, IfName: "eth0", HostIface: iface, IPs: ips, ContainerMAC: "02:00:00:00:00:01", Created: created}
	}
	blocks := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/120")}
	for _, tc := range []struct {
		name       string
		ws         map[string]*state.Workload
		links      map[string]string
		blocks     []netip.Prefix
		space      nodespace.Host
		v4, v6     map[string][]string // iface → CIDRs
		refused    map[string]string   // key → substring of why
		contested  map[string]string   // address → key
		superseded map[string]string   // key → the key owning its veth
	}{
		{name: "routes and blackholes",
			ws:     map[string]*state.Workload{"a": wl("a", "cali1", t0, "10.244.1.3/32", "10.244.1.2/32", "fd00:1::2/128")},
			links:  map[string]string{"cali1": "veth"},
			blocks: blocks,
			v4:     map[string][]string{"cali1": {"10.244.1.2/32", "10.244.1.3/32"}, routes.InterfaceNone: {"10.244.1.0/24"}},
			v6:     map[string][]string{"cali1": {"fd00:1::2/128"}, routes.InterfaceNone: {"fd00:1::/120"}}},
		{name: "refused records",
			ws: map[string]*state.Workload{
				"prefix":   wl("p", "eth0", t0, "10.244.1.2/32"),
				"bridge":   wl("b", "calibr", t0, "10.244.1.3/32"),
				"outside":  wl("o", "cali2", t0, "10.9.0.1/32"),
				"tunnel":   wl("t", "cali3", t0, "10.244.1.0/32"),
				"bcast":    wl("c", "cali4", t0, "10.244.1.255/32"),
				"special":  wl("s", "cali5", t0, "127.0.0.1/32"),
				"absentOK": wl("k", "cali6", t0, "10.244.1.6/32"),
			},
			links:  map[string]string{"calibr": "bridge"},
			blocks: blocks[:1],
			v4:     map[string][]string{"cali6": {"10.244.1.6/32"}, routes.InterfaceNone: {"10.244.1.0/24"}},
			refused: map[string]string{"prefix": "interface prefix", "bridge": "not a veth", "outside": "outside the node's blocks",
				"tunnel": "reserved", "bcast": "reserved", "special": "address 127.0.0.1 is in", "absentOK": ""}},
		{name: "family without blocks stays off the node's space",
			ws: map[string]*state.Workload{
				"ok":  wl("ok", "cali1", t0, "fd00:9::2/128"),
				"own": wl("own", "cali2", t0, "2001:db8::5/128"),
			},
			blocks:  blocks[:1],
			space:   nodespace.Host{Addrs: []netip.Prefix{netip.MustParsePrefix("2001:db8::1/64")}},
			v4:      map[string][]string{routes.InterfaceNone: {"10.244.1.0/24"}},
			v6:      map[string][]string{"cali1": {"fd00:9::2/128"}},
			refused: map[string]string{"own": "overlaps"}},
		{name: "live veth beats absent, then newer, then lower container ID",
			ws: map[string]*state.Workload{
				"stale": wl("z", "caliold", t0.Add(time.Hour), "10.244.1.2/32"),
				"live":  wl("y", "calilive", t0, "10.244.1.2/32"),
				"old":   wl("a", "cali1", t0, "10.244.1.3/32"),
				"new":   wl("b", "cali2", t0.Add(time.Second), "10.244.1.3/32"),
				"x1":    wl("x1", "cali3", t0, "10.244.1.4/32"),
				"x2":    wl("x2", "cali4", t0, "10.244.1.4/32"),
			},
			links:     map[string]string{"calilive": "veth", "cali1": "veth", "cali2": "veth", "cali3": "veth", "cali4": "veth"},
			blocks:    blocks[:1],
			v4:        map[string][]string{"calilive": {"10.244.1.2/32"}, "cali2": {"10.244.1.3/32"}, "cali3": {"10.244.1.4/32"}, routes.InterfaceNone: {"10.244.1.0/24"}},
			contested: map[string]string{"10.244.1.2": "live", "10.244.1.3": "new", "10.244.1.4": "x1"}},
		{name: "a veth's newest record owns it, whatever the keys",
			ws: map[string]*state.Workload{
				// A pod's sandbox made again: one veth name, the old
				// record's key sorting after the new one's.
				"zold": wl("zold", "cali1", t0, "10.244.1.2/32", "fd00:1::2/128"),
				"anew": wl("anew", "cali1", t0.Add(time.Second), "10.244.1.3/32"),
				// Created together: the lower container ID.
				"tb": wl("b", "cali2", t0, "10.244.1.4/32"),
				"ta": wl("a", "cali2", t0, "10.244.1.5/32"),
				// A refused owner leaves its veth without routes.
				"refnew": wl("rn", "cali3", t0.Add(time.Second), "10.9.0.1/32"),
				"refold": wl("ro", "cali3", t0, "10.244.1.6/32"),
				// Superseded on its veth, it claims no address elsewhere.
				"other": wl("o", "cali4", t0, "10.244.1.2/32"),
			},
			links:      map[string]string{"cali1": "veth", "cali2": "veth", "cali3": "veth", "cali4": "veth"},
			blocks:     blocks,
			v4:         map[string][]string{"cali1": {"10.244.1.3/32"}, "cali2": {"10.244.1.5/32"}, "cali4": {"10.244.1.2/32"}, routes.InterfaceNone: {"10.244.1.0/24"}},
			v6:         map[string][]string{routes.InterfaceNone: {"fd00:1::/120"}},
			refused:    map[string]string{"refnew": "outside the node's blocks"},
			superseded: map[string]string{"zold": "anew", "tb": "ta", "refold": "refnew"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DesiredRoutes(RouteInput{Workloads: tc.ws, Links: tc.links, LocalBlocks: tc.blocks, NodeSpace: tc.space,
				IfacePrefix: "cali", StaticARP: true})
			for fam, want := range []map[string][]string{tc.v4, tc.v6} {
				got := map[string][]string{}
				for iface, ts := range d.Routes[fam] {
					for _, tg := range ts {
						got[iface] = append(got[iface], tg.CIDR.String())
						if tg.Type == routes.TypeLink && fam == 0 && tg.DestMAC.String() != "02:00:00:00:00:01" {
							t.Errorf("%s %s: static ARP MAC %q", iface, tg.CIDR, tg.DestMAC)
						}
						if fam == 1 && (tg.Type == routes.TypeLink) != (iface != routes.InterfaceNone) || len(tg.DestMAC) > 0 && fam == 1 {
							t.Errorf("%s %s: unexpected target %+v", iface, tg.CIDR, tg)
						}
					}
				}
				if want == nil {
					want = map[string][]string{}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("IPv%d routes %v, want %v", 4+2*fam, got, want)
				}
			}
			for key, sub := range tc.refused {
				why, ok := d.Refused[key]
				if sub == "" {
					if ok {
						t.Errorf("%s refused: %s", key, why)
					}
					continue
				}
				if !ok || !strings.Contains(why, sub) {
					t.Errorf("%s: refused %v %q, want a reason with %q", key, ok, why, sub)
				}
			}
			got := map[string]string{}
			for a, k := range d.Contested {
				got[a.String()] = k
			}
			if tc.contested == nil {
				tc.contested = map[string]string{}
			}
			if !reflect.DeepEqual(got, tc.contested) {
				t.Errorf("contested %v, want %v", got, tc.contested)
			}
			if tc.superseded == nil {
				tc.superseded = map[string]string{}
			}
			if !reflect.DeepEqual(d.Superseded, tc.superseded) {
				t.Errorf("superseded %v, want %v", d.Superseded, tc.superseded)
			}
		})
	}
}
