package bgpmgr

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/bgp"
	"github.com/routelet/routelet/pkg/routes"
)

// The reasons a learned route is refused.
const (
	reasonOutsidePools = statusapi.BGPRefusedOutsidePools
	reasonOwnBlock     = statusapi.BGPRefusedOwnBlock
	reasonDefault      = statusapi.BGPRefusedDefault
	reasonUnderlay     = statusapi.BGPRefusedUnderlay
	reasonNextHop      = statusapi.BGPRefusedNextHop
	reasonNotOwner     = statusapi.BGPRefusedNotOwner
	reasonUnreachable  = statusapi.BGPRefusedNextHopUnreachable
)

// Reasons lists every refusal reason, in the order the checks run.
var Reasons = []string{reasonDefault, reasonOutsidePools, reasonOwnBlock, reasonUnderlay, reasonNextHop, reasonNotOwner, reasonUnreachable}

// refusal is one learned route refused.
type refusal struct {
	bgp.Route
	reason, detail string
	since          time.Time
}

// check runs the trust checks on one learned route, in order: not a
// default route; inside a pool (Config.Pools, else a known node block);
// overlapping none of this node's blocks; holding no node's host IP and
// no local address; a next hop of the prefix's family that is neither
// local nor inside the pools or blocks; from a mesh peer, inside that
// node's own blocks; a next hop the kernel reaches over the uplink. It
// returns the route's target, or the reason it is refused and a detail.
func (m *Manager) check(r bgp.Route) (t routes.Target, reason, detail string) {
	p := r.Prefix.Masked()
	nh := r.NextHop.Unmap()
	switch {
	case !p.IsValid():
		return t, reasonDefault, "not a prefix"
	case p.Bits() == 0:
		return t, reasonDefault, "a default route is never programmed"
	}
	if !m.inPools(p) {
		return t, reasonOutsidePools, "not inside " + m.poolsName()
	}
	for _, b := range m.cfg.LocalBlocks {
		if b.Overlaps(p) {
			return t, reasonOwnBlock, "overlaps this node's block " + b.String()
		}
	}
	if a, ok := m.holdsHost(p); ok {
		return t, reasonUnderlay, "holds the host address " + a.String()
	}
	switch {
	case !nh.IsValid() || nh.IsUnspecified():
		return t, reasonNextHop, "no next hop"
	case nh.Is4() != p.Addr().Is4():
		return t, reasonNextHop, fmt.Sprintf("next hop %s is of the other family", nh)
	case nh.IsLoopback() || nh.IsMulticast() || (nh.Is4() && nh.IsLinkLocalUnicast()):
		return t, reasonNextHop, fmt.Sprintf("next hop %s is not a unicast address", nh)
	case m.isLocal(nh):
		return t, reasonNextHop, fmt.Sprintf("next hop %s is this node's", nh)
	case m.inPools(netip.PrefixFrom(nh, nh.BitLen())) || m.inLocalBlocks(nh):
		return t, reasonNextHop, fmt.Sprintf("next hop %s is inside the pod address space", nh)
	}
	if owner, ok := m.mesh[r.Peer.Unmap()]; ok {
		n := m.nodes[owner]
		if !slices.ContainsFunc(n.blocks, func(b netip.Prefix) bool { return b.Bits() <= p.Bits() && b.Contains(p.Addr()) }) {
			return t, reasonNotOwner, fmt.Sprintf("the mesh peer %s announced a prefix outside its blocks %v", owner, n.blocks)
		}
	}
	res := m.resolve(nh)
	if res.err != "" {
		return t, reasonUnreachable, res.err
	}
	return routes.Target{CIDR: p, Type: routes.TypeGateway, Gateway: res.gw}, "", ""
}

// inPools reports whether p is inside a pool: Config.Pools, or when there
// are none a known node block (this node's included).
func (m *Manager) inPools(p netip.Prefix) bool {
	inside := func(b netip.Prefix) bool { return b.Bits() <= p.Bits() && b.Contains(p.Addr()) }
	if len(m.cfg.Pools) > 0 {
		return slices.ContainsFunc(m.cfg.Pools, inside)
	}
	if slices.ContainsFunc(m.cfg.LocalBlocks, inside) {
		return true
	}
	lens := m.blockLens[0]
	if p.Addr().Is6() {
		lens = m.blockLens[1]
	}
	for _, bits := range lens {
		if bits > p.Bits() {
			break
		}
		if _, ok := m.blockOwner[netip.PrefixFrom(p.Addr(), bits).Masked()]; ok {
			return true
		}
	}
	return false
}

// inLocalBlocks reports whether a is inside one of this node's blocks.
func (m *Manager) inLocalBlocks(a netip.Addr) bool {
	return slices.ContainsFunc(m.cfg.LocalBlocks, func(b netip.Prefix) bool { return b.Contains(a) })
}

// poolsName says what the pools are, for a refusal's detail.
func (m *Manager) poolsName() string {
	if len(m.cfg.Pools) > 0 {
		return fmt.Sprintf("the pools %v", m.cfg.Pools)
	}
	return "a known node block"
}

// holdsHost returns a node host IP or local address inside p.
func (m *Manager) holdsHost(p netip.Prefix) (netip.Addr, bool) {
	first := p.Addr()
	i, _ := slices.BinarySearchFunc(m.hostIPs, first, netip.Addr.Compare)
	if i < len(m.hostIPs) && p.Contains(m.hostIPs[i]) {
		return m.hostIPs[i], true
	}
	return netip.Addr{}, false
}

// resolve says which gateway reaches next hop nh over the uplink: nh
// itself when it is on a connected subnet of the uplink (or an IPv6
// link-local address), else the gateway of the kernel's route to it,
// asked once per route check period.
func (m *Manager) resolve(nh netip.Addr) resolved {
	if nh.Is6() && nh.IsLinkLocalUnicast() {
		return resolved{gw: nh}
	}
	if slices.ContainsFunc(m.cfg.Subnets, func(s netip.Prefix) bool { return s.Contains(nh) }) {
		return resolved{gw: nh}
	}
	if res, ok := m.resolveMemo[nh]; ok {
		return res
	}
	gw, iface, err := m.cfg.Resolve(nh)
	var res resolved
	switch {
	case err != nil:
		res.err = fmt.Sprintf("no route to the next hop %s: %v", nh, err)
	case iface != m.cfg.Iface:
		res.err = fmt.Sprintf("the next hop %s is reached through %s, not the uplink %s", nh, orNone(iface), m.cfg.Iface)
	case !gw.IsValid():
		res.gw = nh
	case gw.Unmap().Is4() != nh.Is4():
		res.err = fmt.Sprintf("the next hop %s is reached through a gateway of the other family, %s", nh, gw)
	default:
		res.gw = gw.Unmap()
	}
	m.resolveMemo[nh] = res
	return res
}

func orNone(s string) string {
	if s == "" {
		return "no interface"
	}
	return s
}
