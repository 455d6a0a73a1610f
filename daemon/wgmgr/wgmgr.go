package wgmgr

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/internal/routeset"
	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/wireguard"
)

// Device is what the manager needs of *wireguard.Device. Setters change
// memory only; Apply is the only path to the kernel. QueueCheck and
// OnLinkUpdate are safe for concurrent use (event handlers call them).
type Device interface {
	SetPrivateKey(k wgtypes.Key)
	SetPeers(p []wireguard.Peer)
	Apply() error
	QueueCheck()
	OnLinkUpdate(name string) bool
	Status() wireguard.Status
	NotReady() string
	Close() error
}

// NewDevice makes the device from its configuration and the node's
// private key; routeletd passes a function around wireguard.New.
type NewDevice func(cfg wireguard.Config, key wgtypes.Key) (Device, error)

// RouteTable is the part of *routes.RouteTable the manager drives.
type RouteTable interface {
	RouteUpdate(iface string, t routes.Target)
	RouteRemove(iface string, cidr netip.Prefix)
	MarkDirty(iface string)
	Apply() error
}

var _ RouteTable = (*routes.RouteTable)(nil)

// NewTable makes the RouteTable of one family (4 or 6) that owns only
// the route protocol's routes on the given interfaces (routes.Config
// InterfaceNames). routeletd passes a function around routes.New.
type NewTable func(ipVersion int, owned []string) (RouteTable, error)

// DefaultCheckPeriod is how often the device is re-read unless Config
// says otherwise; it is also the longest period Config may give. The
// WireGuard configuration (keys, peers, endpoints, allowed IPs) sends no
// notification when someone else changes it, so reading it is the only
// way to see a peer removed or altered, and it is repaired within this
// period; one read is one request to the device (a generic netlink dump
// or one exchange on the userspace socket).
const DefaultCheckPeriod = time.Second

// Config says what the WireGuard side of the node looks like. Zero values
// take the defaults noted.
type Config struct {
	// StateDir holds the private key (<StateDir>/wireguard/private.key)
	// and the userspace datapath's files (wireguard.Config.RunDir).
	StateDir string
	Device   string // default defaults.DeviceWireGuard
	Port     int    // listen port; default defaults.WireGuardPort
	MTU      int    // the device's MTU: the pod MTU
	Impl     string // "auto" (default), "kernel" or "userspace"
	// LocalBlocks are this node's pod blocks: the device's tunnel
	// addresses come from them, and a peer block overlapping one is never
	// routed away. IPv6 peer blocks are routed only when one is IPv6.
	LocalBlocks []netip.Prefix
	// RouteProtocol marks routelet's routes; default routes.DefaultProtocol.
	RouteProtocol int
	CheckPeriod   time.Duration // default and at most DefaultCheckPeriod
	Logger        *slog.Logger
	// OnRepair is handed to the device (wireguard.Config.OnRepair).
	OnRepair func(object string)
	// OnDrift, when set, is called (from the event goroutine) when a route
	// the manager wants was deleted behind its back; the next Apply puts
	// it back.
	OnDrift func(object, detail string)
	// Now is the clock of handshake ages; default time.Now.
	Now func() time.Time
	// OnPublicKey, when set, is called from Apply when the device took a
	// key whose public key differs from the one before (at start and after
	// a rotation): routeletd hands it to the peer check, which refuses a
	// record carrying this node's key.
	OnPublicKey func(wgtypes.Key)
}

// wantPeer is one WireGuard peer as wanted, with the node it is.
type wantPeer struct {
	node string
	wireguard.Peer
}

// Manager is the WireGuard agent.Manager. OnNodes, Apply, UpdateSelf and
// Snapshot run on the loop goroutine; the netwatch handler (Events) and
// the key watch only record hints.
type Manager struct {
	cfg Config
	log *slog.Logger
	dev Device
	// routes are the device's routes, one table per family (IPv6 only
	// with an IPv6 local block); the event handler looks deletions up.
	routes *routeset.Set

	// Loop-owned.
	key        wgtypes.Key // the private key handed to the device
	applied    wgtypes.Key // the public key the device last took (published)
	peers      []wantPeer  // the peers of the last OnNodes, sorted by node
	noKey      []string    // peers without a WireGuard key
	problems   []string    // "peer X: …" lines: blocks not routed, peers left out
	keyProblem string      // why the key file cannot be read ("" when it can)

	// mu guards the key hint and the metrics' names.
	mu       sync.Mutex
	keyDirty bool                   // the key file may have changed: re-read it
	names    map[wgtypes.Key]string // public key → node, for the metrics
}

// The loop's capabilities this manager has.
var (
	_ agent.Manager       = (*Manager)(nil)
	_ agent.Checker       = (*Manager)(nil)
	_ agent.Blocker       = (*Manager)(nil)
	_ agent.SelfPublisher = (*Manager)(nil)
)

// New loads (or creates, the first time) the node's private key, makes
// the device and the route tables, without touching the kernel beyond
// what newDevice and newTable do. The error names what failed, e.g. a key
// file that is not a key.
func New(cfg Config, newDevice NewDevice, newTable NewTable) (*Manager, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Device = cmp.Or(cfg.Device, defaults.DeviceWireGuard)
	cfg.Port = cmp.Or(cfg.Port, defaults.WireGuardPort)
	cfg.Impl = cmp.Or(cfg.Impl, "auto")
	cfg.RouteProtocol = cmp.Or(cfg.RouteProtocol, routes.DefaultProtocol)
	cfg.CheckPeriod = min(cmp.Or(max(cfg.CheckPeriod, 0), DefaultCheckPeriod), DefaultCheckPeriod)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StateDir == "" {
		return nil, errors.New("wireguard: no state directory for the private key")
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("wireguard: port %d is not in 1-65535", cfg.Port)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.With("component", "wireguard"), names: map[wgtypes.Key]string{}}
	// Until the first OnNodes nothing is wanted: routes an earlier run
	// left on the device are re-read and removed by the first Apply.
	m.routes = routeset.New(routeset.Config{Iface: cfg.Device, Owner: "wireguard"})
	key, created, err := wireguard.LoadOrCreateKey(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("wireguard: private key: %w", err)
	}
	if created {
		m.log.Info("created the node's WireGuard private key", "dir", KeyDir(cfg.StateDir), "publicKey", key.PublicKey().String())
	}
	m.key, m.applied = key, key.PublicKey()
	var addrs []netip.Prefix
	for _, v := range []int{4, 6} {
		if a, ok := overlay.TunnelAddress(cfg.LocalBlocks, v); ok {
			addrs = append(addrs, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	m.dev, err = newDevice(wireguard.Config{
		Name: cfg.Device, Port: cfg.Port, MTU: cfg.MTU, Addrs: addrs, Impl: cfg.Impl,
		RunDir: KeyDir(cfg.StateDir), Logger: m.log, OnRepair: cfg.OnRepair, KeyPublished: !created,
	}, key)
	if err != nil {
		return nil, fmt.Errorf("wireguard device %s: %w", cfg.Device, err)
	}
	for _, v := range []int{4, 6} {
		if v == 6 && !slices.ContainsFunc(cfg.LocalBlocks, func(b netip.Prefix) bool { return b.Addr().Is6() }) {
			continue // no IPv6 pods here: nothing to send to IPv6 peer blocks
		}
		rt, err := newTable(v, []string{cfg.Device})
		if err == nil {
			err = m.routes.Add(v, rt)
		}
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("wireguard IPv%d: route table: %w", v, err)
		}
	}
	m.log.Info("wireguard", "device", cfg.Device, "port", cfg.Port, "mtu", cfg.MTU, "implementation", cfg.Impl,
		"addresses", addrs, "publicKey", m.applied.String())
	return m, nil
}

// KeyDir is the directory of the node's private key in stateDir.
func KeyDir(stateDir string) string { return filepath.Join(stateDir, wireguard.KeyDir) }

// PublicKey returns the node's public key as last set on the device (the
// one published).
func (m *Manager) PublicKey() wgtypes.Key { return m.applied }

// Publish fills in what peers need in this node's record: the public key
// and the listen port.
func (m *Manager) Publish(n *peers.Record) {
	n.WireGuardPublicKey, n.WireGuardPort = m.applied.String(), strconv.Itoa(m.cfg.Port)
}

// UpdateSelf implements agent.SelfPublisher: after a rotated key was set
// on the device, the record gets the new public key.
func (m *Manager) UpdateSelf(n *peers.Record) bool {
	before := *n
	m.Publish(n)
	return n.WireGuardPublicKey != before.WireGuardPublicKey || n.WireGuardPort != before.WireGuardPort
}

// OnWorkloads implements agent.Manager: the device does not depend on the
// workloads.
func (m *Manager) OnWorkloads(agent.Served) {}

// OnNodes implements agent.Manager: every peer with a WireGuard key
// becomes a device peer, and every peer's blocks, with a key or without,
// are routed into the device (memory only). The peers were checked where
// their records entered the daemon (pkg/peers).
func (m *Manager) OnNodes(nodes []peers.NodeInfo) {
	ps, problems, noKey := m.peersOf(nodes)
	m.peers, m.problems, m.noKey = ps, problems, noKey
	dps := make([]wireguard.Peer, len(ps))
	names := make(map[wgtypes.Key]string, len(ps))
	for i, p := range ps {
		dps[i] = p.Peer
		names[p.PublicKey] = p.node
	}
	m.dev.SetPeers(dps)
	m.mu.Lock()
	m.names = names
	m.mu.Unlock()
	for _, v := range m.routes.Families() {
		m.routes.Set(v, m.targets(nodes, v))
	}
}

// peersOf returns the device peers of nodes (sorted by node), the problems
// of the peers left out or of blocks not routed, and the peers without a
// key.
func (m *Manager) peersOf(nodes []peers.NodeInfo) (ps []wantPeer, problems, noKey []string) {
	own := m.applied
	seen := map[wgtypes.Key]string{}
	for _, n := range nodes {
		for _, b := range n.Blocks {
			if l := m.localOverlap(b); l.IsValid() {
				problems = append(problems, fmt.Sprintf("peer %s: block %s overlaps this node's block %s: not routed", n.Name, b, l))
			}
		}
		k := n.WireGuard.PublicKey
		switch {
		case k == (wgtypes.Key{}):
			noKey = append(noKey, n.Name)
			continue
		case k == own:
			problems = append(problems, fmt.Sprintf("peer %s: WireGuard key %s is this node's own: no WireGuard peer", n.Name, k))
			continue
		case seen[k] != "":
			problems = append(problems, fmt.Sprintf("peer %s: WireGuard key %s is peer %s's too: no WireGuard peer", n.Name, k, seen[k]))
			continue
		}
		seen[k] = n.Name
		port := n.WireGuard.Port
		if port == 0 {
			port = defaults.WireGuardPort
		}
		p := wantPeer{node: n.Name, Peer: wireguard.Peer{PublicKey: k}}
		if hs := n.HostIPs(); len(hs) > 0 {
			p.Endpoint = netip.AddrPortFrom(hs[0], port) // IPv4 first
		}
		for _, b := range n.Blocks {
			if !m.localOverlap(b).IsValid() {
				p.AllowedIPs = append(p.AllowedIPs, b)
			}
		}
		for _, t := range []netip.Addr{n.IPv4.TunnelAddr, n.IPv6.TunnelAddr} {
			if !t.IsValid() || slices.ContainsFunc(p.AllowedIPs, func(b netip.Prefix) bool { return b.Contains(t) }) {
				continue
			}
			p.AllowedIPs = append(p.AllowedIPs, netip.PrefixFrom(t, t.BitLen()))
		}
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b wantPeer) int { return strings.Compare(a.node, b.node) })
	return ps, problems, noKey
}

// localOverlap returns the local block b overlaps, or the zero prefix.
func (m *Manager) localOverlap(b netip.Prefix) netip.Prefix {
	for _, l := range m.cfg.LocalBlocks {
		if l.Overlaps(b) {
			return l
		}
	}
	return netip.Prefix{}
}

// targets returns the device routes of family v: every peer block of the
// family that overlaps no local block, "dev <device> scope link".
func (m *Manager) targets(nodes []peers.NodeInfo, v int) map[netip.Prefix]routes.Target {
	out := map[netip.Prefix]routes.Target{}
	for _, n := range nodes {
		for _, b := range n.BlocksOf(v) {
			if !m.localOverlap(b).IsValid() {
				out[b.Masked()] = routes.Target{CIDR: b.Masked(), Type: routes.TypeLink}
			}
		}
	}
	return out
}

// Apply implements agent.Manager: a rotated key is read and set, then the
// device is applied, then the routes of every family. Errors are joined;
// what failed is retried by the next Apply.
func (m *Manager) Apply() error {
	m.mu.Lock()
	keyDirty := m.keyDirty
	m.keyDirty = false
	m.mu.Unlock()
	if keyDirty {
		m.reloadKey()
	}
	var errs []error
	devErr := m.dev.Apply()
	if devErr != nil {
		errs = append(errs, devErr)
	} else if pub := m.key.PublicKey(); pub != m.applied {
		m.applied = pub
		if m.cfg.OnPublicKey != nil {
			m.cfg.OnPublicKey(pub)
		}
	}
	if err := m.routes.Apply(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reloadKey reads the key file again and hands a new key to the device.
// A file that is no key keeps the current key (said in the log and the
// status until it is fixed).
func (m *Manager) reloadKey() {
	k, err := wireguard.LoadKey(m.cfg.StateDir)
	if err != nil {
		if msg := err.Error(); msg != m.keyProblem {
			m.keyProblem = msg
			m.log.Error("cannot read the WireGuard private key, keeping the current one", "err", err)
		}
		return
	}
	if m.keyProblem != "" {
		m.keyProblem = ""
		m.log.Info("the WireGuard private key file is readable again")
	}
	if k == m.key {
		return
	}
	m.key = k
	m.dev.SetPrivateKey(k)
	m.log.Info("WireGuard private key changed: setting it on the device and publishing the new public key",
		"publicKey", k.PublicKey().String())
}

// NotReady implements agent.Blocker: why the device cannot work ("" when
// it can).
func (m *Manager) NotReady() string { return m.dev.NotReady() }

// CheckPeriod implements agent.Checker.
func (m *Manager) CheckPeriod() time.Duration { return m.cfg.CheckPeriod }

// QueueCheck implements agent.Checker: the next Apply re-reads the device
// and its wgctrl configuration, the key file and the device's routes.
func (m *Manager) QueueCheck() {
	m.dev.QueueCheck()
	m.KeyChanged()
	m.routes.MarkDirty()
}

// KeyChanged records that the key file may have changed (the key watch
// calls it): the next Apply reads it again.
func (m *Manager) KeyChanged() {
	m.mu.Lock()
	m.keyDirty = true
	m.mu.Unlock()
}

// Close closes the device's sockets and the route tables' (the device,
// its datapath and the routes stay: a restart adopts them).
func (m *Manager) Close() error {
	var errs []error
	if m.dev != nil {
		errs = append(errs, m.dev.Close())
	}
	errs = append(errs, m.routes.Close())
	return errors.Join(errs...)
}
