// Package statusapi is the shape of routeletd's local state endpoint: a
// unix socket in the state directory (SocketName, mode 0600) serving, over
// HTTP, the running daemon's desired state next to what the kernel holds
// (State as JSON at StatePath). `routeletd status` renders it; any tool on
// the node may read it with Get. When no daemon answers, `routeletd status`
// builds the same State from the state directory and the kernel, with
// Source SourceOffline.
//
// Compatibility: fields are only ever added; a reader must ignore fields it
// does not know. Times are UTC (RFC 3339 in JSON); a zero time means
// "never" or "unknown".
package statusapi

import (
	"path/filepath"
	"time"
)

// SocketName is the endpoint's socket in the state directory.
const SocketName = "routeletd.sock"

// StatePath is the HTTP path of the State document.
const StatePath = "/v1/state"

// SocketPath returns the endpoint's socket path in stateDir.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, SocketName) }

// Sources of a State.
const (
	// SourceDaemon: the running daemon's endpoint answered; desired state
	// is the apply loop's own.
	SourceDaemon = "daemon"
	// SourceOffline: no daemon answered; desired state was derived from
	// the state directory's records the way the daemon would.
	SourceOffline = "offline"
)

// State is everything the endpoint serves.
type State struct {
	Source string    `json:"source"` // SourceDaemon or SourceOffline
	Taken  time.Time `json:"taken"`  // when the state was read
	// Loop is false while the daemon has not started its apply loop yet
	// (waiting for its node IP or its blocks, see Readiness.Reason): only
	// Node and Readiness are filled in then. Offline, it is always false.
	Loop      bool            `json:"loop"`
	Node      Node            `json:"node"`
	Readiness Readiness       `json:"readiness"`
	Datastore DatastoreHealth `json:"datastore"`
	// Blocks are this node's pod blocks and how full the built-in IPAM
	// (<stateDir>/ipam) has them.
	Blocks []Block `json:"blocks"`
	// Tables compares desired and programmed routes per route table:
	// TableWorkloadsV4/V6 (pod routes and blackholes), TableOverlayV4/V6
	// (routes to peers' blocks).
	Tables  []RouteTable `json:"tables"`
	Devices []Device     `json:"devices"`
	// WireGuard is the WireGuard device carrying pod traffic between
	// nodes; nil (absent) unless encryption is wireguard.
	WireGuard *WireGuard `json:"wireguard,omitempty"`
	// BGP is the BGP speaker: its sessions, what it announces and the
	// learned routes it refused; nil (absent) unless bgp is on.
	BGP   *BGP   `json:"bgp,omitempty"`
	Peers []Peer `json:"peers"`
	// PeersUnknown says why Peers is not known ("" when it is): offline,
	// only the file datastore's peers can be read from the state
	// directory; the others' are the running daemon's to tell.
	PeersUnknown string     `json:"peersUnknown,omitempty"`
	Workloads    []Workload `json:"workloads"`
	// Errors is the last error per object (a record, a table, the apply
	// pass), oldest first.
	Errors []ObjectError `json:"errors"`
	// LastResync is when the loop last finished a full resync (re-read
	// every record, reconcile every route).
	LastResync time.Time `json:"lastResync"`
	// Repairs are the drift repairs the daemon made since it started (at
	// most the last MaxRepairs), oldest first.
	Repairs []Repair `json:"repairs"`
}

// MaxRepairs bounds State.Repairs.
const MaxRepairs = 1024

// Node is this node's identity and mode.
type Node struct {
	Name      string `json:"name"`
	Version   string `json:"version,omitempty"` // the daemon's version
	Datastore string `json:"datastore"`         // config key datastore, e.g. "file"
	Mode      string `json:"mode"`              // overlay mode, e.g. "vxlan", "vxlan-cross-subnet", "none"
	HostIPv4  string `json:"hostIPv4,omitempty"`
	HostIPv6  string `json:"hostIPv6,omitempty"`
	// The overlay facts this node publishes in its own record (VXLAN
	// VTEP MACs, tunnel addresses); empty when it publishes none.
	VTEPMAC       string   `json:"vtepMAC,omitempty"`
	VTEPMACv6     string   `json:"vtepMACv6,omitempty"`
	TunnelIPv4    string   `json:"tunnelIPv4,omitempty"`
	TunnelIPv6    string   `json:"tunnelIPv6,omitempty"`
	PodMTU        int      `json:"podMTU,omitempty"`
	RouteProtocol int      `json:"routeProtocol"`
	StateDir      string   `json:"stateDir"`
	LocalBlocks   []string `json:"localBlocks"`
}

// Readiness is what /readyz says, and why when not ready.
type Readiness struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	// Updated is when daemon.json was last written (offline) or when the
	// readiness was read (daemon).
	Updated time.Time `json:"updated"`
}

// DatastoreHealth is the last read of the peers.
type DatastoreHealth struct {
	OK       bool      `json:"ok"`
	Error    string    `json:"error,omitempty"` // why the peers cannot be listed
	LastRead time.Time `json:"lastRead"`
	// Records is how many peer records were read, Valid how many became
	// peers; Unreadable and Refused name the others (one line each).
	Records    int      `json:"records"`
	Valid      int      `json:"valid"`
	Unreadable []string `json:"unreadable,omitempty"`
	Refused    []string `json:"refused,omitempty"`
	// Refusals are Refused as data: every value the peer validator
	// refused, by node and field (what diagnose explains).
	Refusals []Refusal `json:"refusals,omitempty"`
	// Reachable says whether the datastore's last request reached it
	// (etcd); nil when the datastore does not tell.
	Reachable *bool `json:"reachable,omitempty"`
	// RequestErrors counts the datastore's failed requests since the
	// daemon started, per operation (etcd: "list", "watch", …;
	// kubernetes: "list-watch"); nil when it does not count them.
	RequestErrors map[string]int `json:"requestErrors,omitempty"`
	// Live names the nodes whose liveness the datastore holds (etcd:
	// the liveness keys), sorted; nil when it has no liveness. Liveness
	// is reported only; it never removes a peer.
	Live []string `json:"live,omitempty"`
	// Liveness is true when the datastore keeps liveness (then a peer
	// missing from Live is not live).
	Liveness bool `json:"liveness,omitempty"`
	// BlockConflicts are this node's blocks whose claim in the datastore
	// names another holder (etcd); the node keeps serving them.
	BlockConflicts []BlockConflict `json:"blockConflicts,omitempty"`
}

// BlockConflict is one block this node serves (its pods use it) whose
// claim in the datastore is another's: the node keeps the block, its
// pods and their routes, and does not overwrite the claim.
type BlockConflict struct {
	Block  string    `json:"block"`
	Key    string    `json:"key"`    // where the datastore holds the claim
	Holder string    `json:"holder"` // the value found there
	Since  time.Time `json:"since"`
}

// Refusal is one refused value of one node's record.
type Refusal struct {
	Node   string `json:"node"`
	Field  string `json:"field"` // "record" (the whole record), "hostIPv4", "vtepMAC", "block", …
	Value  string `json:"value"`
	Reason string `json:"reason"`
}

// Block is one local block and its IPAM use.
type Block struct {
	CIDR string `json:"cidr"`
	Size int    `json:"size"` // usable addresses (network, broadcast and reserved excluded)
	Used int    `json:"used"` // addresses claimed in <stateDir>/ipam
}

// Names of the route tables in State.Tables.
const (
	TableWorkloadsV4 = "workloads-ipv4"
	TableWorkloadsV6 = "workloads-ipv6"
	TableOverlayV4   = "overlay-ipv4"
	TableOverlayV6   = "overlay-ipv6"
	// TableBGPV4 and TableBGPV6 are the routes learned from BGP peers,
	// on the uplink, carrying the BGP route protocol (bgp-route-protocol).
	TableBGPV4 = "bgp-ipv4"
	TableBGPV6 = "bgp-ipv6"
)

// RouteTable compares one table's desired routes with the kernel's
// routelet-owned routes.
type RouteTable struct {
	Name       string `json:"name"`
	Desired    int    `json:"desired"`    // desired routes
	Programmed int    `json:"programmed"` // desired routes the kernel holds as wanted
	// Routes lists every desired route and every routelet route the
	// kernel holds that is not desired, sorted by interface and CIDR.
	Routes []Route `json:"routes"`
}

// Route is one route as desired and as programmed.
type Route struct {
	Iface string `json:"iface"` // "" for routes without an interface (blackholes)
	CIDR  string `json:"cidr"`  // destination
	// Type is the desired route's kind ("link", "gateway", "blackhole")
	// or, for a route only the kernel holds, its rtm type ("unicast", …).
	Type string `json:"type"`
	Via  string `json:"via,omitempty"`  // gateway
	MTU  int    `json:"mtu,omitempty"`  // route MTU
	Peer string `json:"peer,omitempty"` // the peer whose block it routes (overlay tables)
	// Desired: the daemon wants it. Programmed: the kernel holds it as
	// wanted, on the same interface and as the route table would leave it
	// (routes.Spec.Mismatch: type, protocol, scope, gateway, onlink,
	// source, MTU).
	Desired    bool `json:"desired"`
	Programmed bool `json:"programmed"`
	// Kernel describes what the kernel holds instead when it differs
	// (e.g. "proto static", "via 10.0.0.9"); "" when it matches or holds
	// nothing.
	Kernel string `json:"kernel,omitempty"`
}

// Device is one overlay device, as wanted and as found.
type Device struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // "vxlan", "ipip", "wireguard" or "tun" (WireGuard in userspace)
	Family  int    `json:"family"`
	Exists  bool   `json:"exists"`
	Up      bool   `json:"up"`
	MTU     int    `json:"mtu,omitempty"`     // as found
	WantMTU int    `json:"wantMTU,omitempty"` // as wanted
	MAC     string `json:"mac,omitempty"`     // as found (VXLAN)
	WantMAC string `json:"wantMAC,omitempty"` // as wanted (VXLAN)
	// Problem says what differs; "" when the device is as wanted.
	Problem string `json:"problem,omitempty"`
}

// Paths towards a peer.
const (
	PathOverlay = "overlay" // encapsulated through an overlay device
	PathDirect  = "direct"  // routed over the underlay to the peer's host IP
	PathBGP     = "bgp"     // routed over the underlay by a route learned from BGP
	PathNone    = "none"    // no route (no usable block, no host IP of the family)
)

// Peer is one peer node and whether everything towards it is programmed.
type Peer struct {
	Name     string   `json:"name"`
	HostIPv4 string   `json:"hostIPv4,omitempty"`
	HostIPv6 string   `json:"hostIPv6,omitempty"`
	Blocks   []string `json:"blocks"`
	// The rest of the validated record: what the daemon programs towards
	// the peer (only accepted values; refused ones are in Problem).
	VTEPMAC    string `json:"vtepMAC,omitempty"`
	VTEPMACv6  string `json:"vtepMACv6,omitempty"`
	TunnelIPv4 string `json:"tunnelIPv4,omitempty"`
	TunnelIPv6 string `json:"tunnelIPv6,omitempty"`
	// Live: the datastore holds the peer's liveness (nil when the
	// datastore has no liveness, see DatastoreHealth.Live).
	Live   *bool  `json:"live,omitempty"`
	Path   string `json:"path"`             // PathOverlay, PathDirect, PathBGP or PathNone (IPv4 first)
	Device string `json:"device,omitempty"` // the interface its routes use
	// Routes, ARP, FDB and Allowlist: wanted and present. ARP and FDB are
	// wanted only towards a VXLAN peer; Allowlist whenever the peer has a
	// host IP and the mode encapsulates.
	Routes    Check `json:"routes"`
	ARP       Check `json:"arp"`
	FDB       Check `json:"fdb"`
	Allowlist Check `json:"allowlist"`
	// LastChange is when the peer's validated record last changed as the
	// daemon saw it (offline: the record's own time stamp).
	LastChange time.Time `json:"lastChange"`
	// Problem names what is wrong with the record itself (a refused
	// value, an overlapping block); "" when nothing is.
	Problem string `json:"problem,omitempty"`
}

// Check is one expectation and what was found.
type Check struct {
	Wanted  bool   `json:"wanted"`
	Present bool   `json:"present"`
	Fact    string `json:"fact,omitempty"` // what was read, e.g. "10.244.2.0 lladdr 66:.. PERMANENT"
}

// OK reports whether the check passed: not wanted, or present.
func (c Check) OK() bool { return !c.Wanted || c.Present }

// Workload is one workload record and its routes.
type Workload struct {
	Key         string   `json:"key"` // record name in workloads/
	ContainerID string   `json:"containerID"`
	IfName      string   `json:"ifName"`
	Pod         string   `json:"pod,omitempty"` // namespace/name
	HostIface   string   `json:"hostIface"`
	IPs         []string `json:"ips"`
	IfaceExists bool     `json:"ifaceExists"`
	IfaceUp     bool     `json:"ifaceUp"`
	Routes      Check    `json:"routes"`
	// Refused says why no route is programmed for it; "" when served.
	Refused string `json:"refused,omitempty"`
}

// ObjectError is the last error about one object. Object is "apply",
// "datastore", "workload/<key>", "node/<name>" or "overlay-ipv4"/"-ipv6".
type ObjectError struct {
	Object string    `json:"object"`
	Error  string    `json:"error"`
	Since  time.Time `json:"since"`
}

// Repair is one drift the daemon found and put back. Object is what was
// repaired: "route", "neigh", "fdb", "device", "sysctl", "link",
// "allowlist", ….
type Repair struct {
	Time   time.Time `json:"time"`
	Object string    `json:"object"`
	Detail string    `json:"detail,omitempty"`
}

// RepairsSince counts the repairs at or after t.
func (s *State) RepairsSince(t time.Time) int {
	n := 0
	for _, r := range s.Repairs {
		if !r.Time.Before(t) {
			n++
		}
	}
	return n
}

// WireGuard is the node's WireGuard device as the daemon last read it,
// and its peers as wanted joined with what the device holds.
type WireGuard struct {
	// Implementation is "kernel" (the kernel's wireguard link) or
	// "userspace" (a TUN device served by routeletd's datapath process);
	// "" while the device does not exist yet.
	Implementation string `json:"implementation"`
	Device         string `json:"device"`
	PublicKey      string `json:"publicKey"` // this node's, base64
	Port           int    `json:"port"`      // listen port
	MTU            int    `json:"mtu"`
	Up             bool   `json:"up"`
	// Error says why the device does not work (the last Apply's error, or
	// why the daemon is not ready on its account); "" when it works.
	Error string          `json:"error,omitempty"`
	Peers []WireGuardPeer `json:"peers"`
	// PeersWithoutKey names the peers with no (valid) WireGuard key: their
	// blocks are routed into the device all the same, which drops the
	// packets, so nothing to their pods leaves unencrypted.
	PeersWithoutKey []string `json:"peersWithoutKey,omitempty"`
}

// WireGuardPeer is one peer of the WireGuard device.
type WireGuardPeer struct {
	Node       string   `json:"node"`
	PublicKey  string   `json:"publicKey"`
	Endpoint   string   `json:"endpoint,omitempty"` // host IP:port, as wanted
	AllowedIPs []string `json:"allowedIPs"`         // as wanted: the peer's blocks and tunnel addresses
	// Configured: the device holds the peer with this endpoint and these
	// allowed IPs.
	Configured bool `json:"configured"`
	// LatestHandshake is the last completed handshake (zero: never);
	// HandshakeAgeSeconds its age when the state was taken (absent:
	// never).
	LatestHandshake     time.Time `json:"latestHandshake"`
	HandshakeAgeSeconds *int64    `json:"handshakeAgeSeconds,omitempty"`
	RxBytes             int64     `json:"rxBytes"`
	TxBytes             int64     `json:"txBytes"`
}

// BGP is the node's BGP speaker as the daemon last saw it.
type BGP struct {
	ASN      uint32 `json:"asn"`
	RouterID string `json:"routerID,omitempty"`
	// Programmed: accepted learned routes are programmed into the kernel
	// (encapsulation none, no encryption); false: announce only, the
	// overlay or WireGuard routes pod traffic.
	Programmed bool `json:"programmed"`
	// Converged: every session is established and has sent End-of-RIB, or
	// the restart time since the daemon started has passed. Until then
	// the routes a previous run programmed are kept (Adopted of them).
	Converged bool      `json:"converged"`
	Adopted   int       `json:"adopted,omitempty"`
	Peers     []BGPPeer `json:"peers"`
	// Announced are the prefixes this node announces (its pod blocks).
	Announced []string `json:"announced"`
	// Learned counts the best paths learned from the peers, Accepted those
	// that passed every check (programmed when Programmed).
	Learned  int `json:"learned"`
	Accepted int `json:"accepted"`
	// RefusedTotal counts the learned routes refused since the daemon
	// started, by reason (BGPRefused* values); Refused lists the routes
	// refused now, newest first, at most MaxBGPRefused of RefusedNow.
	RefusedTotal map[string]uint64 `json:"refusedTotal,omitempty"`
	RefusedNow   int               `json:"refusedNow"`
	Refused      []BGPRefusal      `json:"refused,omitempty"`
	// Error is the speaker's last error (setting the peers or the
	// announced prefixes), or why this node's own peers cannot be read
	// (the last ones read are kept); "" when none.
	Error string `json:"error,omitempty"`
}

// MaxBGPRefused bounds BGP.Refused.
const MaxBGPRefused = 32

// Reasons a learned BGP route is refused (BGPRefusal.Reason, the
// routelet_bgp_refused_total reason label).
const (
	BGPRefusedOutsidePools       = "outside-pools"        // not inside a pool (bgp-pool, default every node block)
	BGPRefusedOwnBlock           = "own-block"            // overlaps one of this node's blocks
	BGPRefusedDefault            = "default"              // a default route
	BGPRefusedUnderlay           = "underlay"             // holds a node's host IP or a local address
	BGPRefusedNextHop            = "next-hop"             // next hop invalid, local or inside the pools
	BGPRefusedNotOwner           = "not-owner"            // from a mesh peer, not inside that node's blocks
	BGPRefusedNextHopUnreachable = "next-hop-unreachable" // no kernel route to the next hop over the uplink
)

// BGPPeer is one BGP session, as wanted and as the speaker holds it.
type BGPPeer struct {
	Address string `json:"address"`
	Port    int    `json:"port,omitempty"` // absent when BGP's 179
	ASN     uint32 `json:"asn"`
	// Description says where the session comes from: "mesh <node>",
	// "node" (this node's per-node peers) or "global" (bgp-peer).
	Description    string    `json:"description"`
	RouteReflector bool      `json:"routeReflector,omitempty"`
	State          string    `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Since          time.Time `json:"since"`
	Received       int       `json:"received"`
	Accepted       int       `json:"accepted"`
	Advertised     int       `json:"advertised"`
	EndOfRIB       bool      `json:"endOfRIB"`
	LastError      string    `json:"lastError,omitempty"`
}

// BGPRefusal is one learned route not programmed, and why.
type BGPRefusal struct {
	Prefix  string    `json:"prefix"`
	NextHop string    `json:"nextHop,omitempty"`
	Peer    string    `json:"peer"`   // the session it came from
	Reason  string    `json:"reason"` // a BGPRefused* value
	Detail  string    `json:"detail,omitempty"`
	Since   time.Time `json:"since"`
}
