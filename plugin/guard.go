package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/podnet"
)

// checkNotSelf refuses an ipam.type under which routelet would run itself as
// its own IPAM plugin (and that one again, without end): the plugin's own
// type, or a name that resolves in cniPath (the way the delegation will look
// it up: first match, symlinks followed) to this very executable, compared
// by device and inode so that hard links count too.
func checkNotSelf(typ, ownType, cniPath string) *types.Error {
	if typ == ownType {
		return cniErr(types.ErrInvalidNetworkConfig, "ipam.type %q: that is this plugin's own type; the plugin would call itself as its IPAM plugin without end", typ)
	}
	path, err := invoke.FindInPath(typ, filepath.SplitList(cniPath))
	if err != nil {
		return nil // not found: the delegation reports that
	}
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		exe, xerr := os.Executable()
		if xerr != nil {
			return nil
		}
		if self, err = os.Stat(exe); err != nil {
			return nil
		}
	}
	if fi, err := os.Stat(path); err == nil && os.SameFile(fi, self) {
		return cniErr(types.ErrInvalidNetworkConfig, "ipam.type %q: %s is this plugin's own executable; the plugin would call itself as its IPAM plugin without end", typ, path)
	}
	return nil
}

// checkIfName refuses a CNI_IFNAME the kernel would not take literally: on
// top of the usual rules (length, '/', ':', white space), '%' makes the
// kernel treat the name as a template ("eth%d") and pick a name itself.
func checkIfName(name string) error {
	if strings.ContainsRune(name, '%') {
		return fmt.Errorf("invalid interface name %q: contains '%%', which the kernel expands as a name template", name)
	}
	return nil
}

// ownedByRoutelet reports whether a link is one routelet made and whose
// addresses and routes are therefore not the node's own space: the
// daemon's rule (overlay.OwnedLinks), a pod veth (prefix and type) or one
// of the overlay devices the node's routeletd names in daemon.json
// (daemonDevices).
func ownedByRoutelet(prefix string, devs overlay.Devices) func(nodespace.Link) bool {
	return overlay.OwnedLinks(prefix, devs)
}

// dropTunnelAddrs removes the node's tunnel addresses (the first address of
// its first block of each family, on whatever overlay device carries it)
// from h's addresses: they are routelet's, inside the daemon's own blocks.
func dropTunnelAddrs(h *nodespace.Host, daemonBlocks []netip.Prefix) {
	var tunnels []netip.Addr
	for _, v := range []int{4, 6} {
		if a, ok := overlay.TunnelAddress(daemonBlocks, v); ok {
			tunnels = append(tunnels, a)
		}
	}
	kept := h.Addrs[:0]
	for _, a := range h.Addrs {
		tunnel := false
		for _, t := range tunnels {
			tunnel = tunnel || a.Addr() == t
		}
		if !tunnel {
			kept = append(kept, a)
		}
	}
	h.Addrs = kept
}

// guardedHost reads the node's addresses and links (routes of protocol
// ownProto and routelet's links, among them the overlay devices devs,
// count as routelet's) and refuses the configuration's interfacePrefix
// when checkPrefix does: the start of ADD, DEL and GC.
func guardedHost(c *config, ownProto int, devs overlay.Devices) (nodespace.Host, *types.Error) {
	host, err := dp.Host(ownProto, ownedByRoutelet(c.Prefix, devs))
	if err != nil {
		return nodespace.Host{}, cniErr(types.ErrInternal, "read the node's addresses and links: %v", err)
	}
	if e := checkPrefix(host, c.Prefix); e != nil {
		return nodespace.Host{}, e
	}
	return host, nil
}

// checkPrefix refuses an interfacePrefix under which DEL and GC would own
// links routelet did not create: one matching the uplink or an existing
// link that is not a veth.
func checkPrefix(h nodespace.Host, prefix string) *types.Error {
	if err := h.CheckInterfacePrefix(prefix); err != nil {
		return cniErr(types.ErrInvalidNetworkConfig, "interfacePrefix: %v", err)
	}
	return nil
}

// checkBlocks refuses conflist ipam.blocks that can never be pod blocks or
// that overlap the node's own addresses and connected subnets.
func checkBlocks(h nodespace.Host, blocks []netip.Prefix) *types.Error {
	for i, b := range blocks {
		if err := h.CheckBlock(b); err != nil {
			return cniErr(types.ErrInvalidNetworkConfig, "ipam.blocks[%d]: %v", i, err)
		}
	}
	return nil
}

// reservedAddrs are the addresses the built-in IPAM must never hand out
// whatever blocks the conflist names: the pod gateway, and the first (the
// node's tunnel address, for the first block of a family) and, for IPv4,
// last address of each of the daemon's published blocks.
func reservedAddrs(daemonBlocks []netip.Prefix) []netip.Addr {
	out := []netip.Addr{podnet.GatewayV4}
	for _, b := range daemonBlocks {
		out = append(out, b.Masked().Addr())
		if b.Addr().Is4() {
			out = append(out, nodespace.LastAddr(b))
		}
	}
	return out
}

// ownerDescription says why DEL or GC leaves a link alone, or "" when the
// link is routelet's to delete: a veth with the prefix that is not the
// uplink.
func ownerDescription(h nodespace.Host, l nodespace.Link, prefix string) string {
	switch {
	case h.HasUplink(l.Name):
		return "it carries the node's default route"
	case l.Type != "veth":
		return fmt.Sprintf("it is a %s, not a veth", l.Type)
	case !nodespace.Owned(l, prefix):
		return fmt.Sprintf("its name lacks the interface prefix %q", prefix)
	}
	return ""
}
