package inspect

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/routes"
)

// Compare joins d and k into the endpoint's document, taken at now.
func Compare(d *Desired, k *Kernel, now time.Time) *statusapi.State {
	st := &statusapi.State{
		Taken: now.UTC(), Loop: d.Loop, Node: d.Node, Readiness: d.Readiness, Datastore: d.Datastore,
		Blocks: nonNil(d.Blocks), Errors: nonNil(d.Errors), LastResync: d.LastResync, Repairs: nonNil(d.Repairs), WireGuard: d.WireGuard,
		Tables: []statusapi.RouteTable{}, Devices: []statusapi.Device{}, Peers: []statusapi.Peer{}, Workloads: []statusapi.Workload{},
	}
	if !d.Loop && d.Workloads == nil && d.Peers == nil {
		return st
	}
	c := comparer{d: d, k: k, held: map[routeKey]statusapi.Route{}}
	for i, name := range []string{statusapi.TableWorkloadsV4, statusapi.TableWorkloadsV6} {
		st.Tables = append(st.Tables, c.table(name, i, d.WorkloadRoutes[i], c.ownedByWorkloads, nil, d.Node.RouteProtocol))
	}
	owner := c.blockOwners()
	for _, f := range d.Overlay {
		name := statusapi.TableOverlayV4
		if f.Version == 6 {
			name = statusapi.TableOverlayV6
		}
		owned := func(r Route) bool { _, ok := f.Routes[r.Iface]; return ok && r.Protocol == d.Node.RouteProtocol }
		st.Tables = append(st.Tables, c.table(name, famIndex(f.Version), f.Routes, owned, owner, d.Node.RouteProtocol))
		st.Devices = append(st.Devices, c.devices(f)...)
	}
	if b := d.BGP; b != nil {
		status := b.Status
		st.BGP = &status
		for _, f := range b.Families {
			owned := func(r Route) bool { _, ok := f.Routes[r.Iface]; return ok && r.Protocol == b.Protocol }
			st.Tables = append(st.Tables, c.table(bgpTable(f.Version), famIndex(f.Version), f.Routes, owned, owner, b.Protocol))
		}
	}
	st.Peers = c.peers()
	st.Workloads = c.workloads()
	return st
}

// nonNil returns s, or an empty slice for nil (so JSON says [] not null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

type routeKey struct {
	table string
	iface string
	cidr  netip.Prefix
}

type comparer struct {
	d *Desired
	k *Kernel
	// held is every desired route with what the kernel holds for it.
	held map[routeKey]statusapi.Route
}

// ownedByWorkloads reports the kernel routes the workload tables own:
// every route on a workload interface (but IPv6 link-local ones, the
// kernel's), and routelet-protocol routes without an interface.
func (c *comparer) ownedByWorkloads(r Route) bool {
	switch {
	case r.Iface == routes.InterfaceNone:
		return r.Protocol == c.d.Node.RouteProtocol
	case c.d.IfacePrefix == "" || !strings.HasPrefix(r.Iface, c.d.IfacePrefix):
		return false
	}
	return !(r.Dst.Addr().Is6() && (r.Dst.Addr().IsLinkLocalUnicast() || r.Dst.Addr().IsMulticast()))
}

// blockOwners maps every peer block to its peer's name.
func (c *comparer) blockOwners() map[netip.Prefix]string {
	out := map[netip.Prefix]string{}
	for _, p := range c.d.Peers {
		for _, b := range p.Blocks {
			out[b] = p.Name
		}
	}
	return out
}

// bgpTable names the BGP table of family v.
func bgpTable(v int) string {
	if v == 6 {
		return statusapi.TableBGPV6
	}
	return statusapi.TableBGPV4
}

// table compares the desired routes of one table with the kernel routes
// of family index fam that owned accepts; protocol is the one the
// table's routes carry.
func (c *comparer) table(name string, fam int, want map[string][]routes.Target, owned func(Route) bool, owner map[netip.Prefix]string, protocol int) statusapi.RouteTable {
	type key struct {
		iface string
		dst   netip.Prefix
	}
	have := map[key]Route{}
	for _, r := range c.k.Routes[fam] {
		if owned(r) {
			have[key{r.Iface, r.Dst}] = r
		}
	}
	t := statusapi.RouteTable{Name: name, Routes: []statusapi.Route{}}
	matched := map[key]bool{}
	for _, iface := range slices.Sorted(maps.Keys(want)) {
		for _, tg := range want[iface] {
			rt := statusapi.Route{Iface: ifaceName(iface), CIDR: tg.CIDR.String(), Type: tg.Type.String(), MTU: tg.MTU,
				Peer: owner[tg.CIDR.Masked()], Desired: true}
			if tg.Gateway.IsValid() {
				rt.Via = tg.Gateway.String()
			}
			t.Desired++
			kk := key{iface, tg.CIDR.Masked()}
			if r, ok := have[kk]; ok {
				matched[kk] = true
				if diff := r.Mismatch(tg, protocol); diff == "" {
					rt.Programmed = true
					t.Programmed++
				} else {
					rt.Kernel = diff
				}
			}
			c.held[routeKey{name, iface, tg.CIDR.Masked()}] = rt
			t.Routes = append(t.Routes, rt)
		}
	}
	for kk, r := range have {
		if matched[kk] {
			continue
		}
		rt := statusapi.Route{Iface: ifaceName(r.Iface), CIDR: r.Dst.String(), Type: routes.RTMTypeName(r.Type), MTU: r.MTU,
			Peer: owner[r.Dst], Programmed: true, Kernel: describe(r)}
		if r.Gateway.IsValid() {
			rt.Via = r.Gateway.String()
		}
		t.Routes = append(t.Routes, rt)
	}
	slices.SortFunc(t.Routes, func(a, b statusapi.Route) int {
		return cmp.Or(cmp.Compare(a.Iface, b.Iface), cmp.Compare(a.CIDR, b.CIDR))
	})
	return t
}

// describe is a kernel route the way `ip route` shows its key facts.
func describe(r Route) string {
	s := fmt.Sprintf("%s %s proto %d", routes.RTMTypeName(r.Type), r.Dst, r.Protocol)
	if r.Gateway.IsValid() {
		s += " via " + r.Gateway.String()
	}
	return s
}

// ifaceName is "" for routes.InterfaceNone.
func ifaceName(iface string) string {
	if iface == routes.InterfaceNone {
		return ""
	}
	return iface
}

// devices compares a family's overlay devices with the links.
func (c *comparer) devices(f OverlayFamily) []statusapi.Device {
	var out []statusapi.Device
	for _, w := range f.Devices {
		d := statusapi.Device{Name: w.Name, Kind: w.Kind, Family: f.Version, WantMTU: w.MTU, WantMAC: w.MAC}
		l, ok := c.k.Links[w.Name]
		var why []string
		if !ok {
			why = append(why, "missing")
		} else {
			d.Exists, d.Up, d.MTU, d.MAC = true, l.Up, l.MTU, l.MAC
			if l.Kind != w.Kind {
				why = append(why, fmt.Sprintf("kind %s, want %s", l.Kind, w.Kind))
			}
			if !l.Up {
				why = append(why, "down")
			}
			if w.MTU != 0 && l.MTU != w.MTU {
				why = append(why, fmt.Sprintf("mtu %d, want %d", l.MTU, w.MTU))
			}
			if w.MAC != "" && !strings.EqualFold(l.MAC, w.MAC) {
				why = append(why, fmt.Sprintf("mac %s, want %s", l.MAC, w.MAC))
			}
		}
		d.Problem = strings.Join(why, "; ")
		if w.Kind == "ipip" {
			d.MAC, d.WantMAC = "", ""
		}
		out = append(out, d)
	}
	return out
}

// peers builds each peer's row.
func (c *comparer) peers() []statusapi.Peer {
	out := make([]statusapi.Peer, 0, len(c.d.Peers))
	neighs := map[string]map[netip.Addr]Neigh{}
	fdbs := map[string]map[string]netip.Addr{}
	for dev, ns := range c.k.Neighs {
		m := map[netip.Addr]Neigh{}
		for _, n := range ns {
			m[n.IP] = n
		}
		neighs[dev] = m
	}
	for dev, es := range c.k.FDB {
		m := map[string]netip.Addr{}
		for _, e := range es {
			m[e.MAC] = e.Dst
		}
		fdbs[dev] = m
	}
	sets := map[string]map[netip.Prefix]bool{}
	for name, ms := range c.k.Sets {
		m := map[netip.Prefix]bool{}
		for _, p := range ms {
			m[p] = true
		}
		sets[name] = m
	}
	sorted := slices.Clone(c.d.Peers)
	slices.SortFunc(sorted, func(a, b Peer) int { return cmp.Compare(a.Name, b.Name) })
	for _, p := range sorted {
		row := statusapi.Peer{Name: p.Name, Blocks: []string{}, Path: statusapi.PathNone, LastChange: p.LastChange, Problem: p.Problem}
		if p.IPv4.HostIP.IsValid() {
			row.HostIPv4 = p.IPv4.HostIP.String()
		}
		if p.IPv6.HostIP.IsValid() {
			row.HostIPv6 = p.IPv6.HostIP.String()
		}
		for _, b := range p.Blocks {
			row.Blocks = append(row.Blocks, b.String())
		}
		row.VTEPMAC, row.TunnelIPv4 = macString(p.IPv4.VTEPMAC), addrString(p.IPv4.TunnelAddr)
		row.VTEPMACv6, row.TunnelIPv6 = macString(p.IPv6.VTEPMAC), addrString(p.IPv6.TunnelAddr)
		if c.d.Datastore.Liveness {
			live := slices.Contains(c.d.Datastore.Live, p.Name)
			row.Live = &live
		}
		var routeFacts, arpFacts, fdbFacts, allowFacts []string
		var problems []string
		if p.Problem != "" {
			problems = append(problems, p.Problem)
		}
		row.Routes.Present, row.ARP.Present, row.FDB.Present, row.Allowlist.Present = true, true, true, true
		for _, f := range c.d.Overlay {
			prefix := "peer " + p.Name + ":"
			for _, pr := range f.Problems {
				if strings.HasPrefix(pr, prefix) {
					problems = append(problems, strings.TrimSpace(strings.TrimPrefix(pr, prefix)))
				}
			}
			table := statusapi.TableOverlayV4
			if f.Version == 6 {
				table = statusapi.TableOverlayV6
			}
			for _, b := range p.BlocksOf(f.Version) {
				for _, iface := range slices.Sorted(maps.Keys(f.Routes)) {
					rt, ok := c.held[routeKey{table, iface, b}]
					if !ok {
						continue
					}
					row.Routes.Wanted = true
					if row.Device == "" {
						row.Device = iface
						row.Path = statusapi.PathDirect
						if slices.ContainsFunc(f.Devices, func(d DeviceWant) bool { return d.Name == iface }) {
							row.Path = statusapi.PathOverlay
						}
					}
					if rt.Programmed {
						routeFacts = append(routeFacts, b.String()+" dev "+iface)
					} else {
						row.Routes.Present = false
						fact := b.String() + " dev " + iface + " missing"
						if rt.Kernel != "" {
							fact = b.String() + " dev " + iface + ": kernel has " + rt.Kernel
						}
						routeFacts = append(routeFacts, fact)
					}
				}
			}
			ep := p.Endpoint(f.Version)
			if f.VXLANDevice != "" && ep.TunnelAddr.IsValid() {
				if mac, ok := f.ARP[ep.TunnelAddr]; ok && mac.String() == ep.VTEPMAC.String() {
					row.ARP.Wanted = true
					n, found := neighs[f.VXLANDevice][ep.TunnelAddr]
					switch {
					case !found:
						row.ARP.Present = false
						arpFacts = append(arpFacts, fmt.Sprintf("%s missing on %s", ep.TunnelAddr, f.VXLANDevice))
					case !strings.EqualFold(n.MAC, mac.String()) || n.State&unix.NUD_PERMANENT == 0:
						row.ARP.Present = false
						arpFacts = append(arpFacts, fmt.Sprintf("%s lladdr %s %s, want %s PERMANENT", ep.TunnelAddr, n.MAC, nudState(n.State), mac))
					default:
						arpFacts = append(arpFacts, fmt.Sprintf("%s lladdr %s PERMANENT", ep.TunnelAddr, n.MAC))
					}
				}
				if dst, ok := f.FDB[ep.VTEPMAC.String()]; ok && dst == ep.HostIP {
					row.FDB.Wanted = true
					got, found := fdbs[f.VXLANDevice][ep.VTEPMAC.String()]
					switch {
					case !found:
						row.FDB.Present = false
						fdbFacts = append(fdbFacts, fmt.Sprintf("%s missing on %s", ep.VTEPMAC, f.VXLANDevice))
					case got != dst:
						row.FDB.Present = false
						fdbFacts = append(fdbFacts, fmt.Sprintf("%s dst %s, want %s", ep.VTEPMAC, got, dst))
					default:
						fdbFacts = append(fdbFacts, fmt.Sprintf("%s dst %s", ep.VTEPMAC, got))
					}
				}
			}
		}
		if b := c.d.BGP; b != nil {
			// The routes learned from BGP to the peer's blocks (those
			// announced as the blocks themselves).
			for _, f := range b.Families {
				table := bgpTable(f.Version)
				for _, blk := range p.BlocksOf(f.Version) {
					for _, iface := range slices.Sorted(maps.Keys(f.Routes)) {
						rt, ok := c.held[routeKey{table, iface, blk}]
						if !ok {
							continue
						}
						row.Routes.Wanted = true
						if row.Device == "" {
							row.Device, row.Path = iface, statusapi.PathBGP
						}
						fact := blk.String() + " via " + rt.Via + " dev " + iface
						switch {
						case rt.Programmed:
						case rt.Kernel != "":
							row.Routes.Present = false
							fact += ": kernel has " + rt.Kernel
						default:
							row.Routes.Present = false
							fact += " missing"
						}
						routeFacts = append(routeFacts, fact)
					}
				}
			}
		}
		if c.d.Allowlist != "" {
			for _, a := range p.HostIPs() {
				name := c.d.Allowlist
				if a.Is6() {
					name = ipset.Name(name, ipset.IPv6)
				}
				row.Allowlist.Wanted = true
				if sets[name][netip.PrefixFrom(a, a.BitLen())] {
					allowFacts = append(allowFacts, a.String()+" in "+name)
				} else {
					row.Allowlist.Present = false
					allowFacts = append(allowFacts, a.String()+" not in "+name)
				}
			}
		}
		for _, ch := range []*statusapi.Check{&row.Routes, &row.ARP, &row.FDB, &row.Allowlist} {
			if !ch.Wanted {
				ch.Present = false
			}
		}
		row.Routes.Fact = strings.Join(routeFacts, "; ")
		row.ARP.Fact = strings.Join(arpFacts, "; ")
		row.FDB.Fact = strings.Join(fdbFacts, "; ")
		row.Allowlist.Fact = strings.Join(allowFacts, "; ")
		row.Problem = strings.Join(problems, "; ")
		out = append(out, row)
	}
	return out
}

// nudState names the NUD bits that matter here.
func nudState(s int) string {
	switch {
	case s&unix.NUD_PERMANENT != 0:
		return "PERMANENT"
	case s&unix.NUD_REACHABLE != 0:
		return "REACHABLE"
	case s&unix.NUD_STALE != 0:
		return "STALE"
	case s&unix.NUD_FAILED != 0:
		return "FAILED"
	case s&unix.NUD_NOARP != 0:
		return "NOARP"
	}
	return fmt.Sprintf("state %#x", s)
}

// workloads builds each workload record's row.
func (c *comparer) workloads() []statusapi.Workload {
	out := make([]statusapi.Workload, 0, len(c.d.Workloads)+len(c.d.Refused))
	keys := slices.Collect(maps.Keys(c.d.Workloads))
	for k := range c.d.Refused {
		if _, ok := c.d.Workloads[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		w := c.d.Workloads[key]
		row := statusapi.Workload{Key: key, Refused: c.d.Refused[key], IPs: []string{}}
		if w != nil {
			row.ContainerID, row.IfName, row.HostIface, row.IPs = w.ContainerID, w.IfName, w.HostIface, slices.Clone(w.IPs)
			if w.PodName != "" {
				row.Pod = w.PodNamespace + "/" + w.PodName
			}
			if l, ok := c.k.Links[w.HostIface]; ok {
				row.IfaceExists, row.IfaceUp = true, l.Up
			}
		}
		var facts []string
		row.Routes.Present = true
		for i, table := range []string{statusapi.TableWorkloadsV4, statusapi.TableWorkloadsV6} {
			if w == nil {
				break
			}
			for _, tg := range c.d.WorkloadRoutes[i][w.HostIface] {
				rt := c.held[routeKey{table, w.HostIface, tg.CIDR.Masked()}]
				row.Routes.Wanted = true
				if rt.Programmed {
					facts = append(facts, tg.CIDR.String()+" dev "+w.HostIface)
				} else {
					row.Routes.Present = false
					fact := tg.CIDR.String() + " dev " + w.HostIface + " missing"
					if rt.Kernel != "" {
						fact = tg.CIDR.String() + " dev " + w.HostIface + ": kernel has " + rt.Kernel
					}
					facts = append(facts, fact)
				}
			}
		}
		if !row.Routes.Wanted {
			row.Routes.Present = false
		}
		row.Routes.Fact = strings.Join(facts, "; ")
		out = append(out, row)
	}
	return out
}

// macString is mac as text, "" for none.
func macString(mac net.HardwareAddr) string {
	if len(mac) == 0 {
		return ""
	}
	return mac.String()
}

// addrString is a as text, "" for the zero address.
func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
