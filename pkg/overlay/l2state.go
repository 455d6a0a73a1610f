package overlay

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"

	"github.com/routelet/routelet/internal/compact"
)

// l2State is a VXLAN device's desired ARP/NDP and FDB entries, kept up to
// date peer by peer, and what changed in them since the kernel last held
// them (the last successful write): the entries the next Apply has to
// write. "Had" below means what the kernel held then.
type l2State struct {
	want l2Want
	// peers is the list want was built from (a copy); dups says whether
	// building it skipped a peer whose tunnel IP or MAC an earlier one
	// had, in which case a change is recomputed from all peers.
	peers []Peer
	dups  bool
	// oldARP and oldFDB hold, for each entry changed since the kernel last
	// held want, what it had.
	oldARP map[netip.Addr]old[net.HardwareAddr]
	oldFDB map[[6]byte]old[netip.Addr]
}

// old is an entry as the kernel had it (ok: it had one).
type old[V any] struct {
	v  V
	ok bool
}

// newL2State is the state of a device no peer needs entries on.
func newL2State(ipVersion int) l2State {
	w, _ := desiredL2(ipVersion, nil)
	return l2State{want: w, oldARP: map[netip.Addr]old[net.HardwareAddr]{}, oldFDB: map[[6]byte]old[netip.Addr]{}}
}

// l2Entry is the ARP/NDP and FDB entry peer p needs on a device of family
// ipVersion; ok is false when it lacks a VTEP MAC, tunnel IP or host IP of
// that family.
func l2Entry(ipVersion int, p Peer) (tip netip.Addr, mac [6]byte, host netip.Addr, ok bool) {
	if len(p.VTEPMAC) != 6 || !p.TunnelIP.IsValid() || !p.HostIP.IsValid() ||
		familyOf(p.TunnelIP) != ipVersion || familyOf(p.HostIP) != ipVersion {
		return netip.Addr{}, mac, netip.Addr{}, false
	}
	return p.TunnelIP.Unmap(), [6]byte(p.VTEPMAC), p.HostIP.Unmap(), true
}

// sameL2Peer reports whether a and b are the same peer with the same
// entries.
func sameL2Peer(a, b Peer) bool {
	return a.Name == b.Name && a.HostIP == b.HostIP && a.TunnelIP == b.TunnelIP && bytes.Equal(a.VTEPMAC, b.VTEPMAC)
}

// setPeers makes want the entries of peers and reports whether it changed.
// Peers whose entries are all as before (a change of blocks only) change
// nothing. When the same peers come in the same order and no entry is
// contested, only the peers that changed are looked at; otherwise want is
// rebuilt and compared entry by entry.
func (s *l2State) setPeers(ipVersion int, peers []Peer) bool {
	if len(peers) == len(s.peers) && slices.EqualFunc(peers, s.peers, sameL2Peer) {
		return false
	}
	changed := false
	if !s.dups && len(peers) == len(s.peers) && s.update(ipVersion, peers, &changed) {
		s.peers = append(s.peers[:0], peers...)
		return changed
	}
	w, dups := desiredL2(ipVersion, peers)
	for ip, mac := range w.arp {
		if m, ok := s.want.arp[ip]; !ok || !bytes.Equal(m, mac) {
			s.setARP(ip, mac, true)
			changed = true
		}
	}
	for ip := range s.want.arp {
		if _, ok := w.arp[ip]; !ok {
			s.setARP(ip, nil, false)
			changed = true
		}
	}
	for mac, dst := range w.fdb {
		if d, ok := s.want.fdb[mac]; !ok || d != dst {
			s.setFDB(mac, dst, true)
			changed = true
		}
	}
	for mac := range s.want.fdb {
		if _, ok := w.fdb[mac]; !ok {
			s.setFDB(mac, netip.Addr{}, false)
			changed = true
		}
	}
	s.peers, s.dups = append(s.peers[:0], peers...), dups
	return changed
}

// update applies the changed peers of peers (same names, same order as
// s.peers, no contested entry) to want; it reports false, with want
// partly updated, when the peers are not the same or a changed peer's new
// entry collides with another's, and setPeers then rebuilds want.
func (s *l2State) update(ipVersion int, peers []Peer, changed *bool) bool {
	var moved []int
	for i := range peers {
		if sameL2Peer(peers[i], s.peers[i]) {
			continue
		}
		if peers[i].Name != s.peers[i].Name {
			return false
		}
		moved = append(moved, i)
	}
	// Old entries first, so that two peers swapping a value do not
	// collide; with nothing contested, each was its peer's own.
	for _, i := range moved {
		if tip, mac, _, ok := l2Entry(ipVersion, s.peers[i]); ok {
			s.setARP(tip, nil, false)
			s.setFDB(mac, netip.Addr{}, false)
			*changed = true
		}
	}
	for _, i := range moved {
		tip, mac, host, ok := l2Entry(ipVersion, peers[i])
		if !ok {
			continue
		}
		_, takenIP := s.want.arp[tip]
		_, takenMAC := s.want.fdb[mac]
		if takenIP || takenMAC {
			return false
		}
		s.setARP(tip, net.HardwareAddr(bytes.Clone(mac[:])), true)
		s.setFDB(mac, host, true)
		*changed = true
	}
	return true
}

// setARP sets (ok) or removes the wanted ARP/NDP entry of ip, noting what
// the kernel had the first time since it last held want.
func (s *l2State) setARP(ip netip.Addr, mac net.HardwareAddr, ok bool) {
	setNoting(s.want.arp, s.oldARP, ip, mac, ok)
}

// setFDB sets (ok) or removes the wanted FDB entry of mac, noting what the
// kernel had the first time since it last held want.
func (s *l2State) setFDB(mac [6]byte, dst netip.Addr, ok bool) {
	setNoting(s.want.fdb, s.oldFDB, mac, dst, ok)
}

// setNoting sets (ok) or removes want[k], first noting in had what it was
// unless had holds k already.
func setNoting[K comparable, V any](want map[K]V, had map[K]old[V], k K, v V, ok bool) {
	if _, noted := had[k]; !noted {
		w, was := want[k]
		had[k] = old[V]{w, was}
	}
	if ok {
		want[k] = v
	} else {
		delete(want, k)
	}
}

// hadARP returns the ARP/NDP entry of ip the kernel had.
func (s *l2State) hadARP(ip netip.Addr) (net.HardwareAddr, bool) {
	if o, noted := s.oldARP[ip]; noted {
		return o.v, o.ok
	}
	m, ok := s.want.arp[ip]
	return m, ok
}

// hadFDB returns the FDB entry of mac the kernel had.
func (s *l2State) hadFDB(mac [6]byte) (netip.Addr, bool) {
	if o, noted := s.oldFDB[mac]; noted {
		return o.v, o.ok
	}
	d, ok := s.want.fdb[mac]
	return d, ok
}

// held records that the kernel holds want now.
func (s *l2State) held() {
	s.oldARP = compact.Clear(s.oldARP)
	s.oldFDB = compact.Clear(s.oldFDB)
}

// write changes the entries on the device at index from what the kernel
// had to want, touching only the entries that changed: adds and replaces
// first, then deletes. It reads nothing; a failure leaves the kernel
// somewhere between the two, so the caller re-reads it (syncL2) next time.
func (s *l2State) write(nl Netlink, log *slog.Logger, e *echoes, index, ipVersion int) error {
	var errs []error
	var setIPs, delIPs []netip.Addr
	for ip, o := range s.oldARP {
		mac, ok := s.want.arp[ip]
		switch {
		case ok && (!o.ok || !bytes.Equal(o.v, mac)):
			setIPs = append(setIPs, ip)
		case !ok && o.ok:
			delIPs = append(delIPs, ip)
		}
	}
	var setMACs, delMACs [][6]byte
	for mac, o := range s.oldFDB {
		dst, ok := s.want.fdb[mac]
		if ok && (!o.ok || o.v != dst) {
			setMACs = append(setMACs, mac)
		}
		if o.ok && (!ok || o.v != dst) {
			// A moved MAC's old remote goes too (a replace may have kept it).
			delMACs = append(delMACs, mac)
		}
	}
	slices.SortFunc(setIPs, netip.Addr.Compare)
	slices.SortFunc(delIPs, netip.Addr.Compare)
	slices.SortFunc(setMACs, compareMACs)
	slices.SortFunc(delMACs, compareMACs)
	for _, ip := range setIPs {
		errs = appendErr(errs, setNeigh(nl, log, e, index, ipVersion, ip, s.want.arp[ip]))
	}
	for _, mac := range setMACs {
		errs = appendErr(errs, setFDB(nl, log, e, index, mac, s.want.fdb[mac]))
	}
	for _, ip := range delIPs {
		errs = appendErr(errs, delNeigh(nl, log, e, neighEntry(index, ipVersion, ip, s.oldARP[ip].v)))
	}
	for _, mac := range delMACs {
		errs = appendErr(errs, delFDB(nl, log, e, fdbEntry(index, mac, s.oldFDB[mac].v)))
	}
	return errors.Join(errs...)
}
