package state

import (
	"errors"
	"time"
)

// DefaultDir is the state directory used when none is configured.
const DefaultDir = "/run/routelet"

// RecordVersion is the only record format version this package reads and writes.
const RecordVersion = 1

// ErrNotFound is returned by the Get/Read functions when the record does not exist.
var ErrNotFound = errors.New("record not found")

// ErrCorrupt is wrapped by the errors of a record file that is not JSON at
// all (empty, truncated, garbage): damage, since every writer replaces a
// record whole by rename, never a record another release wrote.
var ErrCorrupt = errors.New("not a JSON record")

// ErrUnknownVersion is wrapped by the errors of a record whose version is
// not RecordVersion (e.g. written by a newer release).
var ErrUnknownVersion = errors.New("unknown record version")

// Store is a handle on a state directory. It is safe for concurrent use by
// several goroutines and several processes (each write is an atomic rename).
type Store struct {
	root string
}

// Root returns the state directory path.
func (s *Store) Root() string { return s.root }

// Workload is the record the plugin writes for each attachment.
type Workload struct {
	Version      int       `json:"version"`
	ContainerID  string    `json:"containerID"`
	IfName       string    `json:"ifName"`
	HostIface    string    `json:"hostIface"`
	Netns        string    `json:"netns"`
	IPs          []string  `json:"ips"` // CIDRs, e.g. "10.244.1.5/32", "fd00::5/128"
	ContainerMAC string    `json:"containerMAC"`
	PodNamespace string    `json:"podNamespace,omitempty"`
	PodName      string    `json:"podName,omitempty"`
	Network      string    `json:"network,omitempty"` // CNI network name
	Created      time.Time `json:"created"`
}

// WorkloadsDir returns the directory holding workload records (for watchers).
func (s *Store) WorkloadsDir() string { return s.dir(workloadsSubdir) }

// Node is one node's record: what peers need to reach its pods.
type Node struct {
	Version    int      `json:"version"`
	Name       string   `json:"name"`
	HostIPv4   string   `json:"hostIPv4,omitempty"`
	HostIPv6   string   `json:"hostIPv6,omitempty"`
	Blocks     []string `json:"blocks"`               // pod CIDRs owned by the node
	VTEPMAC    string   `json:"vtepMAC,omitempty"`    // VXLAN device MAC
	VTEPMACv6  string   `json:"vtepMACv6,omitempty"`  // vxlan-v6 device MAC
	TunnelIPv4 string   `json:"tunnelIPv4,omitempty"` // VXLAN/IPIP device address
	TunnelIPv6 string   `json:"tunnelIPv6,omitempty"` // vxlan-v6 device address
	// WireGuardPublicKey is the node's WireGuard public key (base64), ""
	// when encryption is off; WireGuardPort its listen port, 0 for the
	// default (51820). The endpoint is HostIPv4 at that port, else HostIPv6.
	WireGuardPublicKey string `json:"wireguardPublicKey,omitempty"`
	WireGuardPort      int    `json:"wireguardPort,omitempty"`
	// BGPAS is the AS number of the node's BGP speaker, 0 when it runs
	// none (pkg/peers checks the range, as it does the WireGuard port's).
	BGPAS   int       `json:"bgpAS,omitempty"`
	Updated time.Time `json:"updated"`
}

// NodesDir returns the directory holding node records (for watchers).
func (s *Store) NodesDir() string { return s.dir(nodesSubdir) }

// DaemonStatus is <root>/daemon.json, written by routeletd and read by the
// plugin (MTU, blocks, route protocol, VXLAN port, STATUS, and the overlay
// device names, whose addresses and routes are not the node's own space
// for the plugin's checks).
//
// RouteProtocol, VXLANPort and the device names were added without a
// version bump: a file from an older daemon has none (0, ""), which
// readers take as the defaults (80, 4789, overlay's default names).
type DaemonStatus struct {
	Version       int      `json:"version"`
	Ready         bool     `json:"ready"`
	Reason        string   `json:"reason,omitempty"` // why not ready
	PodMTU        int      `json:"podMTU,omitempty"`
	Blocks        []string `json:"blocks,omitempty"`        // local blocks (CIDRs) for the built-in IPAM
	RouteProtocol int      `json:"routeProtocol,omitempty"` // protocol the daemon stamps on (and owns) routes; 0 = default 80
	VXLANPort     int      `json:"vxlanPort,omitempty"`     // UDP port the pod guards drop; 0 = default 4789
	VXLANDevice   string   `json:"vxlanDevice,omitempty"`   // IPv4 VXLAN device; "" = default vxlan.calico
	VXLANDeviceV6 string   `json:"vxlanDeviceV6,omitempty"` // IPv6 VXLAN device; "" = default vxlan-v6.calico
	IPIPDevice    string   `json:"ipipDevice,omitempty"`    // IPIP device; "" = default tunl0
	// WireGuardDevice is the WireGuard device when encryption is on; ""
	// = default wireguard.cali (whose kind "wireguard" or "tun" the
	// plugin then takes as routelet's).
	WireGuardDevice string    `json:"wireguardDevice,omitempty"`
	DaemonVersion   string    `json:"daemonVersion,omitempty"`
	LastSyncError   string    `json:"lastSyncError,omitempty"`
	Updated         time.Time `json:"updated"`
}
