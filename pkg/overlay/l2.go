package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// l2Want is the desired neighbour state of one VXLAN device: tunnel IP →
// VTEP MAC (ARP/NDP) and VTEP MAC → host IP (FDB).
type l2Want struct {
	arp map[netip.Addr]net.HardwareAddr
	fdb map[[6]byte]netip.Addr
}

// desiredL2 computes the entries for peers of one family. Peers are taken
// in name order, so when two claim the same tunnel IP or MAC the result is
// deterministic (the first by name wins); dups reports whether that
// happened.
func desiredL2(ipVersion int, peers []Peer) (w l2Want, dups bool) {
	w = l2Want{arp: make(map[netip.Addr]net.HardwareAddr, len(peers)), fdb: make(map[[6]byte]netip.Addr, len(peers))}
	byName := func(a, b Peer) int { return strings.Compare(a.Name, b.Name) }
	sorted := peers
	if !slices.IsSortedFunc(peers, byName) {
		sorted = slices.Clone(peers)
		slices.SortFunc(sorted, byName)
	}
	for _, p := range sorted {
		tip, mac, host, ok := l2Entry(ipVersion, p)
		if !ok {
			continue
		}
		_, dupIP := w.arp[tip]
		_, dupMAC := w.fdb[mac]
		if dupIP || dupMAC {
			dups = true
			continue
		}
		w.arp[tip] = p.VTEPMAC
		w.fdb[mac] = host
	}
	return w, dups
}

// neighEntry is the kernel's ARP/NDP entry for ip pointing at mac.
func neighEntry(index, ipVersion int, ip netip.Addr, mac net.HardwareAddr) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: index, Family: nlFamily(ipVersion), State: netlink.NUD_PERMANENT,
		IP: net.IP(ip.AsSlice()), HardwareAddr: mac}
}

// fdbEntry is the kernel's FDB entry sending frames for mac to dst.
func fdbEntry(index int, mac [6]byte, dst netip.Addr) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: index, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT, Flags: netlink.NTF_SELF,
		IP: net.IP(dst.AsSlice()), HardwareAddr: net.HardwareAddr(mac[:])}
}

// syncL2 makes the permanent ARP/NDP entries and the FDB entries on the
// device at index exactly those of want. It reads both tables once,
// adds and replaces first, and only then deletes stale entries.
//
// Ownership: the device is routelet's, so every permanent neighbour entry
// and every unicast FDB entry on it is ours. Dynamic neighbour entries
// (resolved, failed, the kernel's NOARP ones) belong to the kernel and are
// left alone unless a desired entry replaces one; multicast FDB entries
// mirror the device's multicast list and are left alone too.
func syncL2(nl Netlink, log *slog.Logger, e *echoes, index, ipVersion int, want l2Want) error {
	var errs []error
	if err := syncNeigh(nl, log, e, index, ipVersion, want.arp); err != nil {
		errs = append(errs, err)
	}
	if err := syncFDB(nl, log, e, index, want.fdb); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// syncNeigh reconciles the permanent ARP (v4) or NDP (v6) entries.
func syncNeigh(nl Netlink, log *slog.Logger, e *echoes, index, ipVersion int, want map[netip.Addr]net.HardwareAddr) error {
	have, err := nl.NeighList(index, nlFamily(ipVersion))
	if err != nil {
		return fmt.Errorf("list neighbours: %w", err)
	}
	ok := make(map[netip.Addr]bool, len(want))
	var stale []netlink.Neigh
	for _, n := range have {
		ip, valid := netip.AddrFromSlice(n.IP)
		if !valid {
			continue
		}
		ip = ip.Unmap()
		mac, desired := want[ip]
		permanent := n.State&netlink.NUD_PERMANENT != 0
		switch {
		case desired && permanent && bytes.Equal(n.HardwareAddr, mac):
			ok[ip] = true
		case !desired && permanent:
			stale = append(stale, n)
		}
	}
	var errs []error
	for _, ip := range sortedAddrs(want) {
		if ok[ip] {
			continue
		}
		errs = appendErr(errs, setNeigh(nl, log, e, index, ipVersion, ip, want[ip]))
	}
	for _, n := range stale {
		errs = appendErr(errs, delNeigh(nl, log, e, &n))
	}
	return errors.Join(errs...)
}

// syncFDB reconciles the FDB: one entry per peer VTEP MAC pointing at the
// peer's host IP. A MAC with extra remotes keeps only the desired one.
func syncFDB(nl Netlink, log *slog.Logger, e *echoes, index int, want map[[6]byte]netip.Addr) error {
	have, err := nl.NeighList(index, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb: %w", err)
	}
	ok := make(map[[6]byte]bool, len(want))
	var stale []netlink.Neigh
	for _, n := range have {
		if len(n.HardwareAddr) != 6 || n.HardwareAddr[0]&1 != 0 {
			continue // multicast: the device's own list, not ours
		}
		dst, _ := netip.AddrFromSlice(n.IP)
		dst = dst.Unmap()
		key := [6]byte(n.HardwareAddr)
		if wantDst, desired := want[key]; desired && dst == wantDst {
			ok[key] = true
			continue
		}
		stale = append(stale, n)
	}
	var errs []error
	for _, key := range sortedMACs(want) {
		if ok[key] {
			continue
		}
		errs = appendErr(errs, setFDB(nl, log, e, index, key, want[key]))
	}
	for _, n := range stale {
		errs = appendErr(errs, delFDB(nl, log, e, &n))
	}
	return errors.Join(errs...)
}

// setNeigh writes the permanent ARP/NDP entry ip → mac; e expects its
// notification.
func setNeigh(nl Netlink, log *slog.Logger, e *echoes, index, ipVersion int, ip netip.Addr, mac net.HardwareAddr) error {
	if err := nl.NeighSet(neighEntry(index, ipVersion, ip, mac)); err != nil {
		return fmt.Errorf("set neighbour %s lladdr %s: %w", ip, mac, err)
	}
	e.wrote(neighEcho(ip, mac, false))
	log.Debug("set neighbour", "ip", ip, "mac", mac.String())
	return nil
}

// delNeigh deletes a neighbour entry; one already gone is the goal reached.
func delNeigh(nl Netlink, log *slog.Logger, e *echoes, n *netlink.Neigh) error {
	err := nl.NeighDel(n)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete neighbour %s lladdr %s: %w", n.IP, n.HardwareAddr, err)
	}
	if ip, ok := netip.AddrFromSlice(n.IP); ok && err == nil {
		e.wrote(neighEcho(ip, nil, true))
	}
	log.Debug("deleted neighbour", "ip", n.IP.String(), "mac", n.HardwareAddr.String())
	return nil
}

// setFDB writes the FDB entry mac → dst; e expects its notification.
func setFDB(nl Netlink, log *slog.Logger, e *echoes, index int, mac [6]byte, dst netip.Addr) error {
	n := fdbEntry(index, mac, dst)
	if err := nl.NeighSet(n); err != nil {
		return fmt.Errorf("set fdb %s dst %s: %w", n.HardwareAddr, dst, err)
	}
	e.wrote(fdbEcho(mac, dst, false))
	log.Debug("set fdb entry", "mac", n.HardwareAddr.String(), "dst", dst)
	return nil
}

// delFDB deletes one remote of an FDB entry; one already gone is the goal
// reached.
func delFDB(nl Netlink, log *slog.Logger, e *echoes, n *netlink.Neigh) error {
	n.Flags |= netlink.NTF_SELF
	err := nl.NeighDel(n)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete fdb %s dst %s: %w", n.HardwareAddr, n.IP, err)
	}
	if dst, ok := netip.AddrFromSlice(n.IP); ok && err == nil && len(n.HardwareAddr) == 6 {
		e.wrote(fdbEcho([6]byte(n.HardwareAddr), dst, true))
	}
	log.Debug("deleted fdb entry", "mac", n.HardwareAddr.String(), "dst", n.IP.String())
	return nil
}

// appendErr appends err unless it is nil.
func appendErr(errs []error, err error) []error {
	if err != nil {
		return append(errs, err)
	}
	return errs
}

// compareMACs orders MACs bytewise.
func compareMACs(a, b [6]byte) int { return bytes.Compare(a[:], b[:]) }

// sortedMACs returns m's keys in order, so changes happen in a stable order.
func sortedMACs[V any](m map[[6]byte]V) [][6]byte {
	out := make([][6]byte, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, compareMACs)
	return out
}

// sortedAddrs returns m's keys in order, so changes happen in a stable order.
func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
