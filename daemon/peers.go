package main

import (
	"log/slog"
	"net/netip"
	"slices"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/pkg/netguard"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
)

// newPeerValidator builds the check every peer record passes before the
// overlay and the allowlists see it: against self (this node's published
// record: host IPs, VTEP MACs, tunnel addresses, blocks) and the node's
// own address space, read from the kernel at the first check and again
// after hostWatch heard of a change (and at every full resync). routelet's own
// links (pod veths, overlay devices) and routes of its protocol are not
// the node's space. First-seen times persist in the state directory.
func newPeerValidator(cfg *config.Config, self peers.Record, blocks []netip.Prefix, metrics *health.Metrics, log *slog.Logger) (*peers.Validator, error) {
	own, _ := peers.Parse(self)
	owned := peerOwned(cfg)
	v := peers.New(peers.Options{
		Self:     peers.Self{Name: cfg.NodeName, IPv4: own.IPv4, IPv6: own.IPv6, Blocks: blocks},
		ReadHost: func() (netguard.Host, error) { return netguard.ReadHost(nil, cfg.RouteProtocol, owned) },
		StateDir: cfg.StateDir,
		Logger:   log,
	})
	if err := v.Register(metrics.Registry); err != nil {
		return nil, err
	}
	return v, nil
}

// peerOwned reports the links whose addresses are not the node's own
// space for the peer check: pod veths and the overlay devices by name.
func peerOwned(cfg *config.Config) func(netguard.Link) bool {
	devices := []string{cfg.VXLANDevice, overlay.DeviceVXLANv6, overlay.DeviceIPIP}
	return func(l netguard.Link) bool {
		return netguard.Owned(l, cfg.IfacePrefix) || slices.Contains(devices, l.Name)
	}
}

// hostWatch is the netwatch owner of the node's own address space: any
// address, link or foreign main-table route event (or lost events) makes
// the validator read the host again and wakes the loop to re-check the
// peers against it, so a block over an address added later is refused
// without waiting for a peer change or the resync.
type hostWatch struct {
	v    interface{ HostChanged() }
	wake func()
}

// Interest asks for host changes; routes of routelet's protocol are not
// the node's own.
func (hostWatch) Interest(cfg *config.Config) netwatch.Interest {
	return netwatch.Interest{Host: true, OwnProtocols: []int{cfg.RouteProtocol}}
}

// OnHostChange implements netwatch.HostHandler.
func (h hostWatch) OnHostChange() { h.v.HostChanged(); h.wake() }

// OnLink implements netwatch.Handler (no interfaces are owned).
func (hostWatch) OnLink(netwatch.LinkEvent) {}

// OnRoute implements netwatch.Handler (no interfaces are owned).
func (hostWatch) OnRoute(netwatch.RouteEvent) {}

// OnNeigh implements netwatch.Handler (no interfaces are owned).
func (hostWatch) OnNeigh(netwatch.NeighEvent) {}

// Rescan implements netwatch.Handler: events were lost.
func (h hostWatch) Rescan() { h.OnHostChange() }
