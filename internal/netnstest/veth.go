package netnstest

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// AddVeth creates the veth pair name/peer in h's namespace, sets both ends
// up and returns the first end as the kernel reports it.
func AddVeth(h *netlink.Handle, name, peer string) (netlink.Link, error) {
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
		return nil, fmt.Errorf("add veth %s/%s: %w", name, peer, err)
	}
	for _, n := range []string{name, peer} {
		l, err := h.LinkByName(n)
		if err != nil {
			return nil, fmt.Errorf("veth %s: %w", n, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %s up: %w", n, err)
		}
	}
	return h.LinkByName(name)
}
