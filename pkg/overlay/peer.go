package overlay

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"

	"github.com/routelet/routelet/pkg/state"
)

// Default device names and VXLAN parameters (DESIGN.md).
const (
	DeviceVXLAN   = "vxlan.calico"
	DeviceVXLANv6 = "vxlan-v6.calico"
	DeviceIPIP    = "tunl0"
	DefaultVNI    = 4096
	DefaultPort   = 4789
)

// Peer is another node as one IP family's overlay sees it. A dual-stack
// daemon builds one Peer per family from the same node record.
type Peer struct {
	Name     string
	HostIP   netip.Addr       // the peer's underlay address (outer destination)
	VTEPMAC  net.HardwareAddr // the peer's VXLAN device MAC; nil outside VXLAN
	TunnelIP netip.Addr       // the peer's VXLAN/IPIP device address; invalid when unknown
	Blocks   []netip.Prefix   // the peer's pod blocks of this family
}

// ParsePeer builds the Peer of one family (4 or 6) from a node record's
// string fields (hostIP, vtepMAC and tunnelIP of that family, all blocks).
// Blocks of the other family are dropped; empty strings leave fields unset.
// The error names the bad value.
func ParsePeer(ipVersion int, name, hostIP, vtepMAC, tunnelIP string, blocks []string) (Peer, error) {
	p := Peer{Name: name}
	if ipVersion != 4 && ipVersion != 6 {
		return p, fmt.Errorf("peer %s: ip version %d: want 4 or 6", name, ipVersion)
	}
	if name == "" {
		return p, fmt.Errorf("peer: empty name")
	}
	var err error
	if hostIP != "" {
		if p.HostIP, err = parseAddrOf(ipVersion, hostIP); err != nil {
			return p, fmt.Errorf("peer %s: host IP: %w", name, err)
		}
	}
	if tunnelIP != "" {
		if p.TunnelIP, err = parseAddrOf(ipVersion, tunnelIP); err != nil {
			return p, fmt.Errorf("peer %s: tunnel IP: %w", name, err)
		}
	}
	if vtepMAC != "" {
		if p.VTEPMAC, err = parseUnicastMAC(vtepMAC); err != nil {
			return p, fmt.Errorf("peer %s: VTEP MAC: %w", name, err)
		}
	}
	for _, b := range blocks {
		pfx, err := netip.ParsePrefix(b)
		if err != nil {
			return p, fmt.Errorf("peer %s: block %q: %w", name, b, err)
		}
		if pfx != pfx.Masked() {
			return p, fmt.Errorf("peer %s: block %q: host bits set (want %s)", name, b, pfx.Masked())
		}
		if familyOf(pfx.Addr()) == ipVersion {
			p.Blocks = append(p.Blocks, pfx)
		}
	}
	return p, nil
}

// parseAddrOf parses s as an address of the given family.
func parseAddrOf(ipVersion int, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q: %w", s, err)
	}
	a = a.Unmap()
	if familyOf(a) != ipVersion {
		return netip.Addr{}, fmt.Errorf("%q: not an IPv%d address", s, ipVersion)
	}
	return a, nil
}

// parseUnicastMAC parses a 6-byte unicast MAC.
func parseUnicastMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	if len(mac) != 6 || mac[0]&1 != 0 || isZeroMAC(mac) {
		return nil, fmt.Errorf("%q: not a 6-byte unicast MAC", s)
	}
	return mac, nil
}

func isZeroMAC(mac net.HardwareAddr) bool {
	for _, b := range mac {
		if b != 0 {
			return false
		}
	}
	return true
}

// familyOf returns 4 or 6.
func familyOf(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// VTEPMAC derives a node's VXLAN device MAC from its name: the first six
// bytes of SHA-256 over the name and the family, with the locally
// administered bit set and the multicast bit cleared. The same node always
// gets the same MAC, so peers' FDB entries survive a restart; the v4 and v6
// devices get different MACs.
func VTEPMAC(nodeName string, ipVersion int) net.HardwareAddr {
	sum := sha256.Sum256([]byte(fmt.Sprintf("routelet-vtep/%s/v%d", nodeName, ipVersion)))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^0x01 | 0x02
	return mac
}

// TunnelAddress returns the node's tunnel address of one family: the first
// address of its first block of that family (the block's network address,
// which IPAM never hands to a pod). ok is false when there is no such block.
func TunnelAddress(blocks []netip.Prefix, ipVersion int) (addr netip.Addr, ok bool) {
	for _, b := range blocks {
		if b.IsValid() && familyOf(b.Addr()) == ipVersion {
			return b.Masked().Addr(), true
		}
	}
	return netip.Addr{}, false
}

// PeerFromNode builds the Peer of one family (4 or 6) from a node record:
// HostIPv4, VTEPMAC and TunnelIPv4 for 4; HostIPv6, VTEPMACv6 and TunnelIPv6
// for 6. The error names the node and the bad value.
func PeerFromNode(n *state.Node, ipVersion int) (Peer, error) {
	if n == nil {
		return Peer{}, fmt.Errorf("peer: nil node record")
	}
	if ipVersion == 6 {
		return ParsePeer(6, n.Name, n.HostIPv6, n.VTEPMACv6, n.TunnelIPv6, n.Blocks)
	}
	return ParsePeer(ipVersion, n.Name, n.HostIPv4, n.VTEPMAC, n.TunnelIPv4, n.Blocks)
}
