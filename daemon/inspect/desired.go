package inspect

import (
	"net"
	"net/netip"
	"time"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// Desired is what the daemon wants, plus the facts only it knows
// (readiness, errors, repairs). Maps are read only.
type Desired struct {
	Node      statusapi.Node
	Readiness statusapi.Readiness
	Datastore statusapi.DatastoreHealth
	Loop      bool
	// Blocks are the local blocks with their IPAM use (BlockUse).
	Blocks []statusapi.Block
	// IfacePrefix names the workload interfaces (their routes are all
	// routelet's).
	IfacePrefix string
	// WorkloadRoutes are the pod routes and blackholes per family (0:
	// IPv4, 1: IPv6) and interface (routes.InterfaceNone for blackholes).
	WorkloadRoutes [2]map[string][]routes.Target
	// Workloads are the served records by key; Refused says why a key
	// gets no route.
	Workloads map[string]*state.Workload
	Refused   map[string]string
	// Overlay is each family's overlay (none in a family without one).
	Overlay []OverlayFamily
	// WireGuard is the WireGuard device's part (nil without encryption);
	// its routes are in Overlay, under the device's name.
	WireGuard *statusapi.WireGuard
	// BGP is the BGP speaker's part (nil without bgp): its status block
	// and the learned routes it wants, with their own route protocol.
	BGP *BGPWant
	// Peers are the validated peers.
	Peers []Peer
	// Allowlist is the allowlist set whose members are the peers' host
	// IPs (IPv4 name; the IPv6 twin for IPv6), "" when the mode has none.
	Allowlist  string
	Errors     []statusapi.ObjectError
	LastResync time.Time
	Repairs    []statusapi.Repair
}

// Snapshotter adds its part of the desired state (the overlay, the
// allowlist, the peer validator's refusals) to a snapshot. The state
// endpoint calls it on the apply loop's goroutine (agent.Query), so it
// may read what the loop owns.
type Snapshotter interface {
	Snapshot(d *Desired)
}

// Peer is a validated peer with what the daemon knows of it.
type Peer struct {
	peers.NodeInfo
	LastChange time.Time
	Problem    string
}

// OverlayFamily is one family's overlay as wanted.
type OverlayFamily struct {
	Version int
	// Routes are the owned interfaces' routes (peers' blocks).
	Routes map[string][]routes.Target
	// Devices are the overlay devices of the family.
	Devices []DeviceWant
	// VXLANDevice is the family's VXLAN device ("" without VXLAN); ARP
	// (tunnel IP → VTEP MAC) and FDB (VTEP MAC → host IP) are its
	// entries.
	VXLANDevice string
	ARP         map[netip.Addr]net.HardwareAddr
	FDB         map[string]netip.Addr
	// Problems are the peers' blocks that are not routed, one line each
	// ("peer node-b: block … overlaps …").
	Problems []string
}

// BGPWant is the BGP speaker's part of a snapshot.
type BGPWant struct {
	Status statusapi.BGP
	// Protocol is the learned routes' kernel route protocol
	// (bgp-route-protocol): only routes carrying it on the route
	// interfaces are the BGP tables'.
	Protocol int
	// Families are the learned routes wanted per family with a route
	// table, by interface (the uplink); none when announce only.
	Families []BGPFamily
}

// BGPFamily is one family's learned routes as wanted.
type BGPFamily struct {
	Version int
	Routes  map[string][]routes.Target
}

// DeviceWant is an overlay device as wanted.
type DeviceWant struct {
	Name string
	Kind string // "vxlan", "ipip", "wireguard" (kernel) or "tun" (WireGuard in userspace)
	MTU  int
	MAC  string // VXLAN: the VTEP MAC; "" for IPIP
}

// FillNode sets what the configuration says of the node where the loop or
// the state directory did not: name, datastore, state directory, route
// protocol, mode, and an empty list of local blocks for none. The state
// endpoint and the offline status both start their node from it.
func FillNode(n *statusapi.Node, cfg *config.Config) {
	if n.Name == "" {
		n.Name = cfg.NodeName
	}
	n.Datastore, n.StateDir = cfg.Datastore, cfg.StateDir
	if n.RouteProtocol == 0 {
		n.RouteProtocol = cfg.RouteProtocol
	}
	if n.Mode == "" {
		if m, err := overlay.ParseMode(cfg.Encapsulation, cfg.CrossSubnet); err == nil {
			n.Mode = string(m)
		}
	}
	if n.LocalBlocks == nil {
		n.LocalBlocks = []string{}
	}
}
