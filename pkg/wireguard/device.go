package wireguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/defaults"
)

// The implementations of the device (Config.Impl, Status.Impl).
const (
	ImplAuto      = "auto"      // the kernel's where creating a "wireguard" link works, else userspace
	ImplKernel    = "kernel"    // a link of kind "wireguard"
	ImplUserspace = "userspace" // wireguard-go in a datapath process, on a TUN link
)

// DefaultMTU is the device's MTU when Config.MTU is 0 (WireGuard's own
// default: 1500 less the largest, IPv6, overhead).
const DefaultMTU = 1420

// Keepalive is the persistent keepalive a device made again gets on
// every peer (wg(8)'s customary value). The peers still hold sessions
// with the old device, which the new one cannot read, and would go on
// sending under them until they time out (about 15 s); setting a
// keepalive on a peer of an up device sends one at once, so each peer
// takes a new session within a round trip. A device made with a new key
// (the first start, a rotation) gets none: no peer has a session with
// it, and two nodes starting handshakes with each other at the same
// moment can leave both waiting for the retry five seconds later.
const Keepalive = 25 * time.Second

// ErrUnsupported marks a device this node cannot have as configured: the
// kernel has no WireGuard and the configuration asks for it, or the
// userspace implementation has no /dev/net/tun. Retrying cannot help.
var ErrUnsupported = errors.New("not supported on this node")

// Config configures the node's WireGuard device.
type Config struct {
	// Name of the device; default defaults.DeviceWireGuard.
	Name string
	// Port is the UDP listen port; default defaults.WireGuardPort.
	Port int
	// MTU of the device; 0 means DefaultMTU.
	MTU int
	// KeyPublished says the private key was published before this start
	// (loaded, not made now): the peers may hold sessions with it, made
	// with a device that is gone if this start has to make the device.
	KeyPublished bool
	// Addrs are the node's tunnel addresses on the device, each a single
	// address (/32, /128).
	Addrs []netip.Prefix
	// Impl is ImplAuto (also ""), ImplKernel or ImplUserspace.
	Impl string
	// RunDir holds the userspace datapath's pid file (<Name>.pid) and log
	// (<Name>.log); created 0700 when missing. Required unless Impl is
	// ImplKernel.
	RunDir string
	// Datapath is the command line starting the userspace datapath
	// (RunDatapath); default this executable's `wireguard-datapath
	// --device <Name> --mtu <MTU>`.
	Datapath []string
	Logger   *slog.Logger
	// OnRepair, when set, is called once for each object Apply repaired
	// after something else changed it: "link" (the device was gone or its
	// datapath dead), "mtu", "address", "up", "key", "port", "peer".
	OnRepair func(object string)
}

// withDefaults validates c and fills in the defaults; the error names the
// bad value.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = defaults.DeviceWireGuard
	}
	if err := checkName(c.Name); err != nil {
		return c, fmt.Errorf("wireguard config: %w", err)
	}
	if c.Port == 0 {
		c.Port = defaults.WireGuardPort
	}
	if c.Port < 1 || c.Port > 65535 {
		return c, fmt.Errorf("wireguard config: port %d: want 1..65535", c.Port)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if err := checkMTU(c.MTU); err != nil {
		return c, fmt.Errorf("wireguard config: %w", err)
	}
	addrs := make([]netip.Prefix, 0, len(c.Addrs))
	for _, p := range c.Addrs {
		a := p.Addr().Unmap()
		if !p.IsValid() || p.Bits() != a.BitLen() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() {
			return c, fmt.Errorf("wireguard config: tunnel address %q: want a single unicast address (/32 or /128)", p)
		}
		addrs = append(addrs, netip.PrefixFrom(a, a.BitLen()))
	}
	c.Addrs = addrs
	switch c.Impl {
	case "":
		c.Impl = ImplAuto
	case ImplAuto, ImplKernel, ImplUserspace:
	default:
		return c, fmt.Errorf("wireguard config: implementation %q: want %s, %s or %s", c.Impl, ImplAuto, ImplKernel, ImplUserspace)
	}
	if c.Impl != ImplKernel {
		if c.RunDir == "" || !filepath.IsAbs(c.RunDir) {
			return c, fmt.Errorf("wireguard config: run directory %q: want an absolute path", c.RunDir)
		}
		if len(c.Datapath) == 0 {
			exe, err := os.Executable()
			if err != nil {
				return c, fmt.Errorf("wireguard config: the datapath command: %w", err)
			}
			c.Datapath = []string{exe, defaults.WireGuardDatapathCommand, "--device", c.Name, "--mtu", strconv.Itoa(c.MTU)}
		}
		if c.Datapath[0] == "" {
			return c, errors.New("wireguard config: the datapath command has no program")
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// checkName refuses what is not a valid interface name.
func checkName(name string) error {
	if name == "" || len(name) >= unix.IFNAMSIZ || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\x00") {
		return fmt.Errorf("device name %q is not a valid interface name", name)
	}
	return nil
}

// checkMTU refuses an MTU no link can have.
func checkMTU(mtu int) error {
	if mtu < 68 || mtu > 65535 {
		return fmt.Errorf("MTU %d: want 68..65535", mtu)
	}
	return nil
}

// Status is the device as the kernel (or the datapath) holds it.
type Status struct {
	Name      string
	Impl      string // ImplKernel or ImplUserspace; "" before the device exists
	Up        bool
	PublicKey wgtypes.Key
	Port      int
	MTU       int
	Peers     []PeerStatus
	LastError string // the last Apply's error, "" when it succeeded
}

// PeerStatus is one peer as the device holds it.
type PeerStatus struct {
	PublicKey     wgtypes.Key
	Endpoint      netip.AddrPort
	AllowedIPs    []netip.Prefix
	LastHandshake time.Time // zero: none yet
	RxBytes       int64
	TxBytes       int64
}

// Device keeps the node's WireGuard device in line with its configuration,
// private key and peers. It is bound to the network namespace of the
// thread that called New: its sockets stay there, and a userspace
// datapath starts there. Setters and hints are safe for concurrent use
// and take effect on the next Apply; Apply is the only path to the
// kernel.
type Device struct {
	cfg Config
	log *slog.Logger
	ns  netns.NsHandle
	nl  *netlink.Handle

	// check: the next Apply re-reads the device and its configuration.
	check atomic.Bool

	// wmu guards the wanted state, set by SetPrivateKey and SetPeers,
	// and what Status and NotReady answer while an Apply runs.
	wmu     sync.Mutex
	key     wgtypes.Key
	peers   []Peer
	gen     uint64 // counts changes of key and peers
	blocked string // NotReady's answer
	status  Status // the last Status read

	// mu guards everything below; Apply holds it for its whole run.
	mu         sync.Mutex
	wg         wgClient
	wgBusy     atomic.Bool   // a wgctrl request is still unanswered (see wgCall)
	impl       string        // resolved implementation, "" until known
	appliedGen uint64        // gen of the wanted state the last Apply set
	applied    *wanted       // what the last configuration set; nil: none since the device appeared
	had        bool          // the device existed and was set up once: its loss is a repair
	keepalive  time.Duration // every peer's persistent keepalive: Keepalive once the device was made again
	linkSet    bool          // the link's attributes were set once on this link
	lastErr    error
	datapath   *datapathProc // the datapath this Device started, if any
	closed     bool
}

// New returns the device manager for cfg with the private key key, bound
// to the calling thread's network namespace. Nothing changes in the kernel
// until Apply.
func New(cfg Config, key wgtypes.Key) (*Device, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if key == (wgtypes.Key{}) {
		return nil, errors.New("wireguard: the all-zero private key is not a WireGuard key")
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("wireguard: current network namespace: %w", err)
	}
	nl, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("wireguard: netlink: %w", err)
	}
	return &Device{cfg: cfg, log: cfg.Logger.With("device", cfg.Name), ns: ns, nl: nl, key: key, gen: 1,
		blocked: fmt.Sprintf("wireguard: device %s not set up yet", cfg.Name), status: Status{Name: cfg.Name}}, nil
}

// SetPrivateKey sets the device's private key (memory only: Apply sets it
// on the device). The all-zero key is refused (logged) and the old key
// kept.
func (d *Device) SetPrivateKey(k wgtypes.Key) {
	if k == (wgtypes.Key{}) {
		d.log.Error("wireguard: the all-zero private key refused; the device keeps its key")
		return
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if k != d.key {
		d.key, d.gen = k, d.gen+1
	}
}

// SetPeers sets the device's peers (memory only: Apply configures them).
// The slice is copied.
func (d *Device) SetPeers(p []Peer) {
	cp := make([]Peer, len(p))
	for i := range p {
		cp[i] = p[i]
		cp[i].AllowedIPs = append([]netip.Prefix(nil), p[i].AllowedIPs...)
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.peers, d.gen = cp, d.gen+1
}

// QueueCheck makes the next Apply re-read the device, its link and its
// WireGuard configuration, and repair what drifted.
func (d *Device) QueueCheck() { d.check.Store(true) }

// OnLinkUpdate is the hint for a link event naming name: for the device it
// queues a check and reports true.
func (d *Device) OnLinkUpdate(name string) bool {
	if name != d.cfg.Name {
		return false
	}
	d.check.Store(true)
	return true
}

// wantedState returns the wanted configuration and its generation.
func (d *Device) wantedState() (wanted, uint64) {
	d.wmu.Lock()
	key, peers, gen := d.key, d.peers, d.gen
	d.wmu.Unlock()
	return wanted{key: key, port: d.cfg.Port, keepalive: d.keepalive, peers: normalizePeers(peers, key.PublicKey(), d.log)}, gen
}

// Apply brings the device to the configuration: it creates the device or
// adopts the one a previous run left (a userspace datapath that answers
// is never restarted), repairs its link (MTU, up, addresses) and
// configures key, port and peers by difference, so unchanged peers keep
// their sessions. With nothing changed and no check queued it does
// nothing. A failure queues a check, so the next Apply starts over.
func (d *Device) Apply() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("wireguard %s: device manager closed", d.cfg.Name)
	}
	want, gen := d.wantedState()
	if !d.check.Swap(false) && gen == d.appliedGen && d.lastErr == nil {
		return nil
	}
	err := d.apply(want)
	d.lastErr = err
	d.wmu.Lock()
	d.status.LastError = errString(err)
	d.wmu.Unlock()
	if err != nil {
		d.check.Store(true)
		return err
	}
	d.appliedGen = gen
	return nil
}

func (d *Device) apply(want wanted) error {
	link, fresh, err := d.ensureDevice()
	d.setBlocked(errString(err))
	if err != nil {
		return err
	}
	if fresh {
		d.applied, d.linkSet = nil, false
		if d.had || d.cfg.KeyPublished {
			d.keepalive = Keepalive
		}
	}
	errs := []error{d.ensureLink(link)}
	if err := d.configure(want); err != nil {
		errs = append(errs, err)
	}
	d.had = true
	return errors.Join(errs...)
}

// repaired reports a repair of object.
func (d *Device) repaired(object string) {
	if d.cfg.OnRepair != nil {
		d.cfg.OnRepair(object)
	}
}

// configure brings the device's WireGuard configuration to want.
func (d *Device) configure(want wanted) error {
	have, err := d.wgDevice()
	if err != nil {
		d.applied = nil
		return fmt.Errorf("wireguard %s: read configuration: %w", d.cfg.Name, err)
	}
	cfg, changed, repairs := diff(want, have, d.applied)
	if !changed {
		d.applied = &want
		return nil
	}
	for _, r := range repairs {
		d.log.Warn("wireguard: repairing the device's configuration, changed by something else", "object", r)
	}
	if err := d.wgConfigure(cfg); err != nil {
		d.applied = nil
		return fmt.Errorf("wireguard %s: configure (%s): %w", d.cfg.Name, describe(cfg), err)
	}
	d.applied = &want
	for _, r := range repairs {
		d.repaired(r)
	}
	d.log.Debug("wireguard: configured", "change", describe(cfg))
	return nil
}

// describe summarises a configuration change for logs and errors.
func describe(cfg wgtypes.Config) string {
	var parts []string
	if cfg.PrivateKey != nil {
		parts = append(parts, "private key")
	}
	if cfg.ListenPort != nil {
		parts = append(parts, fmt.Sprintf("listen port %d", *cfg.ListenPort))
	}
	var add, upd, del int
	for _, p := range cfg.Peers {
		switch {
		case p.Remove:
			del++
		case p.UpdateOnly:
			upd++
		default:
			add++
		}
	}
	if add+upd+del > 0 {
		parts = append(parts, fmt.Sprintf("peers: %d added, %d updated, %d removed", add, upd, del))
	}
	return strings.Join(parts, "; ")
}

// Status reads the device as it is now. While an Apply runs it returns
// what the last read saw.
func (d *Device) Status() Status {
	if !d.mu.TryLock() {
		return cloneStatus(d.statusCached())
	}
	defer d.mu.Unlock()
	s := Status{Name: d.cfg.Name, Impl: d.impl, LastError: errString(d.lastErr)}
	if d.closed {
		return s
	}
	if link, err := d.nl.LinkByName(d.cfg.Name); err == nil {
		s.Up = link.Attrs().Flags&unix.IFF_UP != 0
		s.MTU = link.Attrs().MTU
	}
	if s.Impl != "" {
		if dev, err := d.wgDevice(); err == nil {
			s.PublicKey, s.Port = dev.PublicKey, dev.ListenPort
			for i := range dev.Peers {
				p := &dev.Peers[i]
				s.Peers = append(s.Peers, PeerStatus{
					PublicKey: p.PublicKey, Endpoint: peerEndpoint(p), AllowedIPs: peerAllowed(p),
					LastHandshake: p.LastHandshakeTime, RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes,
				})
			}
		}
	}
	d.wmu.Lock()
	d.status = s
	d.wmu.Unlock()
	return cloneStatus(s)
}

func (d *Device) statusCached() Status {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.status
}

func cloneStatus(s Status) Status {
	peers := make([]PeerStatus, len(s.Peers))
	for i, p := range s.Peers {
		p.AllowedIPs = append([]netip.Prefix(nil), p.AllowedIPs...)
		peers[i] = p
	}
	s.Peers = peers
	return s
}

// NotReady returns why the device cannot carry traffic (it could not be
// created, adopted or reached), or "" when it can.
func (d *Device) NotReady() string {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.blocked
}

func (d *Device) setBlocked(why string) {
	d.wmu.Lock()
	d.blocked = why
	d.wmu.Unlock()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Close closes the Device's sockets. The device and its datapath stay as
// they are: a restarted daemon adopts them.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var err error
	if d.wg != nil {
		err = d.wg.Close()
		d.wg = nil
	}
	d.nl.Close()
	d.ns.Close()
	return err
}

// inNetns runs f on a thread in the Device's network namespace.
func (d *Device) inNetns(f func() error) error { return nlutil.InNetNS(d.ns, f) }
