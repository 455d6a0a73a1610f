package routes

import (
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// InterfaceNone is the pseudo interface name under which routes without an
// output device are kept: blackhole, unreachable, prohibit and throw.
const InterfaceNone = "*none*"

// DefaultProtocol is the route protocol routelet stamps on every route
// (routeletd's default --route-protocol), so that the daemon and operators
// can tell routelet's routes apart.
const DefaultProtocol = 80

// DefaultGracePeriod is how long unexpected routes on a newly seen workload
// interface are left alone when Config.GracePeriod is 0.
const DefaultGracePeriod = 10 * time.Second

// TargetType says what kind of kernel route a Target becomes.
type TargetType int

const (
	// TypeLink: "<cidr> dev <iface> scope link" (a workload's /32 or /128).
	TypeLink TargetType = iota
	// TypeGateway: "<cidr> via <gw> dev <iface> [onlink]" (VXLAN, IPIP, no-encap).
	TypeGateway
	// TypeBlackhole, TypeUnreachable, TypeProhibit, TypeThrow: no-interface
	// routes; only valid under InterfaceNone.
	TypeBlackhole
	TypeUnreachable
	TypeProhibit
	TypeThrow
)

// Target is one desired route.
type Target struct {
	CIDR    netip.Prefix
	Type    TargetType
	Gateway netip.Addr       // TypeGateway only
	OnLink  bool             // TypeGateway: set RTNH_F_ONLINK
	Src     netip.Addr       // preferred source, optional
	MTU     int              // route MTU metric, 0 = none
	DestMAC net.HardwareAddr // optional: static (permanent) ARP entry for an IPv4 /32 on the iface
}

// Config configures one RouteTable (one IP family, one kernel table).
type Config struct {
	IPVersion int // 4 or 6
	Table     int // kernel table index; 0 means main (254)
	Protocol  int // 0 means DefaultProtocol

	// Ownership. Interfaces whose name starts with one of InterfacePrefixes
	// (e.g. "cali") are workload interfaces: every route on them is ours.
	// InterfaceNames (e.g. "vxlan.calico") are shared devices: only routes
	// carrying Protocol are ours. IncludeNoInterface adds InterfaceNone,
	// where also only routes carrying Protocol are ours.
	InterfacePrefixes  []string
	InterfaceNames     []string
	IncludeNoInterface bool

	// RemoveExternalRoutes removes routes on workload interfaces that are not
	// desired (default true in the daemon).
	RemoveExternalRoutes bool
	// GracePeriod: unexpected routes on an interface first seen less than
	// this long ago are left alone (0 = DefaultGracePeriod; negative disables).
	GracePeriod time.Duration
	// NetlinkTimeout bounds each netlink call (0 = 10s).
	NetlinkTimeout time.Duration
	// Liveness, when set, is called periodically during long loops.
	Liveness func()
	// OnConflict, when set, is called (on the Apply goroutine) each time a
	// desired route is found blocked by a route routelet does not own under
	// the same kernel key (see RouteTable): once per new or changed
	// conflict, not on every retry.
	OnConflict func(cidr netip.Prefix, iface string, holderProtocol int)
	Logger     *slog.Logger
}

// Stats is a snapshot for metrics.
type Stats struct {
	Routes      int // routes routelet believes are programmed
	DirtyIfaces int
	LastResync  time.Duration
	LastApply   time.Duration
	Writes      uint64 // netlink writes since New
	// ConntrackFlowsDeleted counts conntrack flows deleted since New.
	ConntrackFlowsDeleted uint64
	// Conflicts is the number of desired routes not programmed because a
	// route routelet does not own holds their kernel key;
	// ConflictsTotal counts such conflicts found since New.
	Conflicts      int
	ConflictsTotal uint64
}
