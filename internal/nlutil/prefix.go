package nlutil

import (
	"net"
	"net/netip"
)

// Prefix converts an address or destination as netlink reports it to a
// prefix: the address bits kept, IPv4 unmapped. ok is false for a nil
// network, an address of no family or a mask that is not a prefix length.
func Prefix(n *net.IPNet) (p netip.Prefix, ok bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a.Unmap(), ones), true
}
