// Command routeletd is routelet's node daemon: it keeps the kernel's routes
// in line with the state directory's workload records, publishes the node's
// record and status, and serves health and metrics. See docs/daemon.md.
//
//	routeletd [flags]           run the daemon
//	routeletd cleanup [flags]   remove what routelet created on this node
//	routeletd status [flags]    print this node's status (see docs/daemon.md)
//	routeletd nodes …           list, show, add, remove peer records (file datastore)
//	routeletd diagnose SRC DST  walk the path between two pods, IPs or nodes (see docs/daemon.md)
//	routeletd version           print the version
//	routeletd etcd init [flags] write the etcd datastore's pools
//	routeletd leave [flags]     remove this node from the etcd datastore
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/cleanup"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/datastore/file"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/internal/netnsclaim"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/daemon/nodeid"
	"github.com/routelet/routelet/daemon/overlaymgr"
	"github.com/routelet/routelet/daemon/workloads"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/netguard"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

// Exit codes.
const (
	exitOK     = 0
	exitFail   = 1
	exitConfig = 2
)

// commands are routeletd's subcommands beside running the daemon; each
// parses its own arguments (what follows its name).
var commands = map[string]func(args []string) int{
	"diagnose": runDiagnose, // cmd_diagnose.go

	"version": runVersion,
	"cleanup": runCleanup,
	"status":  runStatus,
	"nodes":   runNodes,
	"etcd":    runEtcd,
	"leave":   runLeave,
}

func run(args []string) int {
	if len(args) > 0 {
		if c, ok := commands[args[0]]; ok {
			return c(args[1:])
		}
	}
	cfg, log, code := loadConfig(args)
	if cfg == nil {
		return code
	}
	if _, ok := datastores[cfg.Datastore]; !ok {
		fmt.Fprintf(os.Stderr, "routeletd: config key %q: value %q is not supported by this version\n", "datastore", cfg.Datastore)
		return exitConfig
	}
	g := cfg.ApplyGoRuntime(os.LookupEnv)
	log.Info("go runtime memory settings", "gcPercent", g.GCPercent, "gcFrom", g.GCSource, "memoryLimitBytes", g.MemoryLimit, "memoryLimitFrom", g.MemoryLimitSource)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := daemon(ctx, cfg, log); err != nil {
		var cerr *config.Error
		if errors.As(err, &cerr) {
			log.Error("configuration refused", "err", err)
			fmt.Fprintf(os.Stderr, "routeletd: %s\n", esc(err.Error()))
			return exitConfig
		}
		log.Error("routeletd failed", "err", err)
		return exitFail
	}
	log.Info("routeletd stopped; dataplane left in place")
	return exitOK
}

// loadConfig reads the daemon's configuration (flags, environment, file)
// and sets up logging. A nil config means stop with the exit code given
// (0 after --help).
func loadConfig(args []string) (*config.Config, *slog.Logger, int) {
	cfg, err := config.Load(args, os.LookupEnv, config.ReadFile, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil, nil, exitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd: %s\n", esc(err.Error()))
		return nil, nil, exitConfig
	}
	log := newLogger(cfg)
	slog.SetDefault(log)
	return cfg, log, exitOK
}

// runVersion prints the version.
func runVersion([]string) int {
	fmt.Println("routeletd", fullVersion())
	return exitOK
}

// runCleanup removes what routelet created on this node (the daemon must
// be stopped).
func runCleanup(args []string) int {
	cfg, log, code := loadConfig(args)
	if cfg == nil {
		return code
	}
	// Before the daemon lock is taken, which would create routeletd.lock
	// in a directory that is not routelet's (or through a symlink).
	if err := cleanup.CheckStateDir(cfg.StateDir); err != nil {
		log.Error("cleanup refused", "stateDir", cfg.StateDir, "err", err)
		return exitFail
	}
	release, err := daemonStopped(cfg, log)
	if err != nil {
		log.Error("cleanup refused: stop routeletd first", "err", err)
		return exitFail
	}
	defer release()
	rep, err := cleanup.Run(cleanup.Options{StateDir: cfg.StateDir, IfacePrefix: cfg.IfacePrefix, RouteProtocol: cfg.RouteProtocol,
		VXLANDevices: []string{cfg.VXLANDevice, overlay.DeviceVXLANv6}, IptablesBackend: iptablesBackend(cfg.IptablesBackend)}, log)
	log.Info("cleanup done", "links", len(rep.Links), "routes", len(rep.Routes), "paths", len(rep.Paths), "left", len(rep.Left))
	if err != nil {
		log.Error("cleanup incomplete", "err", err)
		return exitFail
	}
	return exitOK
}

func fullVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
	}
	return version
}

func newLogger(cfg *config.Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// daemon runs until ctx is done. It serves health first (not ready), waits
// for the node's identity, then runs the apply loop.
func daemon(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	log.Info("routeletd starting", "version", fullVersion(), "node", cfg.NodeName, "stateDir", cfg.StateDir,
		"podCIDRs", cfg.PodCIDRs, "encapsulation", cfg.Encapsulation, "config", cfg.ConfigFile)
	if len(cfg.PodCIDRs) == 0 && cfg.Datastore == config.DatastoreFile {
		log.Warn("no pod-cidr given: no local blocks are published or blackholed; the plugin needs ipam.blocks in its conflist")
	}
	release, err := claimNetns(log)
	if err != nil {
		return err
	}
	defer release()
	if _, err := checkHost(cfg); err != nil {
		return err
	}
	cni, err := newCNIConf(cfg)
	if err != nil {
		return err
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return err
	}
	unlock, err := lockInstance(cfg.StateDir)
	if err != nil {
		return err
	}
	defer unlock()
	removed, err := stateTemps{store, filepath.Join(cfg.StateDir, "ipam")}.RemoveStaleTemps()
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
	host, err := checkHost(cfg)
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
	grower, err := newBlockGrower(ds, metrics, log.With("component", "blocks"))
	if err != nil {
		return err
	}
	parts := loopParts{cfg: cfg, id: id, ds: ds, store: store, status: status, metrics: metrics, ep: ep, cni: cni, grower: grower, log: log}
	for {
		var grew *blocksGrew
		if err := runLoop(ctx, parts, host, blocks); !errors.As(err, &grew) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		blocks = withBlock(blocks, grew.block)
		log.Info("this node's blocks grew: rebuilding the loop with them (the dataplane stays as it is meanwhile)", "blocks", blocks)
		if host, err = checkHost(cfg); err != nil {
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
	cni     *cniConf
	grower  *blockGrower
	log     *slog.Logger
}

// runLoop builds the apply loop for blocks and runs it until ctx is done,
// or until the grower claimed another block: then it returns a
// *blocksGrew, and the caller builds the loop again with that block
// added. Either way it stops as on SIGTERM, leaving the dataplane as it
// is.
func runLoop(ctx context.Context, p loopParts, host netguard.Host, blocks []netip.Prefix) error {
	cfg, id, ds, store, status, metrics, ep, cni, log := p.cfg, p.id, p.ds, p.store, p.status, p.metrics, p.ep, p.cni, p.log
	ctx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	if err := checkBlocks(host, blocks); err != nil {
		return err
	}
	podMTU := nodeid.PodMTU(cfg.MTU, id, cfg.Encapsulation)
	om, err := newOverlay(cfg, id, blocks, status, metrics, ep.repairs, log)
	if err != nil {
		return err
	}
	defer om.Close()
	if mtu := om.PodMTU(); mtu > 0 {
		podMTU = mtu
	}
	log.Info("node identity", "hostIPv4", addrString(id.IPv4), "hostIPv6", addrString(id.IPv6), "iface", id.Iface, "podMTU", podMTU)

	// This node's record, built once: identity, blocks, the overlay's VTEP
	// facts. It goes to the datastore and never comes back.
	self := peers.Record{Name: cfg.NodeName, HostIPv4: addrString(id.IPv4), HostIPv6: addrString(id.IPv6)}
	for _, b := range blocks {
		self.Blocks = append(self.Blocks, b.String())
	}
	om.Publish(&self)
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
	allow, closeAllow, err := newAllowlist(cfg, blocks, metrics, ep.repairs, log)
	if err != nil {
		return err
	}
	defer closeAllow()
	defer allow.Register(unregistering{metrics.Registry}) // so the next build can register its own
	hr := newHostReader(ctx, cfg)
	pv, err := newPeerValidator(cfg, self, blocks, hr, metrics, log)
	if err != nil {
		return err
	}
	defer pv.Register(unregistering{metrics.Registry})
	onReady, err := cni.start(ctx, podMTU, log)
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
	a := agent.New(agent.Options{
		NodeName: cfg.NodeName, Self: self, LocalBlocks: blocks, PodMTU: podMTU, Version: fullVersion(),
		IfacePrefix: cfg.IfacePrefix, RouteProtocol: cfg.RouteProtocol, VXLANPort: cfg.VXLANPort,
		ResyncPeriod: cfg.ResyncPeriod, TickPeriod: cfg.DeviceCheckPeriod, LeakGracePeriod: cfg.LeakGracePeriod,
		StaticARP: true, NodeSpace: host, OnReady: onReady,
	}, agent.Deps{
		Workloads: workloads.New(store, log), Peers: datastore.Peers{DS: ds, V: pv}, Status: store,
		RT4: rt4, RT6: rt6, Releaser: ipamReleaser{alloc}, Host: agent.KernelHost{},
		Managers: []agent.Manager{allow, om, agent.NewKeeperManager(keeper, agent.KeeperOptions{
			KeepPeriod:  cfg.DeviceCheckPeriod,
			GuardPeriod: cfg.AllowlistCheckPeriod, // the pod source check was an allowlist chain: same period
			Repairs:     ep.repairs, Metrics: metrics, Log: log,
		})}, // the keeper last: every route goes first
		Temps:   stateTemps{store, filepath.Join(cfg.StateDir, "ipam")},
		Repairs: ep.repairs,
		Health:  status, Metrics: metrics, Log: log,
	})
	l := &loop{agent: a, parts: []inspect.Snapshotter{allow, om, refusals{pv}}}
	ep.loop.Store(l)
	defer ep.loop.CompareAndSwap(l, nil) // a stopped loop answers no snapshot

	// Watchers first, so nothing that happens during the first sync is
	// lost (Run starts the record and datastore watches before it reads).
	// The one netlink event source: each owner gets only its events.
	w := netwatch.New(log)
	w.Register("workloads", a.Interest(), a)
	w.Register("overlay", om.Interest(), om.Events(a.NotifyApply))
	hr.done = func() { pv.HostChanged(); a.NotifyPeers() }
	w.Register("host", hostWatch{hr}.Interest(cfg), hostWatch{hr})
	if err := w.Start(ctx); err != nil {
		return err
	}
	grew := p.grower.start(ctx, alloc, store.WorkloadsDir(), cfg.DeviceCheckPeriod, stopLoop)
	if err := a.Run(ctx); err != nil {
		return err
	}
	if b, ok := grew(); ok {
		return &blocksGrew{block: b}
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
func checkBlocks(host netguard.Host, blocks []netip.Prefix) error {
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
			return ownLink(cfg)(netguard.Link{Name: l.Attrs().Name, Index: l.Attrs().Index, Type: l.Type()})
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
	if err := store.WriteDaemonStatus(&state.DaemonStatus{Reason: reason, RouteProtocol: cfg.RouteProtocol, DaemonVersion: fullVersion(), Updated: time.Now().UTC()}); err != nil {
		log.Error("cannot write daemon status", "err", err)
	}
}

// loadStopped loads the configuration of subcommand what, which needs the
// daemon stopped (see daemonStopped); release ends that. A nil config
// means stop with the exit code given.
func loadStopped(args []string, what string) (cfg *config.Config, log *slog.Logger, release func(), code int) {
	cfg, log, code = loadConfig(args)
	if cfg == nil {
		return nil, nil, nil, code
	}
	release, err := daemonStopped(cfg, log)
	if err != nil {
		log.Error(what+" refused: stop routeletd first", "err", err)
		return nil, nil, nil, exitFail
	}
	return cfg, log, release, exitOK
}

// daemonStopped makes sure no routeletd runs in this network namespace or
// on cfg's state directory (if it exists), and keeps it so until the
// returned release is called.
func daemonStopped(cfg *config.Config, log *slog.Logger) (func(), error) {
	release, err := claimNetns(log)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(cfg.StateDir); err == nil {
		unlock, err := lockInstance(cfg.StateDir)
		if err != nil {
			release()
			return nil, err
		}
		return func() { unlock(); release() }, nil
	}
	return release, nil
}

// staleTempAge: temp files in the state directory at least this old and not
// locked are a killed writer's (a live writer locks its file at once).
const staleTempAge = time.Second

// claimNetns makes sure no other routeletd runs in this network namespace,
// whatever its state directory (two daemons would fight over the same
// routes), and keeps it so until the returned release is called. An
// unprivileged process holding routeletd's abstract socket does not stop
// it (see daemon/internal/netnsclaim): it is logged and passed by.
func claimNetns(log *slog.Logger) (func(), error) {
	c, err := netnsclaim.Take()
	if err != nil {
		return nil, err
	}
	if h := c.Squatter; h != nil {
		log.Warn("an unprivileged process holds routeletd's abstract socket: it is not a routeletd, ignoring it",
			"holder", h.String(), "uid", h.UID, "claimed", c.Name)
	}
	return c.Release, nil
}

// ownLink reports the links routelet creates: pod veths (the interface
// prefix, type veth) and the overlay devices of their kind. Their addresses
// and routes are routelet's, not the node's own.
func ownLink(cfg *config.Config) func(netguard.Link) bool {
	return func(l netguard.Link) bool {
		switch {
		case netguard.Owned(l, cfg.IfacePrefix):
			return true
		case l.Name == cfg.VXLANDevice || l.Name == overlay.DeviceVXLANv6:
			return l.Type == "vxlan"
		case l.Name == overlay.DeviceIPIP:
			return l.Type == "ipip"
		}
		return false
	}
}

// checkHost refuses configuration that would take the node's own links or
// address space: an interface prefix matching the uplink, a link routelet
// did not create or an overlay device's name, and a pod CIDR overlapping
// the node's addresses or connected subnets. The errors are *config.Error
// (exit 2) naming the key, its source and the value.
func checkHost(cfg *config.Config) (netguard.Host, error) {
	for _, dev := range []string{cfg.VXLANDevice, overlay.DeviceVXLANv6, overlay.DeviceIPIP} {
		if strings.HasPrefix(dev, cfg.IfacePrefix) {
			return netguard.Host{}, cfg.KeyError("interface-prefix", cfg.IfacePrefix,
				fmt.Errorf("interface prefix %q matches routelet's own overlay device %s", cfg.IfacePrefix, dev))
		}
	}
	host, err := netguard.ReadHost(nil, cfg.RouteProtocol, ownLink(cfg))
	if err != nil {
		return netguard.Host{}, err
	}
	if err := host.CheckInterfacePrefix(cfg.IfacePrefix); err != nil {
		return netguard.Host{}, cfg.KeyError("interface-prefix", cfg.IfacePrefix, err)
	}
	for _, p := range cfg.PodCIDRs {
		if err := host.CheckBlock(p); err != nil {
			return netguard.Host{}, cfg.KeyError("pod-cidr", p.String(), err)
		}
	}
	return host, nil
}

// lockFile in the state directory is held (flock) by the running daemon, so
// a second routeletd on the same state directory refuses to start instead of
// fighting the first. The kernel drops the lock when the process dies, so a
// restart after kill -9 is not blocked.
const lockFile = "routeletd.lock"

// lockRetry bounds how long a start waits for a lock someone else holds
// (a plugin STATUS probe holds it for microseconds; a daemon, for good).
const lockRetry = time.Second

// lockInstance takes the state directory's daemon lock and returns its
// release.
func lockInstance(stateDir string) (func(), error) {
	path := filepath.Join(stateDir, lockFile)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// The plugin's STATUS probes this lock with a brief shared flock; a
	// start that lands inside such a probe retries for a moment instead of
	// taking the prober for a second daemon.
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	for deadline := time.Now().Add(lockRetry); errors.Is(err, unix.EWOULDBLOCK) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another routeletd is running with state-dir %s (%s is locked)", stateDir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { unix.Close(fd) }, nil
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
