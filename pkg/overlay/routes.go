package overlay

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/routelet/routelet/pkg/routes"
)

// Mode is how pods on other nodes are reached.
type Mode string

// The modes. The cross-subnet variants reach peers on our parent's subnet
// directly and the others through the tunnel; ModeNone reaches every peer
// directly (host-gw) and only works for peers on our subnet.
const (
	ModeVXLAN            Mode = "vxlan"
	ModeVXLANCrossSubnet Mode = "vxlan-cross-subnet"
	ModeIPIP             Mode = "ipip"
	ModeIPIPCrossSubnet  Mode = "ipip-cross-subnet"
	ModeNone             Mode = "none"
)

// ParseMode maps the daemon's --encapsulation and --cross-subnet to a Mode.
// The error names the bad encapsulation.
func ParseMode(encapsulation string, crossSubnet bool) (Mode, error) {
	switch strings.ToLower(encapsulation) {
	case "vxlan":
		if crossSubnet {
			return ModeVXLANCrossSubnet, nil
		}
		return ModeVXLAN, nil
	case "ipip":
		if crossSubnet {
			return ModeIPIPCrossSubnet, nil
		}
		return ModeIPIP, nil
	case "none", "":
		return ModeNone, nil
	}
	return "", fmt.Errorf("encapsulation %q: want vxlan, ipip or none", encapsulation)
}

// VXLAN reports whether the mode uses the VXLAN device.
func (m Mode) VXLAN() bool { return m == ModeVXLAN || m == ModeVXLANCrossSubnet }

// IPIP reports whether the mode uses the IPIP device.
func (m Mode) IPIP() bool { return m == ModeIPIP || m == ModeIPIPCrossSubnet }

// crossSubnet reports whether peers on our subnet are reached directly.
func (m Mode) crossSubnet() bool {
	return m == ModeVXLANCrossSubnet || m == ModeIPIPCrossSubnet || m == ModeNone
}

// RouteInput is what Routes needs, for one IP family.
type RouteInput struct {
	Mode      Mode
	IPVersion int // 4 or 6: the family of the blocks routed
	// Parent is our underlay interface; ParentSubnets its subnets of this
	// family (Underlay.Subnet). A peer whose host IP is inside one of them is
	// "on our subnet".
	Parent        string
	ParentSubnets []netip.Prefix
	// LocalBlocks are our own blocks: a peer block overlapping one is never
	// routed away from us.
	LocalBlocks []netip.Prefix
	// MTU is set on encapsulated routes (0 = none); direct routes carry none.
	MTU int
	// VXLANDevice and IPIPDevice default to DeviceVXLAN (DeviceVXLANv6 for
	// IPVersion 6) and DeviceIPIP.
	VXLANDevice string
	IPIPDevice  string
	Peers       []Peer
}

func (in RouteInput) vxlanDevice() string {
	if in.VXLANDevice != "" {
		return in.VXLANDevice
	}
	if in.IPVersion == 6 {
		return DeviceVXLANv6
	}
	return DeviceVXLAN
}

func (in RouteInput) ipipDevice() string {
	if in.IPIPDevice != "" {
		return in.IPIPDevice
	}
	return DeviceIPIP
}

// OwnedInterfaces returns the interfaces on which the RouteTable of this
// family must own routelet-protocol routes whatever the current mode: the
// overlay devices of every mode (VXLAN device, and for IPv4 the IPIP device)
// and the parent. The daemon lists them all in routes.Config.InterfaceNames
// and feeds every key of Routes' result (which always has all of them, empty
// when nothing is desired) to SetRoutes, so after a mode switch — at runtime
// or across a restart — the old mode's routes (our protocol on an interface
// that now wants none) are deleted, while routes others made on the parent
// are never touched.
func OwnedInterfaces(in RouteInput) []string {
	names := []string{in.vxlanDevice()}
	if in.IPVersion != 6 {
		names = append(names, in.ipipDevice())
	}
	if in.Parent != "" && !slices.Contains(names, in.Parent) {
		names = append(names, in.Parent)
	}
	return names
}

// Routes computes the desired overlay routes of one family, grouped by
// interface; every interface of OwnedInterfaces is a key. Each peer block
// becomes, by mode:
//
//   - VXLAN: "<block> via <peer tunnel IP> dev <vxlan device> onlink", MTU;
//   - IPIP (IPv4 only): "<block> via <peer host IP> dev tunl0 onlink", MTU;
//   - direct: "<block> via <peer host IP> dev <parent>", for peers on our
//     parent's subnet in the cross-subnet modes, and for every peer in
//     ModeNone.
//
// Peers that cannot be routed (no tunnel IP or VTEP MAC in VXLAN mode, not
// on our subnet in ModeNone, IPv6 in an IPIP mode off our subnet, a block
// overlapping ours or claimed by an earlier peer by name) are left out and
// reported, one error each naming the peer; the rest are still returned.
// Routes is pure: it reads nothing but in.
func Routes(in RouteInput) (map[string][]routes.Target, []error) {
	var rb RouteBuilder
	return rb.Routes(in)
}

// RouteBuilder computes Routes reusing its memory from one call to the
// next: a caller that recomputes the routes on every peer change (and
// copies what it keeps) allocates a few small values per call in the
// steady state, none per peer.
// The zero value is ready; it is not safe for concurrent use.
type RouteBuilder struct {
	// outs are the results of the last two calls, alternately reused.
	outs   [2]map[string][]routes.Target
	calls  int
	blocks blockIndex
}

// Routes is the package's Routes. Its result (maps and slices) stays valid
// until the call after next, so a caller can compare it with the one
// before.
func (rb *RouteBuilder) Routes(in RouteInput) (map[string][]routes.Target, []error) {
	rb.calls++
	out := rb.outs[rb.calls%2]
	if out == nil {
		out = make(map[string][]routes.Target)
		rb.outs[rb.calls%2] = out
	}
	for name, ts := range out {
		out[name] = ts[:0]
	}
	owned := OwnedInterfaces(in)
	for name := range out {
		if !slices.Contains(owned, name) {
			delete(out, name)
		}
	}
	for _, name := range owned {
		if _, ok := out[name]; !ok {
			out[name] = nil
		}
	}
	var problems []error
	peers := in.Peers
	byName := func(a, b Peer) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(peers, byName) {
		peers = slices.Clone(peers)
		slices.SortFunc(peers, byName)
	}
	claimed, total := claimsFor(in.LocalBlocks, peers, in.IPVersion, &rb.blocks)

	var blocks []netip.Prefix // one peer's accepted blocks, reused
	for _, p := range peers {
		blocks = blocks[:0]
		for _, b := range p.Blocks {
			if !b.IsValid() || familyOf(b.Addr()) != in.IPVersion {
				continue
			}
			b = b.Masked()
			if i := claimed.first(b); i >= 0 {
				problems = append(problems, fmt.Errorf("peer %s: block %s overlaps %s, already ours or another peer's", p.Name, b, claimed.all[i]))
				continue
			}
			claimed.add(b)
			blocks = append(blocks, b)
		}
		if len(blocks) == 0 {
			continue
		}
		iface, target, err := in.routeVia(p)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if cap(out[iface]) == 0 {
			// Usually every peer goes through one interface: one
			// allocation of the most it can take.
			out[iface] = make([]routes.Target, 0, total)
		}
		for _, b := range blocks {
			t := target
			t.CIDR = b
			out[iface] = append(out[iface], t)
		}
	}
	return out, problems
}

// routeVia picks the interface and the route (without CIDR) for peer p.
func (in RouteInput) routeVia(p Peer) (string, routes.Target, error) {
	hostOK := p.HostIP.IsValid() && familyOf(p.HostIP) == in.IPVersion
	onSubnet := hostOK && slices.ContainsFunc(in.ParentSubnets, func(s netip.Prefix) bool { return s.Contains(p.HostIP) })
	direct := routes.Target{Type: routes.TypeGateway, Gateway: p.HostIP}

	if in.Mode.crossSubnet() && onSubnet {
		if in.Parent == "" {
			return "", routes.Target{}, fmt.Errorf("peer %s: on our subnet but no parent interface known", p.Name)
		}
		return in.Parent, direct, nil
	}
	switch {
	case in.Mode.VXLAN():
		if !p.TunnelIP.IsValid() || familyOf(p.TunnelIP) != in.IPVersion || len(p.VTEPMAC) == 0 {
			return "", routes.Target{}, fmt.Errorf("peer %s: no IPv%d VTEP (tunnel IP and MAC) to route its blocks through %s", p.Name, in.IPVersion, in.vxlanDevice())
		}
		return in.vxlanDevice(), routes.Target{Type: routes.TypeGateway, Gateway: p.TunnelIP, OnLink: true, MTU: in.MTU}, nil
	case in.Mode.IPIP():
		if in.IPVersion == 6 {
			return "", routes.Target{}, fmt.Errorf("peer %s: IPIP carries IPv4 only and host %s is not on our subnet", p.Name, p.HostIP)
		}
		if !hostOK {
			return "", routes.Target{}, fmt.Errorf("peer %s: no IPv4 host IP to route its blocks through %s", p.Name, in.ipipDevice())
		}
		return in.ipipDevice(), routes.Target{Type: routes.TypeGateway, Gateway: p.HostIP, OnLink: true, MTU: in.MTU}, nil
	case in.Mode == ModeNone:
		if !hostOK {
			return "", routes.Target{}, fmt.Errorf("peer %s: no IPv%d host IP for a direct route", p.Name, in.IPVersion)
		}
		return "", routes.Target{}, fmt.Errorf("peer %s: host %s is not on our subnet %v; encapsulation none needs L2 adjacency", p.Name, p.HostIP, in.ParentSubnets)
	}
	return "", routes.Target{}, fmt.Errorf("peer %s: unknown mode %q", p.Name, in.Mode)
}
