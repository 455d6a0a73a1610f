package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/nodeid"
	"github.com/routelet/routelet/daemon/overlaymgr"
	"github.com/routelet/routelet/daemon/wgmgr"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/wireguard"
)

// newWireGuardDevice makes the node's WireGuard device: wireguard.New in
// routeletd's network namespace.
var newWireGuardDevice wgmgr.NewDevice = func(wireguard.Config, wgtypes.Key) (wgmgr.Device, error) {
	return nil, errors.New("this build of routeletd has no WireGuard device")
}

// WireGuard's overhead on the pod MTU: outer IP header, UDP, WireGuard's
// header and tag (IPv4 underlay: 20+8+32; IPv6: 40+8+32).
const (
	wireGuardOverheadV4 = 60
	wireGuardOverheadV6 = 80
)

// wireGuardPodMTU is the pod MTU with encryption on: the configured one,
// else the uplink's MTU less WireGuard's overhead (an IPv6-only underlay
// costs 20 bytes more). The WireGuard device gets the same MTU.
func wireGuardPodMTU(configured int, id nodeid.Identity) (int, error) {
	if configured != 0 {
		return configured, nil
	}
	parent := id.MTU
	if parent == 0 {
		parent = 1500
	}
	mtu := parent - wireGuardOverheadV4
	if !id.IPv4.IsValid() && id.IPv6.IsValid() {
		mtu = parent - wireGuardOverheadV6
	}
	if mtu < 576 {
		return 0, fmt.Errorf("wireguard: the MTU of %s (%d) leaves pods %d bytes, less than 576", id.Iface, parent, mtu)
	}
	return mtu, nil
}

// newWireGuard builds the WireGuard manager on the real device; its route
// tables own only routelet-protocol routes on the device.
func newWireGuard(cfg *config.Config, blocks []netip.Prefix, podMTU int, status *health.Status, metrics *health.Metrics, repairs *inspect.RepairLog, log *slog.Logger) (*wgmgr.Manager, error) {
	return wgmgr.New(wgmgr.Config{
		StateDir: cfg.StateDir, Device: cfg.WireGuardDevice, Port: cfg.WireGuardPort, MTU: podMTU,
		Impl: cfg.WireGuardImplementation, LocalBlocks: blocks, RouteProtocol: cfg.RouteProtocol,
		CheckPeriod: cfg.DeviceCheckPeriod, Logger: log,
		OnRepair: func(object string) {
			metrics.Repairs.WithLabelValues(object).Inc()
			repairs.Add("device", object+" of "+cfg.WireGuardDevice, 1)
		},
		OnDrift: func(object, detail string) { repairs.Add(object, detail, 1) },
	}, newWireGuardDevice, func(v int, owned []string) (wgmgr.RouteTable, error) {
		return routes.New(routes.Config{
			IPVersion: v, Protocol: cfg.RouteProtocol, InterfaceNames: owned,
			Liveness: status.Progress, Logger: log.With("component", "wireguard-routes"),
			OnConflict: countConflict(metrics, v),
		})
	})
}

// noPeers is the overlay manager with encryption on: it is handed no
// peers, so it programs no routes, ARP or FDB entries towards them (and
// removes those an earlier run left) while the WireGuard manager routes
// the peers' blocks; its snapshot shows the same. Its other capabilities
// (device check, not-ready reason) are the overlay's.
type noPeers struct{ *overlaymgr.Manager }

// OnNodes hands the overlay no peers.
func (o noPeers) OnNodes([]peers.NodeInfo) { o.Manager.OnNodes(nil) }

// Snapshot is the overlay's snapshot for no peers.
func (o noPeers) Snapshot(d *inspect.Desired) {
	ps := d.Peers
	d.Peers = nil
	o.Manager.Snapshot(d)
	d.Peers = ps
}

// The overlay's capabilities the loop asks for stay with the wrapper.
var (
	_ agent.Checker       = noPeers{}
	_ agent.Blocker       = noPeers{}
	_ inspect.Snapshotter = noPeers{}
)
