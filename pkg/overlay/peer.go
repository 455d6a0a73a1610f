package overlay

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"

	"github.com/routelet/routelet/pkg/defaults"
)

// Default device names and VXLAN parameters (docs/design.md).
const (
	DeviceVXLAN   = defaults.DeviceVXLAN
	DeviceVXLANv6 = defaults.DeviceVXLANv6
	DeviceIPIP    = defaults.DeviceIPIP
	DefaultVNI    = 4096
	DefaultPort   = defaults.VXLANPort
)

// Peer is another node as one IP family's overlay sees it. A dual-stack
// daemon builds one Peer per family from the same validated node
// (pkg/peers.NodeInfo); nothing here parses records.
type Peer struct {
	Name     string
	HostIP   netip.Addr       // the peer's underlay address (outer destination)
	VTEPMAC  net.HardwareAddr // the peer's VXLAN device MAC; nil outside VXLAN
	TunnelIP netip.Addr       // the peer's VXLAN/IPIP device address; invalid when unknown
	Blocks   []netip.Prefix   // the peer's pod blocks of this family
}

// isZeroMAC reports whether every byte of mac is zero.
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
