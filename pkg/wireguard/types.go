package wireguard

import (
	"log/slog"
	"net/netip"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Config says what the node's WireGuard device should look like. Zero
// values take the defaults noted.
type Config struct {
	Name  string         // default defaults.DeviceWireGuard
	Port  int            // listen port, default defaults.WireGuardPort
	MTU   int            // the device's MTU (the pod MTU)
	Addrs []netip.Prefix // the node's tunnel addresses (/32, /128): first address of its first block per family
	// Impl is "auto" (the kernel's if creating a "wireguard" link works,
	// else userspace), "kernel" or "userspace".
	Impl string
	// RunDir is <stateDir>/wireguard: the userspace datapath's pid file
	// and log.
	RunDir string
	// Datapath is the argv starting the userspace datapath (default:
	// os.Executable(), "wireguard-datapath", "--device", Name, "--mtu", N).
	Datapath []string
	Logger   *slog.Logger
	// OnRepair, when set, is called for each setting Apply put back:
	// "link", "mtu", "address", "up", "key", "port", "peer".
	OnRepair func(object string)
}

// Peer is one WireGuard peer as wanted: a node's public key, its
// endpoint (host IP and listen port) and the addresses routed to it.
type Peer struct {
	PublicKey  wgtypes.Key
	Endpoint   netip.AddrPort
	AllowedIPs []netip.Prefix
}

// Status is the device as last read.
type Status struct {
	Impl      string // "kernel" or "userspace"; "" before the device exists
	Up        bool
	PublicKey wgtypes.Key
	Port      int
	MTU       int
	Peers     []PeerStatus
	// LastError is the last Apply's error, "" when it succeeded.
	LastError string
}

// PeerStatus is one peer as the device holds it.
type PeerStatus struct {
	PublicKey     wgtypes.Key
	Endpoint      netip.AddrPort
	AllowedIPs    []netip.Prefix
	LastHandshake time.Time // zero: never
	RxBytes       int64
	TxBytes       int64
}
