package overlay_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/routelet/routelet/pkg/overlay"
)

// TestVXLANIncrementalMatchesFullSync: 300 random peer changes drawn from
// small pools of tunnel IPs, MACs and host IPs (so peers collide, swap and
// stop colliding), some peers leaving and coming back, each applied to one
// manager that writes only what changed: after every Apply its device holds
// exactly what a fresh manager's full sync of the same peers programs,
// and no change re-reads the tables.
func TestVXLANIncrementalMatchesFullSync(t *testing.T) {
	f, m := newFakeVXLAN(t)
	rng := rand.New(rand.NewPCG(1, 2))
	tip := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 244, byte(rng.IntN(12)), 0}) }
	mac := func() net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, byte(rng.IntN(12))} }
	host := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(2 + rng.IntN(12))}) }
	all := make([]overlay.Peer, 8)
	for i := range all {
		all[i] = overlay.Peer{Name: fmt.Sprintf("p%d", i), HostIP: host(), VTEPMAC: mac(), TunnelIP: tip()}
	}
	present := []bool{true, true, true, true, true, true, true, true}
	list := func() []overlay.Peer {
		var ps []overlay.Peer
		for i, p := range all {
			if present[i] {
				ps = append(ps, p)
			}
		}
		return ps
	}
	m.SetPeers(list())
	mustApply(t, m)
	for step := range 300 {
		i := rng.IntN(len(all))
		switch rng.IntN(5) {
		case 0:
			all[i].TunnelIP = tip()
		case 1:
			all[i].VTEPMAC = mac()
		case 2:
			all[i].HostIP = host()
		case 3:
			all[i].VTEPMAC = nil // no VTEP: no entries
		case 4:
			present[i] = !present[i]
		}
		m.SetPeers(list())
		reads := f.Calls("NeighList")
		mustApply(t, m)
		if f.Calls("NeighList") != reads {
			t.Fatalf("step %d: a change of peer %s re-read the tables", step, all[i].Name)
		}
		gf, golden := newFakeVXLAN(t)
		golden.SetPeers(list())
		mustApply(t, golden)
		if got, want := dump(f, "vxlan.calico"), dump(gf, "vxlan.calico"); got != want {
			t.Fatalf("step %d (peer %s): device holds\n%s\nfull sync programs\n%s", step, all[i].Name, got, want)
		}
	}
}

// TestVXLANLateEchoNoDrift: the notifications of two successive writes of
// peer b's entries, delivered only after the second Apply (the first
// write's echo now matching neither the kernel nor the wanted state), are
// not drift and queue no re-read; a MAC nobody wrote is.
func TestVXLANLateEchoNoDrift(t *testing.T) {
	f, m := newFakeVXLAN(t)
	m.SetPeers([]overlay.Peer{peerB})
	mustApply(t, m)
	b2 := peerB
	b2.VTEPMAC = net.HardwareAddr{2, 0, 0, 0, 0, 0xbb}
	m.SetPeers([]overlay.Peer{b2})
	mustApply(t, m)
	for _, ev := range []overlay.NeighEvent{
		{IP: peerB.TunnelIP, MAC: peerB.VTEPMAC, Permanent: true},
		{FDB: true, IP: peerB.HostIP, MAC: peerB.VTEPMAC},
		{IP: b2.TunnelIP, MAC: b2.VTEPMAC, Permanent: true},
		{FDB: true, IP: b2.HostIP, MAC: b2.VTEPMAC},
		{FDB: true, IP: peerB.HostIP, MAC: peerB.VTEPMAC, Deleted: true},
	} {
		if got := m.OnNeighEvent(ev); got != "" {
			t.Errorf("echo %+v: drift %q", ev, got)
		}
	}
	reads := f.Calls("NeighList")
	mustApply(t, m)
	if f.Calls("NeighList") != reads {
		t.Error("the echoes queued a re-read of the tables")
	}
	if got := m.OnNeighEvent(overlay.NeighEvent{IP: b2.TunnelIP, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xcc}, Permanent: true}); got != "neigh" {
		t.Errorf("a MAC nobody wrote: drift %q, want neigh", got)
	}
}

// TestVXLANRequestCopiesNoDrift: the FDB notifications Debian 12's 6.1
// sends for the manager's own writes (as logged there: after each of the
// driver's, ndm_type RTN_UNICAST with the destination, rtnetlink's copy of
// the request, ndm_type 0 with the MAC alone; a copy alone for a write
// or delete that changed nothing) are no drift and queue no re-read; the
// driver's notification of our entry now pointing at the any-address,
// which names no usable destination either, is.
func TestVXLANRequestCopiesNoDrift(t *testing.T) {
	f, m := newFakeVXLAN(t)
	const unicast = 1 // RTN_UNICAST
	driver := func(p overlay.Peer, deleted bool) overlay.NeighEvent {
		return overlay.NeighEvent{FDB: true, IP: p.HostIP, MAC: p.VTEPMAC, Permanent: true, Deleted: deleted, Type: unicast}
	}
	copyOf := func(p overlay.Peer, deleted bool) overlay.NeighEvent {
		return overlay.NeighEvent{FDB: true, MAC: p.VTEPMAC, Permanent: true, Deleted: deleted}
	}
	arp := func(p overlay.Peer) overlay.NeighEvent {
		return overlay.NeighEvent{IP: p.TunnelIP, MAC: p.VTEPMAC, Permanent: true, Type: unicast}
	}
	c2 := peerC
	c2.HostIP = netip.MustParseAddr("10.1.0.99")
	for _, step := range []struct {
		peers  []overlay.Peer
		events []overlay.NeighEvent
	}{
		{[]overlay.Peer{peerB}, []overlay.NeighEvent{arp(peerB), driver(peerB, false), copyOf(peerB, false)}},
		{[]overlay.Peer{peerB, peerC}, []overlay.NeighEvent{arp(peerC), driver(peerC, false), copyOf(peerC, false)}},
		// c's host moved: the replace's notification and copy, and a copy
		// alone for the delete of a remote that was already replaced.
		{[]overlay.Peer{peerB, c2}, []overlay.NeighEvent{driver(c2, false), copyOf(c2, false), copyOf(peerC, true)}},
		{[]overlay.Peer{peerB}, []overlay.NeighEvent{driver(c2, true), copyOf(c2, true)}},
	} {
		m.SetPeers(step.peers)
		mustApply(t, m)
		for _, ev := range step.events {
			if got := m.OnNeighEvent(ev); got != "" {
				t.Errorf("after SetPeers(%v): %+v is drift %q", step.peers, ev, got)
			}
		}
		reads := f.Calls("NeighList")
		mustApply(t, m)
		if f.Calls("NeighList") != reads {
			t.Errorf("after SetPeers(%v): the notifications queued a re-read of the tables", step.peers)
		}
	}
	// A write that changed nothing: the copy alone.
	if got := m.OnNeighEvent(copyOf(peerB, false)); got != "" {
		t.Errorf("a lone copy: drift %q", got)
	}
	tampered := driver(peerB, false)
	tampered.IP = netip.IPv4Unspecified()
	if got := m.OnNeighEvent(tampered); got != "fdb" {
		t.Errorf("b's entry replaced to 0.0.0.0: drift %q, want fdb", got)
	}
	tampered.IP = netip.Addr{}
	if got := m.OnNeighEvent(tampered); got != "fdb" {
		t.Errorf("b's entry without a destination, from the driver: drift %q, want fdb", got)
	}
}
