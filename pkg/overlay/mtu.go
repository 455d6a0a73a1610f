package overlay

import "fmt"

// Encapsulation overheads in bytes: outer IP header + UDP + VXLAN + inner
// Ethernet for VXLAN, outer IPv4 header for IPIP.
const (
	OverheadVXLANv4 = 50
	OverheadVXLANv6 = 70
	OverheadIPIP    = 20
)

// WireGuard's overhead in bytes, which replaces the overlay's for pod
// traffic when encryption is on: outer IP header (20 or 40) + UDP (8) +
// WireGuard's data header (16) and authentication tag (16).
const (
	OverheadWireGuardv4 = 60
	OverheadWireGuardv6 = 80
)

// WireGuardOverhead returns WireGuard's overhead on an IPv4 (underlayV6
// false) or IPv6 underlay.
func WireGuardOverhead(underlayV6 bool) int {
	if underlayV6 {
		return OverheadWireGuardv6
	}
	return OverheadWireGuardv4
}

// Overhead returns the bytes the mode's encapsulation adds to a packet on an
// IPv4 (underlayV6 false) or IPv6 underlay. Cross-subnet modes count the
// encapsulated case, since some peers are still reached through the tunnel.
func Overhead(mode Mode, underlayV6 bool) int {
	switch mode {
	case ModeVXLAN, ModeVXLANCrossSubnet:
		if underlayV6 {
			return OverheadVXLANv6
		}
		return OverheadVXLANv4
	case ModeIPIP, ModeIPIPCrossSubnet:
		return OverheadIPIP
	}
	return 0
}

// PodMTU returns the MTU for pod interfaces and overlay devices: configured
// when positive, else the parent's MTU minus the mode's overhead. The error
// names the values when the result would be below the IPv4 minimum of 68 (or
// 1280 for an IPv6 underlay, whose VXLAN device carries IPv6 pods).
func PodMTU(configured, parentMTU int, mode Mode, underlayV6 bool) (int, error) {
	return podMTU(configured, parentMTU, Overhead(mode, underlayV6), string(mode), underlayV6)
}

// WireGuardPodMTU is PodMTU with encryption on: the MTU for pod
// interfaces and the WireGuard device, configured when positive, else the
// parent's MTU minus WireGuard's overhead (WireGuardOverhead), whatever
// the encapsulation (WireGuard carries all pod traffic between nodes).
func WireGuardPodMTU(configured, parentMTU int, underlayV6 bool) (int, error) {
	return podMTU(configured, parentMTU, WireGuardOverhead(underlayV6), "WireGuard", underlayV6)
}

func podMTU(configured, parentMTU, overhead int, what string, underlayV6 bool) (int, error) {
	if configured > 0 {
		return configured, nil
	}
	mtu := parentMTU - overhead
	floor := 68
	if underlayV6 {
		floor = 1280
	}
	if mtu < floor {
		return 0, fmt.Errorf("mtu: parent MTU %d minus %s overhead %d is %d, below the minimum %d",
			parentMTU, what, overhead, mtu, floor)
	}
	return mtu, nil
}
