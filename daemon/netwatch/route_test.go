package netwatch

import (
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
)

// recorder is a Handler that keeps what it was given.
type recorder struct {
	mu      sync.Mutex
	links   []LinkEvent
	routes  []RouteEvent
	neighs  []NeighEvent
	rescans int
}

func (r *recorder) OnLink(ev LinkEvent) { r.mu.Lock(); r.links = append(r.links, ev); r.mu.Unlock() }
func (r *recorder) OnRoute(ev RouteEvent) {
	r.mu.Lock()
	r.routes = append(r.routes, ev)
	r.mu.Unlock()
}
func (r *recorder) OnNeigh(ev NeighEvent) {
	r.mu.Lock()
	r.neighs = append(r.neighs, ev)
	r.mu.Unlock()
}
func (r *recorder) Rescan() { r.mu.Lock(); r.rescans++; r.mu.Unlock() }

// fakeWatcher is a Watcher fed by hand, with a fixed index→name lookup
// standing in for the kernel.
func fakeWatcher(kernel map[int]string) *Watcher {
	w := New(nil)
	w.names = newIfNames(func(i int) (string, bool) { n, ok := kernel[i]; return n, ok })
	return w
}

func veth(index int, name string, up bool) netlink.Link {
	at := netlink.LinkAttrs{Index: index, Name: name, OperState: netlink.OperUp}
	if up {
		at.Flags = net.FlagUp
	}
	return &netlink.Veth{LinkAttrs: at}
}

func vxlan(index int, name string) netlink.Link {
	return &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Index: index, Name: name, Flags: net.FlagUp, OperState: netlink.OperUnknown}}
}

func route(typ uint16, index int, dst string, proto, table int) netlink.RouteUpdate {
	_, n, _ := net.ParseCIDR(dst)
	fam := netlink.FAMILY_V4
	if n.IP.To4() == nil {
		fam = netlink.FAMILY_V6
	}
	return netlink.RouteUpdate{Type: typ, Route: netlink.Route{LinkIndex: index, Dst: n, Protocol: netlink.RouteProtocol(proto), Table: table, Family: fam}}
}

// TestEventsReachOnlyTheirOwners: a workload owner (prefix, no-interface
// routes, neighbour deletions) and an overlay owner (names, deletions of
// one protocol's routes in the main table) each get exactly their events
// from one feed, and both get every rescan.
func TestEventsReachOnlyTheirOwners(t *testing.T) {
	w := fakeWatcher(map[int]string{9: "cali9"})
	wl, ov := &recorder{}, &recorder{}
	w.Register("workloads", Interest{Prefixes: []string{"cali"}, NoInterface: true, NeighDeletesOnly: true}, wl)
	w.Register("overlay", Interest{Names: []string{"vxlan.calico", "eth0"}, Protocols: []int{80}, Tables: []int{0, unix.RT_TABLE_MAIN}, RouteDeletesOnly: true}, ov)

	w.Link(netlink.LinkUpdate{Link: veth(7, "cali1", true)})
	w.Link(netlink.LinkUpdate{Link: vxlan(5, "vxlan.calico")})
	w.Link(netlink.LinkUpdate{Link: veth(3, "eth0", true)})
	w.Link(netlink.LinkUpdate{Link: veth(4, "docker0", true)})
	// Renamed: the old name is gone for its owner, the new one is nobody's.
	w.Link(netlink.LinkUpdate{Link: veth(8, "cali8", false)})
	w.Link(netlink.LinkUpdate{Link: veth(8, "tmp8", false)})
	w.Link(netlink.LinkUpdate{Header: unix.NlMsghdr{Type: unix.RTM_DELLINK}, Link: veth(7, "cali1", false)})

	wantLinks := []LinkEvent{
		{Name: "cali1", Kind: "veth", Up: true},
		{Name: "cali8", Kind: "veth"},
		{Name: "cali8", Kind: "veth", Deleted: true},
		{Name: "cali1", Kind: "veth", Deleted: true},
	}
	if !reflect.DeepEqual(wl.links, wantLinks) {
		t.Errorf("workload links %+v, want %+v", wl.links, wantLinks)
	}
	wantOvLinks := []LinkEvent{{Name: "vxlan.calico", Kind: "vxlan", Up: true}, {Name: "eth0", Kind: "veth", Up: true}}
	if !reflect.DeepEqual(ov.links, wantOvLinks) {
		t.Errorf("overlay links %+v, want %+v", ov.links, wantOvLinks)
	}

	w.Route(route(unix.RTM_NEWROUTE, 9, "10.244.1.9/32", 80, 254))  // cali9: known only to the kernel
	w.Route(route(unix.RTM_DELROUTE, 5, "10.244.2.0/26", 80, 254))  // overlay route deleted
	w.Route(route(unix.RTM_NEWROUTE, 5, "10.244.3.0/26", 80, 254))  // overlay route added: echo, nobody's
	w.Route(route(unix.RTM_DELROUTE, 5, "10.244.4.0/26", 4, 254))   // another protocol's
	w.Route(route(unix.RTM_DELROUTE, 5, "10.244.5.0/26", 80, 100))  // another table's
	w.Route(route(unix.RTM_DELROUTE, 3, "192.0.2.0/24", 2, 254))    // the uplink's connected route
	w.Route(route(unix.RTM_DELROUTE, 42, "10.244.6.0/26", 80, 254)) // unknown index: dropped
	bh := route(unix.RTM_DELROUTE, 0, "10.244.1.0/26", 80, 254)
	bh.Route.Type = unix.RTN_BLACKHOLE
	w.Route(bh)
	wantRoutes := []RouteEvent{
		{Iface: "cali9", Dst: netip.MustParsePrefix("10.244.1.9/32"), Protocol: 80, Table: 254},
		{Iface: routes.InterfaceNone, Dst: netip.MustParsePrefix("10.244.1.0/26"), Protocol: 80, Table: 254, Deleted: true},
	}
	if !reflect.DeepEqual(wl.routes, wantRoutes) {
		t.Errorf("workload routes %+v, want %+v", wl.routes, wantRoutes)
	}
	wantOvRoutes := []RouteEvent{{Iface: "vxlan.calico", Dst: netip.MustParsePrefix("10.244.2.0/26"), Protocol: 80, Table: 254, Deleted: true}}
	if !reflect.DeepEqual(ov.routes, wantOvRoutes) {
		t.Errorf("overlay routes %+v, want %+v", ov.routes, wantOvRoutes)
	}

	w.Neigh(netlink.NeighUpdate{Type: unix.RTM_NEWNEIGH, Neigh: netlink.Neigh{LinkIndex: 9, IP: net.ParseIP("10.244.1.9")}})
	w.Neigh(netlink.NeighUpdate{Type: unix.RTM_DELNEIGH, Neigh: netlink.Neigh{LinkIndex: 9, IP: net.ParseIP("10.244.1.9")}})
	w.Neigh(netlink.NeighUpdate{Type: unix.RTM_NEWNEIGH, Neigh: netlink.Neigh{LinkIndex: 5}}) // an FDB entry
	w.Neigh(netlink.NeighUpdate{Type: unix.RTM_DELNEIGH, Neigh: netlink.Neigh{LinkIndex: 4, IP: net.ParseIP("192.0.2.1")}})
	if want := []NeighEvent{{Iface: "cali9", IP: netip.MustParseAddr("10.244.1.9"), Deleted: true}}; !reflect.DeepEqual(wl.neighs, want) {
		t.Errorf("workload neighbours %+v, want %+v", wl.neighs, want)
	}
	if want := []NeighEvent{{Iface: "vxlan.calico"}}; !reflect.DeepEqual(ov.neighs, want) {
		t.Errorf("overlay neighbours %+v, want %+v", ov.neighs, want)
	}

	w.rescan()
	if wl.rescans != 1 || ov.rescans != 1 {
		t.Errorf("rescans %d, %d; want 1 each", wl.rescans, ov.rescans)
	}
}

// TestInterestIgnoresUnnamed: an event on an interface that cannot be
// named reaches no owner, whatever its prefixes.
func TestInterestIgnoresUnnamed(t *testing.T) {
	in := Interest{Prefixes: []string{""}}
	if in.iface("") || in.neigh(NeighEvent{Deleted: true}) {
		t.Error("an unnamed interface matched")
	}
}
