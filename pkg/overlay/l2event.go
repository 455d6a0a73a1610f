package overlay

import (
	"bytes"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// NeighEvent is one kernel notification of a neighbour (ARP/NDP) or FDB
// entry on the VXLAN device, as the event stream reports it.
type NeighEvent struct {
	FDB bool // an FDB entry (AF_BRIDGE); otherwise ARP/NDP
	// IP is the neighbour's address, or the FDB entry's destination
	// (invalid when it has none).
	IP        netip.Addr
	MAC       net.HardwareAddr
	Permanent bool // NUD_PERMANENT: the kind of entry routelet writes
	Deleted   bool
	// Type is the notification's ndm_type: RTN_UNICAST for every FDB
	// notification of the VXLAN driver (see rtnlFDBCopy).
	Type int
}

// OnNeighEvent is the hint for a neighbour or FDB notification on the
// device. The echo of the manager's own writes and deletes (even of one
// overwritten since), an event that leaves the entry as the kernel had it
// at the last write or as it is about to be written, and the kernel's
// dynamic entries for addresses nobody routes change nothing, and neither
// does rtnetlink's copy of an FDB request (rtnlFDBCopy). Any
// other shows drift (an entry of ours deleted or changed, a permanent
// entry or unicast FDB entry nobody wants): the next Apply re-reads both
// tables and repairs them. It returns what drifted, "neigh" or "fdb", or
// "" when nothing did.
func (m *VXLAN) OnNeighEvent(ev NeighEvent) string {
	if rtnlFDBCopy(ev) {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isEcho(ev) {
		return ""
	}
	full := m.l2Dirty || !m.haveOK
	drift := m.l2.driftKind(ev, full)
	if drift != "" && !full {
		m.l2Dirty = true
	}
	return drift
}

// rtnlFDBCopy reports whether ev is an FDB notification that is not the
// VXLAN driver's own: the driver's always have ndm_type RTN_UNICAST and
// name the remote (NDA_DST, 0.0.0.0 included). For every add and delete
// with NTF_SELF that the driver accepts, older kernels (Debian 12's 6.1
// among them) send, after the driver's notification, rtnetlink's copy
// of the request: NTF_SELF, the request's state, ndm_type 0 and the MAC
// alone (no NDA_DST, NDA_PORT, NDA_VNI, NDA_IFINDEX or cache info). They
// send it even when the request changed nothing (a replace with the same
// remote, the delete of a remote the MAC no longer has), which the driver
// does not notify. Newer kernels (6.18) send the copy only for devices
// that do not notify themselves, so a VXLAN device gets none. The driver's
// notification has said what changed, whoever asked; the copy says
// nothing more. A bridge's own entries for the device (NTF_MASTER, once
// someone enslaves it, which Apply undoes) look the same and are no
// entries of the device either.
func rtnlFDBCopy(ev NeighEvent) bool {
	return ev.FDB && !ev.IP.IsValid() && ev.Type != unix.RTN_UNICAST
}

// isEcho reports whether ev is the notification of a write of ours, even
// one overwritten since. m.mu is held.
func (m *VXLAN) isEcho(ev NeighEvent) bool {
	if ev.FDB {
		if len(ev.MAC) != 6 {
			return false
		}
		return m.echo.seen(fdbEcho([6]byte(ev.MAC), ev.IP, ev.Deleted))
	}
	if !ev.IP.IsValid() || !ev.Deleted && !ev.Permanent {
		return false
	}
	return m.echo.seen(neighEcho(ev.IP, ev.MAC, ev.Deleted))
}

// driftKind classifies ev (see OnNeighEvent): an entry is as expected when
// it is as the kernel had it or as wanted. unknown: what the kernel had is
// not known (a full read is queued anyway), so only wanted counts.
func (s *l2State) driftKind(ev NeighEvent, unknown bool) string {
	if ev.FDB {
		if len(ev.MAC) != 6 || ev.MAC[0]&1 != 0 {
			return "" // multicast: the device's own list
		}
		mac, dst := [6]byte(ev.MAC), ev.IP.Unmap()
		w, inWant := s.want.fdb[mac]
		h, inHave := w, inWant
		if !unknown {
			h, inHave = s.hadFDB(mac)
		}
		ok := inWant && w == dst || inHave && h == dst
		if ev.Deleted {
			// Gone is fine unless both still hold it.
			ok = !(inWant && w == dst && inHave && h == dst)
		}
		if ok {
			return ""
		}
		return "fdb"
	}
	if !ev.IP.IsValid() {
		return ""
	}
	ip := ev.IP.Unmap()
	w, inWant := s.want.arp[ip]
	h, inHave := w, inWant
	if !unknown {
		h, inHave = s.hadARP(ip)
	}
	var ok bool
	switch {
	case ev.Deleted:
		// A dynamic entry going is the kernel's business; ours going is
		// fine unless both still hold it.
		ok = !ev.Permanent || !(inWant && inHave)
	case ev.Permanent:
		ok = inWant && bytes.Equal(w, ev.MAC) || inHave && bytes.Equal(h, ev.MAC)
	default:
		// A dynamic entry where ours should be means ours was replaced.
		ok = !inWant && !inHave
	}
	if ok {
		return ""
	}
	return "neigh"
}
