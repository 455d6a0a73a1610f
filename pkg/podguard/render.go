package podguard

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/defaults"
)

// TableName is routelet's netdev table; nothing outside it is touched.
const TableName = "routelet"

// DefaultVXLANPort is the VXLAN port dropped when a Spec names none.
const DefaultVXLANPort = defaults.VXLANPort

// maxDevice is the longest interface name the kernel takes (IFNAMSIZ-1).
const maxDevice = 15

// Spec is the guard of one pod veth.
type Spec struct {
	Device    string       // the host veth; also the chain's name
	Addrs     []netip.Addr // the pod's addresses: the only sources let through
	VXLANPort uint16       // UDP port dropped from the pod; 0: DefaultVXLANPort
}

// Validate refuses a spec that cannot be rendered: an empty or over-long
// device name, one with '/' or white space, or an address that is not an
// ordinary unicast address.
func (s Spec) Validate() error {
	if s.Device == "" || len(s.Device) > maxDevice || strings.ContainsAny(s.Device, "/ \t\n\x00") {
		return fmt.Errorf("pod guard: device name %q: not an interface name", s.Device)
	}
	for _, a := range s.Addrs {
		if !a.IsValid() || a.Is4In6() || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
			return fmt.Errorf("pod guard %s: address %s: not a pod address", s.Device, a)
		}
	}
	return nil
}

// port is the VXLAN port the guard drops.
func (s Spec) port() uint16 {
	if s.VXLANPort == 0 {
		return DefaultVXLANPort
	}
	return s.VXLANPort
}

// table is routelet's netdev table.
func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyNetdev}
}

// chain is the base chain of device on its ingress hook.
func chain(device string) *nftables.Chain {
	policy := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Name:     device,
		Table:    table(),
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookIngress,
		Priority: nftables.ChainPriorityRef(0),
		Policy:   &policy,
		Device:   device,
	}
}

// Ethernet protocol numbers as the Ethernet header and meta protocol hold
// them (network order).
var (
	etherIPv4 = binaryutil.BigEndian.PutUint16(unix.ETH_P_IP)
	etherIPv6 = binaryutil.BigEndian.PutUint16(unix.ETH_P_IPV6)
	etherARP  = binaryutil.BigEndian.PutUint16(unix.ETH_P_ARP)
)

// arpIPv4 is what an ARP packet the kernel processes on an Ethernet device
// holds from its protocol type on: IPv4, hardware address length 6,
// protocol address length 4 (arp_rcv and arp_process ignore any other).
var arpIPv4 = []byte{0x08, 0x00, 6, 4}

// Rules renders the guard's rules, in order: the drop of every frame whose
// Ethernet type is not IPv4, IPv6 or ARP (VLAN tags included), the VXLAN
// and IPIP drops, an accept per pod address (IPv4 first, each family in
// address order), an accept of ARP per pod IPv4 address as sender, the
// IPv6 link-local and unspecified-source accepts, and the drops of every
// other ARP, IPv4 and IPv6 packet. Every drop counts.
func Rules(s Spec) [][]expr.Any {
	out := [][]expr.Any{
		{ // ether type != ip ether type != ip6 ether type != arp counter drop
			// The link-layer header as nft_payload shows it: a VLAN tag
			// the kernel already moved into the packet's metadata (the
			// outer one of any tagged frame, before this hook) is put back
			// in place, so offset 12 is the outermost Ethernet type.
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 12, Len: 2},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: etherIPv4},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: etherIPv6},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: etherARP},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		},
		{ // udp dport PORT counter drop
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(s.port())},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		},
		{ // meta l4proto ipip counter drop
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_IPIP}},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		},
	}
	addrs := slices.Clone(s.Addrs)
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	addrs = slices.Compact(addrs)
	for _, a := range addrs {
		out = append(out, acceptSource(a))
	}
	for _, a := range addrs {
		if a.Is4() {
			out = append(out, acceptARP(a))
		}
	}
	// ip6 saddr fe80::/10 accept
	mask, linkLocal := make([]byte, 16), make([]byte, 16)
	mask[0], mask[1], linkLocal[0], linkLocal[1] = 0xff, 0xc0, 0xfe, 0x80
	out = append(out, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: etherIPv6},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 16, Mask: mask, Xor: make([]byte, 16)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: linkLocal},
		&expr.Verdict{Kind: expr.VerdictAccept},
	})
	out = append(out, acceptSource(netip.IPv6Unspecified()))
	for _, proto := range [][]byte{etherARP, etherIPv4, etherIPv6} {
		out = append(out, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: proto},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		})
	}
	return out
}

// minRules is how many rules the guard of a pod without addresses has:
// the three leading drops, the two IPv6 accepts and the three family
// drops.
const minRules = 3 + 2 + 3

// acceptARP accepts the ARP packets (Ethernet, IPv4) whose sender
// protocol address is a, an IPv4 address.
func acceptARP(a netip.Addr) []expr.Any {
	return []expr.Any{ // arp ptype ip arp hlen 6 arp plen 4 arp saddr ip A accept
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: etherARP},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 2, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: arpIPv4},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 14, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// acceptSource accepts the packets of a's family whose source is a (an
// IPv4 or IPv6 address, never IPv4-mapped: Spec.Validate refuses those).
func acceptSource(a netip.Addr) []expr.Any {
	proto, off := etherIPv4, uint32(12)
	if a.Is6() {
		proto, off = etherIPv6, 8
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: proto},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(a.BitLen() / 8)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// Drops are the packets a guard's drop rules counted.
type Drops struct {
	Ethertype   uint64 // frames of another Ethernet type than IPv4, IPv6 and ARP (any VLAN-tagged frame)
	VXLAN, IPIP uint64 // encapsulated packets from the pod
	ARP         uint64 // ARP packets with a sender address not the pod's
	Spoof4      uint64 // IPv4 packets with a source not the pod's
	Spoof6      uint64 // IPv6 packets with a source not the pod's (nor link-local or unspecified)
}

// sameRules reports whether the kernel's rules are the rendered ones,
// counter values aside.
func sameRules(want, have [][]expr.Any) bool {
	if len(want) != len(have) {
		return false
	}
	for i := range want {
		if len(want[i]) != len(have[i]) {
			return false
		}
		for j := range want[i] {
			if !sameExpr(want[i][j], have[i][j]) {
				return false
			}
		}
	}
	return true
}

// sameExpr compares one expression; only the kinds Rules renders can
// match, everything else is drift.
func sameExpr(w, h expr.Any) bool {
	switch w := w.(type) {
	case *expr.Meta:
		h, ok := h.(*expr.Meta)
		return ok && *w == *h
	case *expr.Cmp:
		h, ok := h.(*expr.Cmp)
		return ok && w.Op == h.Op && w.Register == h.Register && bytes.Equal(w.Data, h.Data)
	case *expr.Payload:
		h, ok := h.(*expr.Payload)
		return ok && *w == *h
	case *expr.Bitwise:
		h, ok := h.(*expr.Bitwise)
		return ok && w.SourceRegister == h.SourceRegister && w.DestRegister == h.DestRegister &&
			w.Len == h.Len && bytes.Equal(w.Mask, h.Mask) && bytes.Equal(w.Xor, h.Xor)
	case *expr.Counter:
		_, ok := h.(*expr.Counter)
		return ok
	case *expr.Verdict:
		h, ok := h.(*expr.Verdict)
		return ok && w.Kind == h.Kind && w.Chain == h.Chain
	}
	return false
}
