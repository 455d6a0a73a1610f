package nodespace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// special lists address space that is never a pod block, with the reason
// given in errors.
var special = []struct {
	p    netip.Prefix
	what string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "the IPv4 \"this network\" range 0.0.0.0/8"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback 127.0.0.0/8"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local 169.254.0.0/16 (it holds the pod gateway 169.254.1.1)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast 224.0.0.0/4"},
	{netip.MustParsePrefix("240.0.0.0/4"), "the reserved range 240.0.0.0/4 (and broadcast)"},
	{netip.MustParsePrefix("::/128"), "the unspecified address ::"},
	{netip.MustParsePrefix("::1/128"), "loopback ::1"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped ::ffff:0:0/96"},
	{netip.MustParsePrefix("fe80::/10"), "link-local fe80::/10 (it holds the pod gateway fe80::ecee:eeff:feee:eeee)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast ff00::/8"},
}

// SpecialRange reports the special-purpose range p overlaps (loopback,
// link-local, multicast, …) as a phrase for an error message, or "" when p
// is ordinary unicast space. A /0 overlaps everything and is reported as
// such.
func SpecialRange(p netip.Prefix) string {
	if p.Bits() == 0 {
		return "every address (a /0)"
	}
	for _, s := range special {
		if s.p.Addr().BitLen() == p.Addr().BitLen() && s.p.Overlaps(p) {
			return s.what
		}
	}
	return ""
}

// CheckBlock refuses a prefix that can never be a pod block on any node:
// invalid, not masked, zoned or IPv4-mapped, /0, overlapping loopback,
// link-local, multicast or other special space, or too small to hold a pod
// once IPAM's reserved addresses (the first, and for IPv4 also the last)
// are taken out (IPv4 needs /30 or larger, IPv6 /127 or larger).
func CheckBlock(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return fmt.Errorf("block %q is not a valid CIDR", p.String())
	case p.Addr().Zone() != "":
		return fmt.Errorf("block %s: zones are not allowed", p)
	case p.Addr().Is4In6():
		return fmt.Errorf("block %s: IPv4-mapped IPv6 blocks are not supported, use the IPv4 prefix", p)
	case p != p.Masked():
		return fmt.Errorf("block %s: host bits set (did you mean %s?)", p, p.Masked())
	}
	if why := SpecialRange(p); why != "" {
		return fmt.Errorf("block %s overlaps %s", p, why)
	}
	if p.Addr().Is4() && p.Bits() > 30 {
		return fmt.Errorf("block %s is too small: its first and last addresses are reserved, an IPv4 block must be /30 or larger", p)
	}
	if p.Addr().Is6() && p.Bits() > 127 {
		return fmt.Errorf("block %s is too small: its first address is reserved, an IPv6 block must be /127 or larger", p)
	}
	return nil
}

// Link is what the checks need to know about one network interface.
type Link struct {
	Name  string
	Index int
	Type  string // netlink kind: "veth", "bridge", "device", "vxlan", …
}

// Host is a snapshot of one network namespace's own address space and links.
type Host struct {
	// Addrs are the namespace's addresses with their prefix lengths, so that
	// each also stands for its connected subnet (10.0.0.5/24 → 10.0.0.0/24).
	Addrs []netip.Prefix
	// Connected are destinations of scope-link routes in the main table that
	// routelet did not program (another protocol), e.g. a static on-link
	// subnet.
	Connected []netip.Prefix
	// Links are every link in the namespace.
	Links []Link
	// Uplinks are the names of the links that carry a default route.
	Uplinks []string
}

// Overlap reports the first address or connected subnet of h that p
// overlaps, as a phrase for an error message, or "".
func (h Host) Overlap(p netip.Prefix) string {
	for _, a := range h.Addrs {
		if a.Addr().BitLen() != p.Addr().BitLen() {
			continue
		}
		if p.Contains(a.Addr()) {
			return fmt.Sprintf("the node's address %s", a.Addr())
		}
		if a.Masked().Overlaps(p) && a.Bits() > 0 {
			return fmt.Sprintf("the node's connected subnet %s (address %s)", a.Masked(), a.Addr())
		}
	}
	for _, c := range h.Connected {
		if c.Addr().BitLen() == p.Addr().BitLen() && c.Overlaps(p) && c.Bits() > 0 {
			return fmt.Sprintf("the node's connected route %s", c)
		}
	}
	return ""
}

// CheckBlock is the pure CheckBlock plus: p must not overlap any of the
// node's own addresses or connected subnets.
func (h Host) CheckBlock(p netip.Prefix) error {
	if err := CheckBlock(p); err != nil {
		return err
	}
	if what := h.Overlap(p); what != "" {
		return fmt.Errorf("block %s overlaps %s", p, what)
	}
	return nil
}

// CheckInterfacePrefix refuses an interface prefix under which routelet
// would take ownership of links it did not create: empty, longer than 11
// characters (the host veth name adds 4 or more), containing characters
// that are not allowed in a link name (or '%', which the kernel expands),
// matching an uplink, or matching any existing link that is not a veth.
// Existing veths under the prefix are taken to be routelet's own.
func (h Host) CheckInterfacePrefix(prefix string) error {
	if err := CheckPrefixSyntax(prefix); err != nil {
		return err
	}
	for _, u := range h.Uplinks {
		if strings.HasPrefix(u, prefix) {
			return fmt.Errorf("interface prefix %q matches the node's uplink %s", prefix, u)
		}
	}
	for _, l := range h.Links {
		if strings.HasPrefix(l.Name, prefix) && l.Type != "veth" {
			return fmt.Errorf("interface prefix %q matches the existing %s link %s, which routelet did not create", prefix, l.Type, l.Name)
		}
	}
	return nil
}

// CheckPrefixSyntax checks only the form of an interface prefix.
func CheckPrefixSyntax(prefix string) error {
	switch {
	case prefix == "":
		return fmt.Errorf("interface prefix is empty")
	case len(prefix) > 11:
		return fmt.Errorf("interface prefix %q is longer than 11 characters (a link name holds 15)", prefix)
	case strings.ContainsAny(prefix, "/%:. \t\n\x00"):
		return fmt.Errorf("interface prefix %q contains a character not allowed in a link name ('/', '%%', ':', '.', white space)", prefix)
	}
	return nil
}

// Owned reports whether a link is routelet's to touch as a pod interface:
// its name has the prefix and it is a veth.
func Owned(l Link, prefix string) bool {
	return prefix != "" && strings.HasPrefix(l.Name, prefix) && l.Type == "veth"
}

// HasUplink reports whether name carries a default route.
func (h Host) HasUplink(name string) bool { return slices.Contains(h.Uplinks, name) }

// LastAddr returns the highest address of p.
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Reserved reports whether addr is one of the addresses IPAM never hands
// out in block: its first (the node's tunnel address, for its first IPv4
// block) and, for IPv4, its last.
func Reserved(block netip.Prefix, addr netip.Addr) bool {
	return addr == block.Masked().Addr() || block.Addr().Is4() && addr == LastAddr(block)
}
