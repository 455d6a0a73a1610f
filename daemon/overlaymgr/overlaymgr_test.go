package overlaymgr

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/overlay/overlaytest"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// fakeTable records what the manager asks of a RouteTable. devUp, when set,
// reports whether the route's device exists at Apply time (the ordering the
// manager promises: devices before their routes).
type fakeTable struct {
	want    map[string][]routes.Target
	dirty   map[string]int
	applies int
	// devAtApply records, per Apply, whether vxlan.calico existed.
	devAtApply []bool
	devExists  func() bool
}

func newFakeTable(devExists func() bool) *fakeTable {
	return &fakeTable{want: map[string][]routes.Target{}, dirty: map[string]int{}, devExists: devExists}
}

func (f *fakeTable) SetRoutes(iface string, ts []routes.Target) {
	f.want[iface] = slices.Clone(ts)
}
func (f *fakeTable) RouteUpdate(iface string, t routes.Target) {
	f.want[iface] = append(slices.DeleteFunc(f.want[iface], func(o routes.Target) bool { return o.CIDR == t.CIDR }), t)
}
func (f *fakeTable) RouteRemove(iface string, cidr netip.Prefix) {
	f.want[iface] = slices.DeleteFunc(f.want[iface], func(o routes.Target) bool { return o.CIDR == cidr })
}
func (f *fakeTable) MarkDirty(iface string) { f.dirty[iface]++ }
func (f *fakeTable) Apply() error {
	f.applies++
	f.devAtApply = append(f.devAtApply, f.devExists())
	return nil
}

// render returns "iface: cidr via gw [onlink] [mtu]" lines.
func (f *fakeTable) render() []string {
	var out []string
	for iface, ts := range f.want {
		for _, t := range ts {
			s := iface + ": " + t.CIDR.String() + " via " + t.Gateway.String()
			if t.OnLink {
				s += " onlink"
			}
			if t.MTU > 0 {
				s += " mtu " + strconv.Itoa(t.MTU)
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

var quiet = slog.New(slog.DiscardHandler)

// setup returns a fake kernel with eth0 (10.0.0.1/24, fd00::1/64), a manager
// for node a in mode, and its tables by family.
func setup(t *testing.T, mode overlay.Mode, blocks ...string) (*overlaytest.FakeNetlink, *Manager, map[int]*fakeTable) {
	t.Helper()
	nl := overlaytest.NewFakeNetlink()
	nl.AddUnderlay("eth0", 1500, netip.MustParsePrefix("10.0.0.1/24"), netip.MustParsePrefix("fd00::1/64"))
	tables := map[int]*fakeTable{}
	var bs []netip.Prefix
	for _, b := range blocks {
		bs = append(bs, netip.MustParsePrefix(b))
	}
	m, err := New(nl, Config{
		NodeName: "a", Mode: mode, HostIPv4: netip.MustParseAddr("10.0.0.1"), HostIPv6: netip.MustParseAddr("fd00::1"),
		LocalBlocks: bs, Logger: quiet,
	}, func(v int, owned []string) (RouteTable, error) {
		dev := "vxlan.calico"
		if v == 6 {
			dev = "vxlan-v6.calico"
		}
		tables[v] = newFakeTable(func() bool { return nl.Link(dev) != nil })
		return tables[v], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return nl, m, tables
}

// testPeers: b on our subnet, c behind a router, and d whose VTEP MAC is
// multicast, validated as the daemon does (d's MAC is refused, the rest of
// its record kept).
func testPeers() []peers.NodeInfo {
	var recs []peers.Record
	for _, n := range peerRecords() {
		recs = append(recs, peers.FromState(n))
	}
	return peers.Resolve(peers.Input{Self: peers.Self{Name: "a"}, Records: recs}).Peers
}

// peerRecords are testPeers' records.
func peerRecords() []*state.Node {
	return []*state.Node{
		{Name: "b", HostIPv4: "10.0.0.2", HostIPv6: "fd00::2", Blocks: []string{"10.244.2.0/24", "fd00:244:2::/120"},
			VTEPMAC: "02:00:00:00:00:0b", TunnelIPv4: "10.244.2.0", VTEPMACv6: "02:00:00:00:06:0b", TunnelIPv6: "fd00:244:2::"},
		{Name: "c", HostIPv4: "10.1.0.3", HostIPv6: "fd01::3", Blocks: []string{"10.244.3.0/24", "fd00:244:3::/120"},
			VTEPMAC: "02:00:00:00:00:0c", TunnelIPv4: "10.244.3.0", VTEPMACv6: "02:00:00:00:06:0c", TunnelIPv6: "fd00:244:3::"},
		{Name: "d", HostIPv4: "10.0.0.4", Blocks: []string{"10.244.4.0/24"}, VTEPMAC: "01:00:00:00:00:0d", TunnelIPv4: "10.244.4.0"},
	}
}

func neighbours(t *testing.T, nl *overlaytest.FakeNetlink, dev string, family int) []string {
	t.Helper()
	l := nl.Link(dev)
	if l == nil {
		return nil
	}
	ns, err := nl.NeighList(l.Attrs().Index, family)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range ns {
		if n.IP != nil {
			out = append(out, n.IP.String()+" "+n.HardwareAddr.String())
		} else {
			out = append(out, n.HardwareAddr.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestVXLANCrossSubnetDualStack(t *testing.T) {
	nl, m, tables := setup(t, overlay.ModeVXLANCrossSubnet, "10.244.1.0/24", "fd00:244:1::/120")
	self := &peers.Record{Name: "a"}
	m.Publish(self)
	if self.VTEPMAC != overlay.VTEPMAC("a", 4).String() || self.TunnelIPv4 != "10.244.1.0" ||
		self.VTEPMACv6 != overlay.VTEPMAC("a", 6).String() || self.TunnelIPv6 != "fd00:244:1::" {
		t.Errorf("published %+v", self)
	}
	if got := m.PodMTU(); got != 1430 {
		t.Errorf("PodMTU = %d, want 1430 (the IPv6 underlay's 70 bytes of overhead)", got)
	}
	m.OnNodes(testPeers())
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	// d's VTEP MAC was refused; on our subnet it needs none.
	want4 := []string{
		"eth0: 10.244.2.0/24 via 10.0.0.2",
		"eth0: 10.244.4.0/24 via 10.0.0.4",
		"vxlan.calico: 10.244.3.0/24 via 10.244.3.0 onlink mtu 1450",
	}
	if got := tables[4].render(); !slices.Equal(got, want4) {
		t.Errorf("IPv4 routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want4, "\n"))
	}
	want6 := []string{
		"eth0: fd00:244:2::/120 via fd00::2",
		"vxlan-v6.calico: fd00:244:3::/120 via fd00:244:3:: onlink mtu 1430",
	}
	if got := tables[6].render(); !slices.Equal(got, want6) {
		t.Errorf("IPv6 routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want6, "\n"))
	}
	// Every owned interface got a SetRoutes, so old routes on tunl0 go.
	if _, ok := tables[4].want["tunl0"]; !ok {
		t.Error("tunl0 never handed to SetRoutes: an earlier IPIP mode's routes would stay")
	}
	if got := neighbours(t, nl, "vxlan.calico", netlink.FAMILY_V4); !slices.Equal(got, []string{"10.244.2.0 02:00:00:00:00:0b", "10.244.3.0 02:00:00:00:00:0c"}) {
		t.Errorf("ARP on vxlan.calico = %v (peer d's multicast MAC refused: no entry for d)", got)
	}
	if got := neighbours(t, nl, "vxlan-v6.calico", netlink.FAMILY_V6); len(got) != 2 {
		t.Errorf("NDP on vxlan-v6.calico = %v, want b and c", got)
	}
	if !tables[4].devAtApply[0] || !tables[6].devAtApply[0] {
		t.Error("route table applied before its vxlan device existed")
	}
}

func TestDeviceRecreatedRoutesReread(t *testing.T) {
	nl, m, tables := setup(t, overlay.ModeVXLAN, "10.244.1.0/24")
	m.OnNodes(testPeers())
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	before := tables[4].dirty["vxlan.calico"]
	if !nl.DeleteLink("vxlan.calico") {
		t.Fatal("no vxlan.calico after Apply")
	}
	// The watcher's hint for the link event.
	if !m.onLink("vxlan.calico") {
		t.Fatal("link event for vxlan.calico not relevant")
	}
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if nl.Link("vxlan.calico") == nil {
		t.Fatal("vxlan.calico not recreated")
	}
	if tables[4].dirty["vxlan.calico"] <= before {
		t.Error("recreated device's routes not marked for a re-read")
	}
	if got := neighbours(t, nl, "vxlan.calico", netlink.FAMILY_V4); len(got) != 2 {
		t.Errorf("ARP after recreation = %v", got)
	}
	if m.onLink("cali123") {
		t.Error("a workload link event counted as an overlay event")
	}
	if _, ok := tables[6]; ok {
		t.Error("IPv6 table made without IPv6 blocks")
	}
}

func TestModeNoneRemovesVXLAN(t *testing.T) {
	nl := overlaytest.NewFakeNetlink()
	nl.AddUnderlay("eth0", 1500, netip.MustParsePrefix("10.0.0.1/24"))
	// A device of an earlier VXLAN run.
	if err := nl.LinkAdd(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "vxlan.calico", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}}, VxlanId: 4096}); err != nil {
		t.Fatal(err)
	}
	var table *fakeTable
	m, err := New(nl, Config{NodeName: "a", Mode: overlay.ModeNone, HostIPv4: netip.MustParseAddr("10.0.0.1"),
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}, Logger: quiet},
		func(v int, owned []string) (RouteTable, error) {
			table = newFakeTable(func() bool { return true })
			return table, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	self := &peers.Record{Name: "a", VTEPMAC: "02:00:00:00:00:01", TunnelIPv4: "10.244.1.0"}
	m.Publish(self)
	if self.VTEPMAC != "" || self.TunnelIPv4 != "" {
		t.Errorf("mode none publishes %+v, want no VTEP", self)
	}
	if m.PodMTU() != 1500 {
		t.Errorf("PodMTU = %d, want 1500", m.PodMTU())
	}
	m.OnNodes(testPeers())
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if nl.Link("vxlan.calico") != nil {
		t.Error("vxlan.calico of an earlier mode not removed")
	}
	// c is off our subnet; d's multicast VTEP MAC was refused, the rest
	// of its record still counts: it is on our subnet, so routed directly.
	if got := table.render(); !slices.Equal(got, []string{"eth0: 10.244.2.0/24 via 10.0.0.2", "eth0: 10.244.4.0/24 via 10.0.0.4"}) {
		t.Errorf("host-gw routes = %v, want b's and d's blocks", got)
	}
}

// TestBlockMoveKeepsL2: a peer change that only moves a block changes its
// route and leaves the ARP and FDB tables unread; a changed tunnel address
// re-syncs them.
func TestBlockMoveKeepsL2(t *testing.T) {
	nl, m, tables := setup(t, overlay.ModeVXLAN, "10.244.1.0/24")
	m.OnNodes(testPeers())
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	reads := nl.Calls("NeighList")
	ps := testPeers()
	ps[1].Blocks = []netip.Prefix{netip.MustParsePrefix("10.244.30.0/24")} // c's block moves
	m.OnNodes(ps)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := tables[4].render(); !slices.Contains(got, "vxlan.calico: 10.244.30.0/24 via 10.244.3.0 onlink mtu 1450") {
		t.Errorf("routes after c's block moved:\n%s", strings.Join(got, "\n"))
	}
	if n := nl.Calls("NeighList"); n != reads {
		t.Errorf("a block move re-read the neighbour tables (%d NeighList calls, want %d)", n, reads)
	}
	ps[1].IPv4.TunnelAddr = netip.MustParseAddr("10.244.30.0")
	m.OnNodes(ps)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := neighbours(t, nl, "vxlan.calico", netlink.FAMILY_V4); !slices.Equal(got, []string{"10.244.2.0 02:00:00:00:00:0b", "10.244.30.0 02:00:00:00:00:0c"}) {
		t.Errorf("ARP after c's tunnel address moved = %v", got)
	}
}

// TestOnNodesHandsOnlyChanges: 30 peers in cross-subnet VXLAN mode whose
// blocks move, swap with each other, collide, and whose host IPs move on
// and off our subnet (their routes between eth0 and vxlan.calico), one
// or two per step, some peers leaving and coming back: after every
// OnNodes the route table wants exactly what overlay.Routes computes from
// the same peers, although the manager hands it only the changes.
func TestOnNodesHandsOnlyChanges(t *testing.T) {
	_, m, tables := setup(t, overlay.ModeVXLANCrossSubnet, "10.244.1.0/24")
	rng := rand.New(rand.NewPCG(5, 6))
	block := func() netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 245, byte(rng.IntN(40)), 0}), 24)
	}
	host := func() netip.Addr {
		if rng.IntN(2) == 0 {
			return netip.AddrFrom4([4]byte{10, 0, 0, byte(2 + rng.IntN(200))}) // our subnet
		}
		return netip.AddrFrom4([4]byte{10, 7, 0, byte(2 + rng.IntN(200))})
	}
	all := make([]peers.NodeInfo, 30)
	present := make([]bool, len(all))
	for i := range all {
		b := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 246, byte(i), 0}), 24)
		all[i] = peers.NodeInfo{Name: fmt.Sprintf("p%02d", i), Blocks: []netip.Prefix{b},
			IPv4: peers.Endpoint{HostIP: host(), VTEPMAC: net.HardwareAddr{2, 0, 0, 0, 1, byte(i)}, TunnelAddr: b.Addr()}}
		present[i] = true
	}
	list := func() []peers.NodeInfo {
		var ns []peers.NodeInfo
		for i, n := range all {
			if present[i] {
				ns = append(ns, n)
			}
		}
		return ns
	}
	for step := range 400 {
		for range 1 + rng.IntN(2) {
			i := rng.IntN(len(all))
			switch rng.IntN(4) {
			case 0:
				all[i].Blocks = []netip.Prefix{block()}
			case 1:
				j := rng.IntN(len(all))
				all[i].Blocks, all[j].Blocks = all[j].Blocks, all[i].Blocks
			case 2:
				all[i].IPv4.HostIP = host()
			case 3:
				present[i] = !present[i]
			}
		}
		m.OnNodes(list())
		in := m.fams[0].in
		in.Peers = Peers(list(), 4)
		want, _ := overlay.Routes(in)
		if got, want := tables[4].render(), (&fakeTable{want: want}).render(); !slices.Equal(got, want) {
			t.Fatalf("step %d: the table wants\n%s\nRoutes computes\n%s", step, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}
