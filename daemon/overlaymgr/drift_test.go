package overlaymgr

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
)

// TestDriftReported: deleting a wanted overlay route, ARP or FDB entry is
// reported as drift; the deletions that follow a peer's removal (the
// manager's own) are not.
func TestDriftReported(t *testing.T) {
	_, m, _ := setup(t, overlay.ModeVXLAN, "10.244.1.0/24")
	var got []string
	m.cfg.OnDrift = func(object, detail string) { got = append(got, object+" "+detail) }
	m.OnNodes(testPeers())
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	h := m.Events(func() {})
	macB, macC := net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}, net.HardwareAddr{2, 0, 0, 0, 0, 0x0c}
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", IP: netip.MustParseAddr("10.244.2.0"), MAC: macB, State: netlink.NUD_PERMANENT, Deleted: true})
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", FDB: true, IP: netip.MustParseAddr("10.0.0.2"), MAC: macB, State: netlink.NUD_PERMANENT, Deleted: true})
	h.OnRoute(netwatch.RouteEvent{Iface: "vxlan.calico", Dst: netip.MustParsePrefix("10.244.3.0/24"), Protocol: 80, Deleted: true})
	// Not drift: the echo of an entry the manager wrote, and the deletion
	// of an entry nobody wants.
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", IP: netip.MustParseAddr("10.244.3.0"), MAC: macC, State: netlink.NUD_PERMANENT})
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", IP: netip.MustParseAddr("10.9.9.9"), MAC: macC, State: netlink.NUD_PERMANENT, Deleted: true})
	want := []string{"neigh 10.244.2.0 dev vxlan.calico", "fdb 10.0.0.2 dev vxlan.calico", "route 10.244.3.0/24 dev vxlan.calico"}
	if !slices.Equal(got, want) {
		t.Errorf("drift = %q, want %q", got, want)
	}

	// b leaves: the deletions of its entries and route are the manager's.
	got = nil
	m.OnNodes(slices.DeleteFunc(testPeers(), func(n peers.NodeInfo) bool { return n.Name == "b" }))
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", IP: netip.MustParseAddr("10.244.2.0"), MAC: macB, State: netlink.NUD_PERMANENT, Deleted: true})
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", FDB: true, IP: netip.MustParseAddr("10.0.0.2"), MAC: macB, State: netlink.NUD_PERMANENT, Deleted: true})
	h.OnRoute(netwatch.RouteEvent{Iface: "vxlan.calico", Dst: netip.MustParsePrefix("10.244.2.0/24"), Protocol: 80, Deleted: true})
	if len(got) != 0 {
		t.Errorf("drift after b left = %q, want none", got)
	}
}

// TestOwnDeleteNoReread: the echo of a route the manager deleted itself
// (one it no longer wants) does not make the next Apply re-read the
// interface; the deletion of a wanted route does.
func TestOwnDeleteNoReread(t *testing.T) {
	_, m, tables := setup(t, overlay.ModeVXLAN, "10.244.1.0/24")
	m.OnNodes(testPeers())
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	woken := 0
	h := m.Events(func() { woken++ })
	before := tables[4].dirty["vxlan.calico"]
	h.OnRoute(netwatch.RouteEvent{Iface: "vxlan.calico", Dst: netip.MustParsePrefix("10.244.99.0/24"), Protocol: 80, Deleted: true})
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := tables[4].dirty["vxlan.calico"]; got != before || woken != 0 {
		t.Errorf("an unwanted route's deletion: %d re-reads, %d wakes; want none", got-before, woken)
	}
	h.OnRoute(netwatch.RouteEvent{Iface: "vxlan.calico", Dst: netip.MustParsePrefix("10.244.3.0/24"), Protocol: 80, Deleted: true})
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := tables[4].dirty["vxlan.calico"]; got != before+1 || woken != 1 {
		t.Errorf("a wanted route's deletion: %d re-reads, %d wakes; want 1 each", got-before, woken)
	}
}

// TestRequestCopyNoDrift: rtnetlink's copy of an FDB request (what
// Debian 12's 6.1 sends after the VXLAN driver's notification of each of
// the manager's writes: ndm_type 0, the MAC alone) is no drift and wakes
// nothing; the driver's own notification of an entry with no destination
// (RTN_UNICAST) is judged as an entry, and b's MAC pointing nowhere is
// drift.
func TestRequestCopyNoDrift(t *testing.T) {
	_, m, _ := setup(t, overlay.ModeVXLAN, "10.244.1.0/24")
	var got []string
	m.cfg.OnDrift = func(object, detail string) { got = append(got, object+" "+detail) }
	m.OnNodes(testPeers())
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	woken := 0
	h := m.Events(func() { woken++ })
	macB := net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", FDB: true, MAC: macB, State: netlink.NUD_PERMANENT})
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", FDB: true, MAC: macB, State: netlink.NUD_PERMANENT, Deleted: true})
	if len(got) != 0 || woken != 0 {
		t.Errorf("request copies: drift %q, %d wakes; want none", got, woken)
	}
	h.OnNeigh(netwatch.NeighEvent{Iface: "vxlan.calico", FDB: true, MAC: macB, State: netlink.NUD_PERMANENT, Type: unix.RTN_UNICAST})
	if want := []string{"fdb 02:00:00:00:00:0b dev vxlan.calico"}; !slices.Equal(got, want) || woken != 1 {
		t.Errorf("the driver's entry for b without a destination: drift %q, %d wakes; want %q, 1", got, woken, want)
	}
}
