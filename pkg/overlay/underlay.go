package overlay

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/nlutil"
)

// Underlay is the parent interface: the link that holds our host IP.
type Underlay struct {
	Name   string
	Index  int
	MTU    int
	Prefix netip.Prefix // the host IP with the mask it carries on the parent
}

// Subnet returns the parent's subnet (the host prefix masked).
func (u Underlay) Subnet() netip.Prefix { return u.Prefix.Masked() }

// FindParent returns the link holding hostIP, read from one address dump of
// the host IP's family. The error names hostIP when no link holds it.
func FindParent(nl Netlink, hostIP netip.Addr) (Underlay, error) {
	if !hostIP.IsValid() {
		return Underlay{}, fmt.Errorf("find parent: no host IP")
	}
	hostIP = hostIP.Unmap()
	addrs, err := nl.AddrList(nil, nlFamily(familyOf(hostIP)))
	if err != nil {
		return Underlay{}, fmt.Errorf("find parent of %s: list addresses: %w", hostIP, err)
	}
	for _, a := range addrs {
		pfx, ok := addrPrefix(a)
		if !ok || pfx.Addr() != hostIP {
			continue
		}
		link, err := nl.LinkByIndex(a.LinkIndex)
		if err != nil {
			return Underlay{}, fmt.Errorf("find parent of %s: %w", hostIP, err)
		}
		at := link.Attrs()
		return Underlay{Name: at.Name, Index: at.Index, MTU: at.MTU, Prefix: pfx}, nil
	}
	return Underlay{}, fmt.Errorf("find parent: no link holds host IP %s", hostIP)
}

// nlFamily maps 4/6 to netlink's family constants.
func nlFamily(ipVersion int) int {
	if ipVersion == 6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// addrPrefix converts a netlink address to a prefix (address bits kept).
func addrPrefix(a netlink.Addr) (netip.Prefix, bool) { return nlutil.Prefix(a.IPNet) }
