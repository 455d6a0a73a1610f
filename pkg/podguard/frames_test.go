package podguard

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// Ethernet types the kernel tests send (those unix names differently or
// not at all).
const (
	etherQ      = unix.ETH_P_8021Q  // 802.1Q C-tag
	etherAD     = unix.ETH_P_8021AD // 802.1ad S-tag
	etherMPLS   = unix.ETH_P_MPLS_UC
	etherMPLSMC = unix.ETH_P_MPLS_MC
	etherPPPD   = unix.ETH_P_PPP_DISC
	etherPPPS   = unix.ETH_P_PPP_SES
	etherLocal  = 0x88b5 // IEEE 802 local experimental Ethertype 1
)

// frame is an Ethernet frame from src to dst: tags are the TPIDs of VLAN
// tags (outermost first, VID 0), then typ and payload.
func frame(dst, src net.HardwareAddr, tags []uint16, typ uint16, payload []byte) []byte {
	b := append(append([]byte{}, dst...), src...)
	for _, tpid := range tags {
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, 0) // PCP 0, DEI 0, VID 0
	}
	b = binary.BigEndian.AppendUint16(b, typ)
	return append(b, payload...)
}

// checksum is the Internet checksum of b, folded, not complemented.
func checksum(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum
}

// udp is a UDP header and data from sport to dport; its checksum is
// computed over the pseudo header of src and dst.
func udp(src, dst netip.Addr, sport, dport uint16, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(data)))
	b = append(b, 0, 0)
	b = append(b, data...)
	pseudo := append(src.AsSlice(), dst.AsSlice()...)
	pseudo = append(pseudo, 0, unix.IPPROTO_UDP)
	pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(b)))
	sum := ^uint16(checksum(checksum(0, pseudo), b))
	if sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(b[6:], sum)
	return b
}

// ipUDP is an IPv4 or IPv6 packet (src's family) carrying a UDP datagram
// from src port 40000 to dst port dport; it returns the packet and its
// Ethernet type.
func ipUDP(src, dst netip.Addr, dport uint16, data []byte) ([]byte, uint16) {
	l4 := udp(src, dst, 40000, dport, data)
	if src.Is6() {
		h := []byte{0x60, 0, 0, 0}
		h = binary.BigEndian.AppendUint16(h, uint16(len(l4)))
		h = append(h, unix.IPPROTO_UDP, 64)
		h = append(append(h, src.AsSlice()...), dst.AsSlice()...)
		return append(h, l4...), unix.ETH_P_IPV6
	}
	h := []byte{0x45, 0}
	h = binary.BigEndian.AppendUint16(h, uint16(20+len(l4)))
	h = append(h, 0, 0, 0x40, 0, 64, unix.IPPROTO_UDP, 0, 0) // id 0, DF, TTL 64
	h = append(append(h, src.AsSlice()...), dst.AsSlice()...)
	binary.BigEndian.PutUint16(h[10:], ^uint16(checksum(0, h)))
	return append(h, l4...), unix.ETH_P_IP
}

// vxlan is a VXLAN header (VNI 1) and an inner Ethernet frame carrying an
// IPv4 UDP datagram from innerSrc to innerDst, as a peer's tunnel would.
func vxlan(innerSrc, innerDst netip.Addr, data []byte) []byte {
	inner, typ := ipUDP(innerSrc, innerDst, 7, data)
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	return append([]byte{0x08, 0, 0, 0, 0, 0, 1, 0}, frame(mac, mac, nil, typ, inner)...)
}

// arp is an ARP request (Ethernet, IPv4) from sha and spa for tpa.
func arp(sha net.HardwareAddr, spa, tpa netip.Addr) []byte {
	b := []byte{0, 1, 0x08, 0, 6, 4, 0, 1}
	b = append(append(b, sha...), spa.AsSlice()...)
	b = append(append(b, 0, 0, 0, 0, 0, 0), tpa.AsSlice()...)
	return b
}

// TestFrameChecksums: the IPv4 header and UDP checksums the tests'
// packets carry verify (sum to 0xffff).
func TestFrameChecksums(t *testing.T) {
	for _, src := range []string{"10.66.0.3", "fd66::3"} {
		s := netip.MustParseAddr(src)
		d := netip.MustParseAddr("10.66.0.1")
		hl := 20
		if s.Is6() {
			d, hl = netip.MustParseAddr("fd66::1"), 40
		}
		p, _ := ipUDP(s, d, 9, []byte("odd"))
		if s.Is4() && checksum(0, p[:20]) != 0xffff {
			t.Errorf("%s: IPv4 header checksum does not verify", src)
		}
		pseudo := append(s.AsSlice(), d.AsSlice()...)
		pseudo = append(pseudo, 0, unix.IPPROTO_UDP, 0, byte(len(p)-hl))
		if checksum(checksum(0, pseudo), p[hl:]) != 0xffff {
			t.Errorf("%s: UDP checksum does not verify", src)
		}
	}
}
