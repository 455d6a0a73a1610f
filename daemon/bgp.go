package main

import (
	"errors"
	"log/slog"
	"net/netip"

	"github.com/routelet/routelet/daemon/bgpmgr"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/nodeid"
	"github.com/routelet/routelet/pkg/bgp"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// newBGPSpeaker starts the node's BGP speaker. It outlives the loop's
// rebuilds (the sessions stay up when the node's blocks grow) and is
// closed without notifying the peers when routeletd stops, so peers doing
// graceful restart keep this node's routes until it is back.
func newBGPSpeaker(cfg *config.Config, id nodeid.Identity, changes *bgpmgr.Changes, log *slog.Logger) (*bgp.Speaker, error) {
	rid := bgpRouterID(cfg, id)
	if !rid.IsValid() {
		return nil, errors.New("bgp: this node has no IPv4 address to take as its router ID: set bgp-router-id")
	}
	sp, err := bgp.New(bgp.Config{
		ASN: cfg.BGP.ASN, RouterID: rid, ListenPort: cfg.BGP.ListenPort,
		GracefulRestart: cfg.BGP.GracefulRestart, RestartTime: cfg.BGP.RestartTime,
		OnChange: changes.Notify, Logger: log.With("component", "bgp"),
	})
	if err != nil {
		return nil, err
	}
	return sp, nil
}

// bgpRouterID is bgp-router-id, else the node's host IPv4 (invalid when
// it has none).
func bgpRouterID(cfg *config.Config, id nodeid.Identity) netip.Addr {
	if cfg.BGP.RouterID.IsValid() {
		return cfg.BGP.RouterID
	}
	return id.IPv4
}

// loopSpeaker is the speaker as one build of the loop sees it: closing
// the manager leaves the speaker running for the next build.
type loopSpeaker struct{ *bgp.Speaker }

// Close leaves the speaker to routeletd's run, which closes it last.
func (loopSpeaker) Close() error { return nil }

// bgpTables are the BGP manager's route tables, which its caller closes.
type bgpTables []*routes.RouteTable

func (ts bgpTables) close() {
	for _, t := range ts {
		t.Close()
	}
}

// newBGP builds the BGP manager on the running speaker for one build of
// the loop. program says whether learned routes go into the kernel
// (encapsulation none, no encryption); otherwise the node only announces
// its blocks. Its tables own only the BGP route protocol's routes on the
// uplink.
func newBGP(cfg *config.Config, id nodeid.Identity, host nodespace.Host, blocks []netip.Prefix, ds datastore.Datastore,
	parents []overlay.Underlay, sp *bgp.Speaker, changes *bgpmgr.Changes, program bool, status *health.Status, metrics *health.Metrics,
	repairs *inspect.RepairLog, log *slog.Logger) (*bgpmgr.Manager, bgpTables, error) {
	global, err := bgpmgr.GlobalPeers(cfg.BGP.Peers, cfg.BGP.MaxPrefixes)
	if err != nil {
		return nil, nil, err
	}
	iface, subnets, err := uplinkSubnets(parents)
	if err != nil {
		return nil, nil, err
	}
	var local []netip.Addr
	for _, a := range host.Addrs {
		local = append(local, a.Addr())
	}
	var own func() ([]peers.BGPPeer, error)
	if nb, ok := ds.(datastore.NodeBGPPeers); ok {
		own = bgpmgr.OwnPeers(nb.OwnBGPPeers, func(s string) (peers.BGPPeer, error) { return peers.ParseBGPPeer(s, true) })
	}
	rid := bgpRouterID(cfg, id)
	var tables bgpTables
	m, err := bgpmgr.New(bgpmgr.Config{
		NodeName: cfg.NodeName, HostIPv4: id.IPv4, HostIPv6: id.IPv6, Iface: iface, Subnets: subnets, LocalAddrs: local,
		ASN: cfg.BGP.ASN, RouterID: rid, NodeMesh: cfg.BGP.NodeMesh, Peers: global, Pools: cfg.BGP.Pools,
		LocalBlocks: blocks, Program: program, OwnPeers: own,
		GracefulRestart: cfg.BGP.GracefulRestart, RestartTime: cfg.BGP.RestartTime,
		RouteProtocol: cfg.BGP.RouteProtocol, MaxPrefixes: cfg.BGP.MaxPrefixes,
		CheckPeriod: cfg.DeviceCheckPeriod, Changes: changes, Logger: log.With("component", "bgp-routes"),
		OnDrift: func(object, detail string) { repairs.Add(object, detail, 1) },
	}, loopSpeaker{sp}, func(v int) (bgpmgr.RouteTable, error) {
		t, err := routes.New(routes.Config{
			IPVersion: v, Protocol: cfg.BGP.RouteProtocol, InterfaceNames: []string{iface},
			Liveness: status.Progress, Logger: log.With("component", "bgp-routes"),
			OnConflict: countConflict(metrics, v),
		})
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
		return t, nil
	})
	if err != nil {
		tables.close()
		return nil, nil, err
	}
	return m, tables, nil
}

// uplinkSubnets returns the uplink, the overlay's parent of the first
// family (the link holding the host IPv4 when the node has one), and the
// subnets the host IPs are on, from the parents the overlay found.
func uplinkSubnets(parents []overlay.Underlay) (string, []netip.Prefix, error) {
	if len(parents) == 0 || parents[0].Name == "" {
		return "", nil, errors.New("bgp: no link holds this node's host IP")
	}
	var subnets []netip.Prefix
	for _, p := range parents {
		subnets = append(subnets, p.Subnet())
	}
	return parents[0].Name, subnets, nil
}
