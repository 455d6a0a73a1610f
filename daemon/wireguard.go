package main

import (
	"log/slog"
	"net/netip"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/overlaymgr"
	"github.com/routelet/routelet/daemon/wgmgr"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/wireguard"
)

// newWireGuardDevice makes the node's WireGuard device: wireguard.New in
// routeletd's network namespace.
var newWireGuardDevice wgmgr.NewDevice = func(c wireguard.Config, k wgtypes.Key) (wgmgr.Device, error) {
	d, err := wireguard.New(c, k)
	if err != nil {
		return nil, err // an untyped nil: a nil *Device in the interface would not be nil
	}
	return d, nil
}

// newWireGuard builds the WireGuard manager on the real device; its route
// tables own only routelet-protocol routes on the device.
func newWireGuard(cfg *config.Config, blocks []netip.Prefix, podMTU int, onKey func(wgtypes.Key), status *health.Status, metrics *health.Metrics, repairs *inspect.RepairLog, log *slog.Logger) (*wgmgr.Manager, error) {
	return wgmgr.New(wgmgr.Config{
		StateDir: cfg.StateDir, Device: cfg.WireGuard.Device, Port: cfg.WireGuard.Port, MTU: podMTU,
		Impl: cfg.WireGuard.Implementation, OnPublicKey: onKey, LocalBlocks: blocks, RouteProtocol: cfg.RouteProtocol,
		CheckPeriod: cfg.DeviceCheckPeriod, Logger: log,
		OnRepair: func(object string) {
			metrics.Repairs.WithLabelValues(object).Inc()
			repairs.Add("device", object+" of "+cfg.WireGuard.Device, 1)
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

// noPeers is the overlay manager while another manager routes the peers'
// blocks (the WireGuard manager with encryption on, the BGP manager with
// bgp and encapsulation none): it is handed no peers, so it programs no
// routes, ARP or FDB entries towards them (and removes those an earlier
// run left); its snapshot shows the same. Its other capabilities (device
// check, not-ready reason) are the overlay's.
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
