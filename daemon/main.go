// Command routeletd is routelet's node daemon: it keeps the kernel's routes
// in line with the state directory's workload records, publishes the node's
// record and status, and serves health and metrics. See docs/daemon.md.
// This package parses the command line and wires the daemon's parts; the
// subcommands are daemon/cli.
//
//	routeletd [flags]           run the daemon
//	routeletd cleanup [flags]   remove what routelet created on this node
//	routeletd status [flags]    print this node's status (see docs/daemon.md)
//	routeletd nodes …           list, show, add, remove peer records (file datastore)
//	routeletd diagnose SRC DST  walk the path between two pods, IPs or nodes (see docs/daemon.md)
//	routeletd version           print the version
//	routeletd etcd init [flags] write the etcd datastore's pools
//	routeletd leave [flags]     remove this node from the etcd datastore
//	routeletd wireguard rotate-key [flags]  replace the node's WireGuard key
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/allowsetup"
	"github.com/routelet/routelet/daemon/bgpmgr"
	"github.com/routelet/routelet/daemon/blockgrow"
	"github.com/routelet/routelet/daemon/cli"
	"github.com/routelet/routelet/daemon/cniconf"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/datastore/file"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/hostread"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/instance"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/daemon/nodeid"
	"github.com/routelet/routelet/daemon/overlaymgr"
	"github.com/routelet/routelet/daemon/wgmgr"
	"github.com/routelet/routelet/daemon/workloads"
	"github.com/routelet/routelet/internal/buildinfo"
	"github.com/routelet/routelet/internal/termsafe"
	"github.com/routelet/routelet/pkg/bgp"
	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
	"github.com/routelet/routelet/pkg/wireguard"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// commands are routeletd's subcommands beside running the daemon; each
// parses its own arguments (what follows its name).
var commands = map[string]func(args []string) int{
	"diagnose":  cli.Diagnose,
	"version":   runVersion,
	"cleanup":   cli.Cleanup,
	"status":    cli.Status,
	"nodes":     cli.Nodes,
	"etcd":      cli.Etcd,
	"leave":     cli.Leave,
	"wireguard": cli.WireGuard,
}

// internalCommands are subcommands routeletd starts itself, left out of
// the help: the userspace WireGuard datapath (pkg/wireguard).
var internalCommands = map[string]func(args []string) int{
	defaults.WireGuardDatapathCommand: wireguard.DatapathMain,
}

func run(args []string) int {
	if len(args) > 0 {
		if c, ok := commands[args[0]]; ok {
			return c(args[1:])
		}
		if c, ok := internalCommands[args[0]]; ok {
			return c(args[1:])
		}
	}
	cfg, log, code := cli.LoadConfig(args)
	if cfg == nil {
		return code
	}
	if _, ok := datastores[cfg.Datastore]; !ok {
		fmt.Fprintf(os.Stderr, "routeletd: config key %q: value %q is not supported by this version\n", "datastore", cfg.Datastore)
		return cli.ExitConfig
	}
	g := cfg.ApplyGoRuntime(os.LookupEnv)
	log.Info("go runtime memory settings", "gcPercent", g.GCPercent, "gcFrom", g.GCSource, "memoryLimitBytes", g.MemoryLimit, "memoryLimitFrom", g.MemoryLimitSource)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := daemon(ctx, cfg, log); err != nil {
		var cerr *config.Error
		if errors.As(err, &cerr) {
			log.Error("configuration refused", "err", err)
			fmt.Fprintf(os.Stderr, "routeletd: %s\n", termsafe.Escape(err.Error()))
			return cli.ExitConfig
		}
		log.Error("routeletd failed", "err", err)
		return cli.ExitFail
	}
	log.Info("routeletd stopped; dataplane left in place")
	return cli.ExitOK
}

// runVersion prints the version.
func runVersion([]string) int {
	fmt.Println("routeletd", buildinfo.Version())
	return cli.ExitOK
}

// daemon runs until ctx is done. It serves health first (not ready), waits
// for the node's identity, then runs the apply loop.
func daemon(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	log.Info("routeletd starting", "version", buildinfo.Version(), "node", cfg.NodeName, "stateDir", cfg.StateDir,
		"podCIDRs", cfg.PodCIDRs, "encapsulation", cfg.Encapsulation, "config", cfg.ConfigFile)
	if len(cfg.PodCIDRs) == 0 && cfg.Datastore == config.DatastoreFile {
		log.Warn("no pod-cidr given: no local blocks are published or blackholed; the plugin needs ipam.blocks in its conflist")
	}
	release, err := instance.ClaimNetns(log, instance.Describe(cfg, buildinfo.Version()))
	if err != nil {
		return err
	}
	defer release()
	if _, err := hostread.CheckConfig(cfg); err != nil {
		return err
	}
	cni, err := cniconf.FromConfig(cfg)
	if err != nil {
		return err
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return err
	}
	unlock, err := instance.Lock(cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	removed, err := agent.StateDirTemps{Store: store, IPAMDir: filepath.Join(cfg.StateDir, "ipam"), WireGuardDir: filepath.Join(cfg.StateDir, wireguard.KeyDir)}.RemoveStaleTemps()
	for _, p := range removed {
		log.Info("removed a temp file a killed writer left", "path", p)
	}
	if err != nil {
		log.Warn("cannot remove every stale temp file", "err", err)
	}
	// The loop ticks at least every device-check period; allow three misses.
	status := health.NewStatus(max(3*cfg.DeviceCheckPeriod, 30*time.Second))
	metrics := health.NewMetrics()
	// Cancelled on any return, so the health server stops with the daemon.
	ctx, cancel := context.WithCancel(ctx)
	serveDone := make(chan struct{})
	defer func() { cancel(); <-serveDone }()
	if cfg.HealthAddr != "" {
		l, err := health.Listen(cfg.HealthAddr)
		if err != nil {
			close(serveDone)
			return err
		}
		go func() {
			defer close(serveDone)
			if err := health.Serve(ctx, l, health.Handler(status, metrics), log); err != nil {
				log.Error("health server stopped", "err", err)
			}
		}()
	} else {
		close(serveDone)
	}
	ep := &stateEndpoint{cfg: cfg, status: status, repairs: inspect.NewRepairLog(), log: log.With("component", "state-endpoint")}
	stopEndpoint := startStateEndpoint(ctx, ep)
	defer func() { cancel(); stopEndpoint() }()

	id, err := waitIdentity(ctx, cfg, store, status, log)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	// Addresses may have come up while the node IP was awaited.
	host, err := hostread.CheckConfig(cfg)
	if err != nil {
		return err
	}
	// The daemon is not ready until the datastore gives it its blocks.
	ds, err := datastores[cfg.Datastore](ctx, cfg, store, log.With("component", "datastore"))
	if err != nil {
		return err
	}
	if c, ok := ds.(datastore.Closer); ok {
		defer c.Close()
	}
	if err := wireDatastore(ds, status, metrics); err != nil {
		return err
	}
	blocks, err := waitBlocks(ctx, ds, func(reason string) { notReady(cfg, store, status, reason, log) }, log)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	grower, err := blockgrow.New(ds, metrics, log.With("component", "blocks"))
	if err != nil {
		return err
	}
	parts := loopParts{cfg: cfg, id: id, ds: ds, store: store, status: status, metrics: metrics, ep: ep, cni: cni, grower: grower, log: log}
	if cfg.BGP.Enabled {
		parts.bgpChanges = &bgpmgr.Changes{}
		if parts.bgp, err = newBGPSpeaker(cfg, id, parts.bgpChanges, log); err != nil {
			return err
		}
		defer parts.bgp.Close() // no notification: the peers keep this node's routes while it restarts
	}
	for {
		var grew *blockgrow.Grew
		if err := runLoop(ctx, parts, host, blocks); !errors.As(err, &grew) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		blocks = blockgrow.WithBlock(blocks, grew.Block)
		log.Info("this node's blocks grew: rebuilding the loop with them (the dataplane stays as it is meanwhile)", "blocks", blocks)
		if host, err = hostread.CheckConfig(cfg); err != nil {
			return err
		}
	}
}

// loopParts are what every build of the apply loop shares: they outlive
// a rebuild when the node's blocks grow.
type loopParts struct {
	cfg     *config.Config
	id      nodeid.Identity
	ds      datastore.Datastore
	store   *state.Store
	status  *health.Status
	metrics *health.Metrics
	ep      *stateEndpoint
	cni     *cniconf.Conf
	grower  *blockgrow.Grower
	log     *slog.Logger
	// bgp is the BGP speaker (nil unless bgp is on): its sessions outlive
	// a rebuild; bgpChanges carries its hints to the loop of the day.
	bgp        *bgp.Speaker
	bgpChanges *bgpmgr.Changes
}

// runLoop builds the apply loop for blocks and runs it until ctx is done,
// or until the grower claimed another block: then it returns a
// *blockgrow.Grew, and the caller builds the loop again with that block
// added. Either way it stops as on SIGTERM, leaving the dataplane as it
// is.
func runLoop(ctx context.Context, p loopParts, host nodespace.Host, blocks []netip.Prefix) error {
	cfg, id, ds, store, status, metrics, ep, cni, log := p.cfg, p.id, p.ds, p.store, p.status, p.metrics, p.ep, p.cni, p.log
	ctx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	if err := checkBlocks(host, blocks); err != nil {
		return err
	}
	podMTU := nodeid.PodMTU(cfg.MTU, id, cfg.Encapsulation, cfg.Encrypted())
	om, err := newOverlay(cfg, id, blocks, status, metrics, ep.repairs, log)
	if err != nil {
		return err
	}
	defer om.Close()
	if mtu := om.PodMTU(); mtu > 0 && !cfg.Encrypted() { // encrypted: WireGuard's overhead, not the overlay's
		podMTU = mtu
	}
	// With encryption on, pod traffic to peers goes only through the
	// WireGuard device: the overlay is handed no peers, and the pod MTU
	// is WireGuard's.
	var wg *wgmgr.Manager
	var overlayMgr interface {
		agent.Manager
		inspect.Snapshotter
	} = om
	var pv *peers.Validator // made below, from the record this one fills in
	if cfg.Encrypted() {
		onKey := func(k wgtypes.Key) {
			if pv != nil {
				pv.SetWireGuardKey(k)
			}
		}
		if wg, err = newWireGuard(cfg, blocks, podMTU, onKey, status, metrics, ep.repairs, log); err != nil {
			return err
		}
		defer wg.Close()
		if err := wg.Register(metrics.Registry); err != nil {
			return fmt.Errorf("wireguard metrics: %w", err)
		}
		defer wg.Register(health.Unregistering{Reg: metrics.Registry}) // so the next build can register its own
		overlayMgr = noPeers{om}
	}
	// With BGP on, the speaker announces this node's blocks; with
	// encapsulation none (and no encryption) the routes to the peers'
	// blocks are the ones BGP learns, and the overlay is handed no peers.
	var bm *bgpmgr.Manager
	if p.bgp != nil {
		program := cfg.Encapsulation == config.EncapNone && !cfg.Encrypted()
		var tables bgpTables
		if bm, tables, err = newBGP(cfg, id, host, blocks, ds, om.Parents(), p.bgp, p.bgpChanges, program, status, metrics, ep.repairs, log); err != nil {
			return err
		}
		defer tables.close()
		defer bm.Close()
		if err := bm.Register(metrics.Registry); err != nil {
			return fmt.Errorf("bgp metrics: %w", err)
		}
		defer bm.Register(health.Unregistering{Reg: metrics.Registry}) // so the next build can register its own
		if program {
			overlayMgr = noPeers{om}
		}
	}
	log.Info("node identity", "hostIPv4", addrString(id.IPv4), "hostIPv6", addrString(id.IPv6), "iface", id.Iface, "podMTU", podMTU)

	// This node's record, built once: identity, blocks, the overlay's VTEP
	// facts. It goes to the datastore and never comes back.
	self := peers.Record{Name: cfg.NodeName, HostIPv4: addrString(id.IPv4), HostIPv6: addrString(id.IPv6)}
	for _, b := range blocks {
		self.Blocks = append(self.Blocks, b.String())
	}
	om.Publish(&self)
	if wg != nil {
		wg.Publish(&self)
	}
	if cfg.BGP.Enabled { // the mesh peers with the nodes whose record has an AS
		self.BGPAS = strconv.FormatUint(uint64(cfg.BGP.ASN), 10)
	}
	grace := cfg.GracePeriod
	if grace == 0 {
		grace = -1 // RouteTable: negative disables, 0 means its default
	}
	newTable := func(v int) (*routes.RouteTable, error) {
		return routes.New(routes.Config{
			IPVersion: v, Protocol: cfg.RouteProtocol,
			InterfacePrefixes: []string{cfg.IfacePrefix}, IncludeNoInterface: true,
			RemoveExternalRoutes: true, GracePeriod: grace,
			Liveness: status.Progress, Logger: log.With("component", "routes"),
			OnConflict: countConflict(metrics, v),
		})
	}
	rt4, err := newTable(4)
	if err != nil {
		return err
	}
	defer rt4.Close()
	var rt6 agent.RouteTable
	if t6, err := newTable(6); err != nil {
		log.Warn("IPv6 route table unavailable; IPv6 pod routes will not be programmed", "err", err)
	} else {
		defer t6.Close()
		rt6 = t6
	}
	alloc, err := ipam.New(filepath.Join(cfg.StateDir, "ipam"), blocks, ipam.Options{})
	if err != nil {
		return err
	}
	allow, closeAllow, err := allowsetup.New(cfg, blocks, metrics, ep.repairs, log)
	if err != nil {
		return err
	}
	defer closeAllow()
	defer allow.Register(health.Unregistering{Reg: metrics.Registry}) // so the next build can register its own
	hr := hostread.New(ctx, cfg)
	pv, err = hostread.NewPeerValidator(cfg, self, blocks, hr, metrics, log)
	if err != nil {
		return err
	}
	defer pv.Register(health.Unregistering{Reg: metrics.Registry})
	onReady, err := cni.Start(ctx, podMTU, log)
	if err != nil {
		return err
	}
	keeper, err := podnet.NewKeeper(cfg.IfacePrefix, log.With("component", "keeper"))
	if err != nil {
		return err
	}
	defer keeper.Close()
	guards, err := podguard.New(nftables.AsLasting())
	if err != nil {
		return err
	}
	defer guards.Close()
	keeper.SetGuards(guards, uint16(cfg.VXLANPort))
	managers := []agent.Manager{allow, overlayMgr}
	parts := []inspect.Snapshotter{allow, overlayMgr}
	if wg != nil {
		managers = append(managers, wg) // after the overlay: its routes are the peers'
		parts = append(parts, wg)       // after the overlay's: it adds to its families
	}
	if bm != nil {
		managers = append(managers, bm) // after the overlay: its routes are the peers'
		parts = append(parts, bm)
	}
	managers = append(managers, agent.NewKeeperManager(keeper, agent.KeeperOptions{
		KeepPeriod:  cfg.DeviceCheckPeriod,
		GuardPeriod: cfg.AllowlistCheckPeriod, // the pod source check was an allowlist chain: same period
		Repairs:     ep.repairs, Metrics: metrics, Log: log,
	})) // the keeper last: every route goes first
	a := agent.New(agent.Options{
		NodeName: cfg.NodeName, Self: self, LocalBlocks: blocks, PodMTU: podMTU, Version: buildinfo.Version(),
		IfacePrefix: cfg.IfacePrefix, RouteProtocol: cfg.RouteProtocol, VXLANPort: cfg.VXLANPort,
		ResyncPeriod: cfg.ResyncPeriod, TickPeriod: cfg.DeviceCheckPeriod, LeakGracePeriod: cfg.LeakGracePeriod,
		StaticARP: true, NodeSpace: host, OnReady: onReady, Devices: hostread.OverlayDevices(cfg),
	}, agent.Deps{
		Workloads: workloads.New(store, log), Peers: datastore.Peers{DS: ds, V: pv}, Status: store,
		RT4: rt4, RT6: rt6, Releaser: ipamReleaser{alloc}, Host: agent.KernelHost{},
		Managers: managers,
		Temps:    agent.StateDirTemps{Store: store, IPAMDir: filepath.Join(cfg.StateDir, "ipam"), WireGuardDir: filepath.Join(cfg.StateDir, wireguard.KeyDir)},
		Repairs:  ep.repairs,
		Health:   status, Metrics: metrics, Log: log,
	})
	l := &loop{agent: a, parts: append(parts, refusals{pv})}
	ep.loop.Store(l)
	defer ep.loop.CompareAndSwap(l, nil) // a stopped loop answers no snapshot

	// Watchers first, so nothing that happens during the first sync is
	// lost (Run starts the record and datastore watches before it reads).
	// The one netlink event source: each owner gets only its events.
	w := netwatch.New(log)
	w.Register("workloads", a.Interest(), a)
	w.Register("overlay", om.Interest(), om.Events(a.NotifyApply))
	if wg != nil {
		w.Register("wireguard", wg.Interest(), wg.Events(a.NotifyApply))
		if err := wg.Watch(ctx, a.NotifyApply); err != nil {
			return err
		}
	}
	if bm != nil {
		w.Register("bgp", bm.Interest(), bm.Events(a.NotifyApply))
		p.bgpChanges.SetWake(a.NotifyApply)
	}
	hr.Done = func() { pv.HostChanged(); a.NotifyPeers() }
	w.Register("host", hostread.Watch{R: hr}.Interest(cfg), hostread.Watch{R: hr})
	if err := w.Start(ctx); err != nil {
		return err
	}
	grew := p.grower.Start(ctx, alloc, store.WorkloadsDir(), cfg.DeviceCheckPeriod, stopLoop)
	if err := a.Run(ctx); err != nil {
		return err
	}
	if b, ok := grew(); ok {
		return &blockgrow.Grew{Block: b}
	}
	return nil
}

// datastores open the datastore named by config key datastore.
var datastores = map[string]func(ctx context.Context, cfg *config.Config, store *state.Store, log *slog.Logger) (datastore.Datastore, error){
	config.DatastoreFile: func(_ context.Context, cfg *config.Config, store *state.Store, log *slog.Logger) (datastore.Datastore, error) {
		return file.New(store, cfg.PodCIDRs, log), nil
	},
	config.DatastoreEtcd:       openEtcd,
	config.DatastoreKubernetes: newKubernetes,
}

// wireDatastore connects a datastore's optional parts to the daemon: its
// metrics (datastore.Collector) and its readiness reporting
// (datastore.ReadyReporter).
func wireDatastore(ds datastore.Datastore, status *health.Status, metrics *health.Metrics) error {
	if c, ok := ds.(datastore.Collector); ok {
		if err := metrics.Registry.Register(c); err != nil {
			return fmt.Errorf("datastore metrics: %w", err)
		}
	}
	if r, ok := ds.(datastore.ReadyReporter); ok {
		status.OnChange(r.SetReady)
	}
	return nil
}

// checkBlocks refuses local blocks from the datastore that overlap the
// node's own addresses or connected subnets, as --pod-cidr is refused.
func checkBlocks(host nodespace.Host, blocks []netip.Prefix) error {
	for _, b := range blocks {
		if err := host.CheckBlock(b); err != nil {
			return fmt.Errorf("datastore: local block %s: %w", b, err)
		}
	}
	return nil
}

// newOverlay builds the overlay manager for the configured mode on a real
// overlay.Kernel in the daemon's network namespace; its route tables own
// only routelet-protocol routes on the overlay devices and the parent.
func newOverlay(cfg *config.Config, id nodeid.Identity, blocks []netip.Prefix, status *health.Status, metrics *health.Metrics, repairs *inspect.RepairLog, log *slog.Logger) (*overlaymgr.Manager, error) {
	mode, err := overlay.ParseMode(cfg.Encapsulation, cfg.CrossSubnet)
	if err != nil {
		return nil, err
	}
	kern, err := overlay.NewKernel()
	if err != nil {
		return nil, err
	}
	return overlaymgr.New(kern, overlaymgr.Config{
		NodeName: cfg.NodeName, Mode: mode, HostIPv4: id.IPv4, HostIPv6: id.IPv6, LocalBlocks: blocks,
		VXLANDevice: cfg.VXLANDevice, VNI: cfg.VXLANVNI, Port: cfg.VXLANPort, MTU: cfg.MTU, Logger: log,
		OnRepair: func(object string) {
			metrics.Repairs.WithLabelValues(object).Inc()
			repairs.Add("device", object+" of "+cfg.VXLANDevice, 1)
		},
		RouteProtocol: cfg.RouteProtocol, CheckPeriod: cfg.DeviceCheckPeriod,
		OnDrift: func(object, detail string) { repairs.Add(object, detail, 1) },
	}, func(v int, owned []string) (overlaymgr.RouteTable, error) {
		return routes.New(routes.Config{
			IPVersion: v, Protocol: cfg.RouteProtocol, InterfaceNames: owned,
			Liveness: status.Progress, Logger: log.With("component", "overlay-routes"),
			OnConflict: countConflict(metrics, v),
		})
	})
}

// countConflict returns a routes.Config.OnConflict counting in
// routelet_route_conflicts_total for the table of IP version v.
func countConflict(metrics *health.Metrics, v int) func(netip.Prefix, string, int) {
	c := metrics.RouteConflicts.WithLabelValues(fmt.Sprintf("ipv%d", v))
	return func(netip.Prefix, string, int) { c.Inc() }
}

// waitIdentity detects the node's address, retrying (not ready meanwhile)
// until it succeeds: at boot the uplink may not be configured yet.
func waitIdentity(ctx context.Context, cfg *config.Config, store *state.Store, status *health.Status, log *slog.Logger) (nodeid.Identity, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nodeid.Identity{}, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	backoff := 250 * time.Millisecond
	lastErr := ""
	for {
		id, err := nodeid.Detect(h, cfg.NodeIP, func(l netlink.Link) bool {
			return hostread.OwnLink(cfg)(nodespace.Link{Name: l.Attrs().Name, Index: l.Attrs().Index, Type: l.Type()})
		})
		if err == nil {
			return id, nil
		}
		status.Progress()
		if err.Error() != lastErr {
			lastErr = err.Error()
			log.Warn("cannot determine node IP yet, retrying", "nodeIP", cfg.NodeIP, "err", err)
			notReady(cfg, store, status, "waiting for the node IP: "+lastErr, log)
		}
		select {
		case <-ctx.Done():
			return nodeid.Identity{}, nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// waitBlocks asks the datastore for this node's blocks, which may arrive
// after start-up; until they do, waiting reports why (the daemon is not
// ready). It logs each distinct reason once.
func waitBlocks(ctx context.Context, ds datastore.Datastore, waiting func(reason string), log *slog.Logger) ([]netip.Prefix, error) {
	last := ""
	blocks, err := ds.LocalBlocks(ctx, func(reason string) {
		if reason != last {
			last = reason
			log.Warn("not ready: waiting for this node's blocks", "reason", reason)
		}
		waiting(reason)
	})
	if err != nil {
		return nil, fmt.Errorf("datastore: local blocks: %w", err)
	}
	if last != "" {
		log.Info("this node's blocks arrived", "blocks", blocks)
	}
	return blocks, nil
}

// notReady reports, before the loop runs, why the daemon is not ready yet:
// in /readyz and daemon.json.
func notReady(cfg *config.Config, store *state.Store, status *health.Status, reason string, log *slog.Logger) {
	status.SetReady(false, reason)
	devs := hostread.OverlayDevices(cfg)
	if err := store.WriteDaemonStatus(&state.DaemonStatus{Reason: reason, RouteProtocol: cfg.RouteProtocol, DaemonVersion: buildinfo.Version(),
		VXLANDevice: devs.VXLAN, VXLANDeviceV6: devs.VXLANv6, IPIPDevice: devs.IPIP, WireGuardDevice: devs.WireGuard, Updated: time.Now().UTC()}); err != nil {
		log.Error("cannot write daemon status", "err", err)
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// ipamReleaser adapts the built-in IPAM to agent.Releaser.
type ipamReleaser struct{ a *ipam.Allocator }

// Release frees every address the attachment holds.
func (r ipamReleaser) Release(ctx context.Context, containerID, ifName string) error {
	return r.a.Release(ctx, ipam.Attachment{ContainerID: containerID, IfName: ifName})
}
