// Package hostread reads the node's own address space for the peer check
// (pkg/peers): every link, address and main-table route but routelet's
// own (pod veths, overlay devices, routes of its protocol), read again
// beside the apply loop when the host changes. It also says which links
// are routelet's, and checks the configuration against that space at
// start-up (CheckConfig).
package hostread

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
)

// NewPeerValidator builds the check every peer record passes before the
// overlay and the allowlists see it: against self (this node's published
// record: host IPs, VTEP MACs, tunnel addresses, WireGuard public key,
// blocks; a rotated key is set with the Validator's SetWireGuardKey) and the node's
// own address space, read from the kernel (host.Read) at the first check
// and again after Watch heard of a change (and at every full resync).
// routelet's own links (pod veths, overlay devices) and routes of its
// protocol are not the node's space. First-seen times persist in the state
// directory.
func NewPeerValidator(cfg *config.Config, self peers.Record, blocks []netip.Prefix, host *Reader, metrics *health.Metrics, log *slog.Logger) (*peers.Validator, error) {
	own, _ := peers.Parse(self)
	v := peers.New(peers.Options{
		Self:     peers.Self{Name: cfg.NodeName, IPv4: own.IPv4, IPv6: own.IPv6, Blocks: blocks, WireGuardKey: own.WireGuard.PublicKey},
		ReadHost: host.Read,
		StateDir: cfg.StateDir,
		Logger:   log,
	})
	if err := v.Register(metrics.Registry); err != nil {
		return nil, err
	}
	return v, nil
}

// CheckConfig refuses configuration that would take the node's own links or
// address space: an interface prefix matching the uplink, a link routelet
// did not create or an overlay device's name, and a pod CIDR overlapping
// the node's addresses or connected subnets. The errors are *config.Error
// (exit 2) naming the key, its source and the value.
func CheckConfig(cfg *config.Config) (nodespace.Host, error) {
	for _, dev := range OverlayDevices(cfg).Names() {
		if strings.HasPrefix(dev, cfg.IfacePrefix) {
			return nodespace.Host{}, cfg.KeyError("interface-prefix", cfg.IfacePrefix,
				fmt.Errorf("interface prefix %q matches routelet's own overlay device %s", cfg.IfacePrefix, dev))
		}
	}
	host, err := nodespace.ReadHost(nil, cfg.RouteProtocol, OwnLink(cfg))
	if err != nil {
		return nodespace.Host{}, err
	}
	if err := host.CheckInterfacePrefix(cfg.IfacePrefix); err != nil {
		return nodespace.Host{}, cfg.KeyError("interface-prefix", cfg.IfacePrefix, err)
	}
	for _, p := range cfg.PodCIDRs {
		if err := host.CheckBlock(p); err != nil {
			return nodespace.Host{}, cfg.KeyError("pod-cidr", p.String(), err)
		}
	}
	return host, nil
}

// OwnLink reports the links routelet creates (overlay.OwnedLinks: pod
// veths, the overlay devices of their kind, by the configured names).
// Their addresses and routes are routelet's, not the node's own.
func OwnLink(cfg *config.Config) func(nodespace.Link) bool {
	return overlay.OwnedLinks(cfg.IfacePrefix, OverlayDevices(cfg))
}

// OverlayDevices are the overlay device names cfg gives (only the IPv4
// VXLAN device's is configurable), and the WireGuard device's when
// encryption is on, as daemon.json publishes them.
func OverlayDevices(cfg *config.Config) overlay.Devices {
	d := overlay.Devices{VXLAN: cfg.VXLANDevice}.WithDefaults()
	if cfg.Encrypted() {
		d.WireGuard = cfg.WireGuard.Device
	}
	return d
}

// Reader reads the node's own address space for the peer validator
// (nodespace.ReadHost: every link, address and main-table route). The read
// a host change asks for runs beside the loop, so that no pass (and no pod
// route) waits for it: the change starts it hostSettle later (so that a
// burst of changes, such as a new pod veth's link and address events, makes
// one read), changes after that make one more read after it, and each read
// done tells the validator (HostChanged) and wakes the loop (Done), whose
// next pass takes it. A read the validator asks for with none waiting (the
// first check, a full resync) is made at once.
type Reader struct {
	ctx  context.Context
	read func() (nodespace.Host, error)
	Done func() // called after each read beside the loop; set before the first change

	mu      sync.Mutex
	running bool      // a read beside the loop runs
	again   bool      // a change came since the running read began
	ready   *hostRead // a read done beside the loop and not taken yet
}

// hostRead is one read's result.
type hostRead struct {
	host nodespace.Host
	err  error
}

// New returns the reader of the node's space for cfg; reads
// beside the loop stop with ctx.
func New(ctx context.Context, cfg *config.Config) *Reader {
	owned := OwnLink(cfg)
	return &Reader{ctx: ctx, read: func() (nodespace.Host, error) { return nodespace.ReadHost(nil, cfg.RouteProtocol, owned) }}
}

// Read is the validator's ReadHost: the read done beside the loop since the
// last Read, else one made now.
func (r *Reader) Read() (nodespace.Host, error) {
	r.mu.Lock()
	got := r.ready
	r.ready = nil
	r.mu.Unlock()
	if got != nil {
		return got.host, got.err
	}
	return r.read()
}

// changed starts a read beside the loop, or asks the running one for one
// more after it.
func (r *Reader) changed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		r.again = true
		return
	}
	r.running = true
	go r.run()
}

// hostSettle is how long a read beside the loop waits after the change
// that starts it.
const hostSettle = 100 * time.Millisecond

// run reads until no change came since the last read began, handing each
// read over (ready, Done).
func (r *Reader) run() {
	for {
		select {
		case <-r.ctx.Done():
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		case <-time.After(hostSettle):
		}
		r.mu.Lock()
		r.again = false // the read below sees every change so far
		r.mu.Unlock()
		h, err := r.read()
		r.mu.Lock()
		r.ready = &hostRead{host: h, err: err}
		again := r.again
		r.again, r.running = false, again
		r.mu.Unlock()
		r.Done()
		if !again {
			return
		}
	}
}

// Watch is the netwatch owner of the node's own address space: any
// address, link or foreign main-table route event (or lost events) makes
// the host be read again (Reader, beside the loop), after which the
// validator re-checks the peers against it in the pass it wakes, so a
// block over an address added later is refused without waiting for a peer
// change or the resync.
type Watch struct {
	R *Reader
}

// Interest asks for host changes; routes of routelet's protocol are not
// the node's own, and neither is anything on routelet's own links
// (OwnLink: the node's space read leaves them out), so that a pod's
// veth coming or going causes no read.
func (Watch) Interest(cfg *config.Config) netwatch.Interest {
	owned := OwnLink(cfg)
	return netwatch.Interest{Host: true, OwnProtocols: []int{cfg.RouteProtocol},
		HostIgnores: func(name, kind string) bool { return owned(nodespace.Link{Name: name, Type: kind}) }}
}

// OnHostChange implements netwatch.HostHandler.
func (h Watch) OnHostChange() { h.R.changed() }

// OnLink implements netwatch.Handler (no interfaces are owned).
func (Watch) OnLink(netwatch.LinkEvent) {}

// OnRoute implements netwatch.Handler (no interfaces are owned).
func (Watch) OnRoute(netwatch.RouteEvent) {}

// OnNeigh implements netwatch.Handler (no interfaces are owned).
func (Watch) OnNeigh(netwatch.NeighEvent) {}

// Rescan implements netwatch.Handler: events were lost.
func (h Watch) Rescan() { h.OnHostChange() }
