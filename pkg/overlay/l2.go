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
	fdb map[string]netip.Addr // key: MAC string
}

// desiredL2 computes the entries for peers of one family. Peers are taken
// in name order, so when two claim the same tunnel IP or MAC the result is
// deterministic (the first by name wins).
func desiredL2(ipVersion int, peers []Peer) l2Want {
	w := l2Want{arp: map[netip.Addr]net.HardwareAddr{}, fdb: map[string]netip.Addr{}}
	sorted := slices.Clone(peers)
	slices.SortFunc(sorted, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range sorted {
		if len(p.VTEPMAC) != 6 || !p.TunnelIP.IsValid() || !p.HostIP.IsValid() ||
			familyOf(p.TunnelIP) != ipVersion || familyOf(p.HostIP) != ipVersion {
			continue
		}
		tip := p.TunnelIP.Unmap()
		if _, dup := w.arp[tip]; dup {
			continue
		}
		if _, dup := w.fdb[p.VTEPMAC.String()]; dup {
			continue
		}
		w.arp[tip] = p.VTEPMAC
		w.fdb[p.VTEPMAC.String()] = p.HostIP.Unmap()
	}
	return w
}

// syncL2 makes the permanent ARP/NDP entries and the FDB entries on the
// device at index exactly those the peers need. It reads both tables once,
// adds and replaces first, and only then deletes stale entries.
//
// Ownership: the device is routelet's, so every permanent neighbour entry
// and every unicast FDB entry on it is ours. Dynamic neighbour entries
// (resolved, failed, the kernel's NOARP ones) belong to the kernel and are
// left alone unless a desired entry replaces one; multicast FDB entries
// mirror the device's multicast list and are left alone too.
func syncL2(nl Netlink, log *slog.Logger, index, ipVersion int, peers []Peer) error {
	want := desiredL2(ipVersion, peers)
	var errs []error
	if err := syncNeigh(nl, log, index, ipVersion, want.arp); err != nil {
		errs = append(errs, err)
	}
	if err := syncFDB(nl, log, index, want.fdb); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// syncNeigh reconciles the permanent ARP (v4) or NDP (v6) entries.
func syncNeigh(nl Netlink, log *slog.Logger, index, ipVersion int, want map[netip.Addr]net.HardwareAddr) error {
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
		mac := want[ip]
		n := &netlink.Neigh{
			LinkIndex:    index,
			Family:       nlFamily(ipVersion),
			State:        netlink.NUD_PERMANENT,
			IP:           net.IP(ip.AsSlice()),
			HardwareAddr: mac,
		}
		if err := nl.NeighSet(n); err != nil {
			errs = append(errs, fmt.Errorf("set neighbour %s lladdr %s: %w", ip, mac, err))
			continue
		}
		log.Debug("set neighbour", "ip", ip, "mac", mac.String())
	}
	for _, n := range stale {
		if err := nl.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			// ENOENT: already gone, which is the goal.
			errs = append(errs, fmt.Errorf("delete neighbour %s lladdr %s: %w", n.IP, n.HardwareAddr, err))
			continue
		}
		log.Debug("deleted neighbour", "ip", n.IP.String(), "mac", n.HardwareAddr.String())
	}
	return errors.Join(errs...)
}

// syncFDB reconciles the FDB: one entry per peer VTEP MAC pointing at the
// peer's host IP. A MAC with extra remotes keeps only the desired one.
func syncFDB(nl Netlink, log *slog.Logger, index int, want map[string]netip.Addr) error {
	have, err := nl.NeighList(index, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb: %w", err)
	}
	ok := make(map[string]bool, len(want))
	var stale []netlink.Neigh
	for _, n := range have {
		if len(n.HardwareAddr) != 6 || n.HardwareAddr[0]&1 != 0 {
			continue // multicast: the device's own list, not ours
		}
		dst, _ := netip.AddrFromSlice(n.IP)
		dst = dst.Unmap()
		key := n.HardwareAddr.String()
		if wantDst, desired := want[key]; desired && dst == wantDst {
			ok[key] = true
			continue
		}
		stale = append(stale, n)
	}
	var errs []error
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if ok[key] {
			continue
		}
		mac, _ := net.ParseMAC(key)
		dst := want[key]
		n := &netlink.Neigh{
			LinkIndex:    index,
			Family:       unix.AF_BRIDGE,
			State:        netlink.NUD_PERMANENT,
			Flags:        netlink.NTF_SELF,
			IP:           net.IP(dst.AsSlice()),
			HardwareAddr: mac,
		}
		if err := nl.NeighSet(n); err != nil {
			errs = append(errs, fmt.Errorf("set fdb %s dst %s: %w", mac, dst, err))
			continue
		}
		log.Debug("set fdb entry", "mac", mac.String(), "dst", dst)
	}
	for _, n := range stale {
		n.Flags |= netlink.NTF_SELF
		if err := nl.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete fdb %s dst %s: %w", n.HardwareAddr, n.IP, err))
			continue
		}
		log.Debug("deleted fdb entry", "mac", n.HardwareAddr.String(), "dst", n.IP.String())
	}
	return errors.Join(errs...)
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
