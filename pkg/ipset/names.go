package ipset

import (
	"fmt"
	"strings"
)

// Names of routelet's sets (docs/design.md). The IPv6 twin of a set carries
// [V6Suffix]; IPIP is IPv4 only, so IPIPPeers has no twin.
const (
	// Prefix starts the name of every set routelet owns; no other set is
	// ever touched.
	Prefix = "routelet-"
	// VXLANPeers holds the underlay addresses allowed to send VXLAN to
	// this node: peer host IPs and configured external node CIDRs.
	VXLANPeers = "routelet-vxlan-peers"
	// IPIPPeers holds the underlay addresses allowed to send IPIP.
	IPIPPeers = "routelet-ipip-peers"
	// WireGuardPeers holds the underlay addresses allowed to send to the
	// WireGuard port: peer host IPs. Its IPv6 twin, with the scratch
	// suffix, is exactly MaxNameLen long.
	WireGuardPeers = "routelet-wireguard-peers"
	// Pools holds every pod CIDR of the cluster; NAT outgoing leaves
	// traffic between two of them alone.
	Pools = "routelet-pools"
	// NATPools holds the pod CIDRs whose traffic NAT outgoing masquerades
	// (every pool unless only some are configured for it).
	NATPools = "routelet-nat-pools"
	// V6Suffix names the IPv6 twin of a set.
	V6Suffix = "-v6"
	// TmpSuffix names the scratch set a whole-set rewrite is built in.
	TmpSuffix = "-tmp"
	// MaxNameLen is the kernel's limit on a set name (IPSET_MAXNAMELEN
	// minus the terminating NUL).
	MaxNameLen = 31
	// HashNet is the set type routelet uses.
	HashNet = "hash:net"
)

// Family is the address family of a set.
type Family uint8

// The set families, with the kernel's NFPROTO values.
const (
	IPv4 Family = 2
	IPv6 Family = 10
)

// String returns "inet" or "inet6", as `ipset list` prints them.
func (f Family) String() string {
	switch f {
	case IPv4:
		return "inet"
	case IPv6:
		return "inet6"
	}
	return fmt.Sprintf("family(%d)", uint8(f))
}

// Name returns the set name for base in family f: base itself for IPv4,
// base+V6Suffix for IPv6.
func Name(base string, f Family) string {
	if f == IPv6 {
		return base + V6Suffix
	}
	return base
}

// tmpName returns the scratch set used to rewrite name.
func tmpName(name string) string { return name + TmpSuffix }

// Owned reports whether routelet owns the set called name: ownership is
// decided by the Prefix alone.
func Owned(name string) bool { return strings.HasPrefix(name, Prefix) }

// validName checks that name is one routelet may manage: it carries the
// prefix and leaves room for the scratch suffix within the kernel's limit.
func validName(name string) error {
	if !Owned(name) {
		return fmt.Errorf("ipset name %q: not owned by routelet (no %q prefix)", name, Prefix)
	}
	if len(name)+len(TmpSuffix) > MaxNameLen {
		return fmt.Errorf("ipset name %q: longer than %d characters with the %q suffix", name, MaxNameLen, TmpSuffix)
	}
	if strings.ContainsAny(name, " \t\n\x00") {
		return fmt.Errorf("ipset name %q: contains whitespace or NUL", name)
	}
	return nil
}
