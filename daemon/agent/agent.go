package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/daemon/periods"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// RouteTable is the part of *routes.RouteTable the loop drives.
type RouteTable interface {
	// SetAllRoutes replaces every interface's desired routes (memory only)
	// and reports whether they changed.
	SetAllRoutes(byIface map[string][]routes.Target) bool
	// SetRoutes replaces one interface's desired routes (memory only).
	SetRoutes(iface string, targets []routes.Target)
	// Wants reports whether dst is one of iface's desired routes: what the
	// tamper checks compare kernel events against.
	Wants(iface string, dst netip.Prefix) bool
	OnIfaceStateChanged(iface string, up bool)
	MarkDirty(iface string)
	QueueResync()
	Apply() error
	Stats() routes.Stats
	// RetryAfter says when an unexpected route kept for the grace period
	// may be removed: the loop applies again then.
	RetryAfter() (time.Duration, bool)
	// Hold keeps every route on iface, desired or not, while hold is set.
	Hold(iface string, hold bool)
}

var _ RouteTable = (*routes.RouteTable)(nil)

// Workloads is the typed source of workload records (daemon/workloads:
// the state directory's workloads/, the plugin's contract). Keys are
// opaque; a record that is gone is state.ErrNotFound.
type Workloads interface {
	All() (map[string]*state.Workload, map[string]string, error)
	Get(key string) (*state.Workload, error)
	Delete(w *state.Workload) error
	// Repair writes last (the last good read of key's record) back when the
	// file holds no JSON at all, and reports whether it did.
	Repair(key string, last *state.Workload) (bool, error)
	Watch(ctx context.Context, changed func(key string), rescan func()) error
}

// PeerSource is the datastore as the loop sees it (datastore.Peers): this
// node's record published through it, peers validated where they enter.
type PeerSource interface {
	Publish(self peers.Record) error
	Watch(ctx context.Context, changed func()) error
	// Peers returns the validated peers, how many records there were, the
	// unreadable ones, and an error when none can be listed. The peers'
	// slice is reused by the next call (peers.Validator.Validate).
	Peers() ([]peers.NodeInfo, int, []error, error)
	// Rescan makes the next Peers re-read everything.
	Rescan()
	// Flush writes what the peer source keeps across restarts (the claim
	// ledger); the loop calls it after each pass.
	Flush()
	// Health tells what the datastore knows of its own health.
	Health() datastore.Health
}

var _ PeerSource = datastore.Peers{}

// StatusWriter writes daemon.json (*state.Store).
type StatusWriter interface {
	WriteDaemonStatus(st *state.DaemonStatus) error
}

// Releaser frees a leaked attachment's addresses (in routeletd: the
// built-in IPAM's Allocator on <stateDir>/ipam). Releasing an attachment
// that holds nothing is success.
type Releaser interface {
	Release(ctx context.Context, containerID, ifName string) error
}

// Host answers the leak collector's questions about the node.
type Host interface {
	// Links returns every link's name and netlink kind ("veth", "bridge",
	// …) in one dump.
	Links() (map[string]string, error)
	// NetnsGone reports whether path no longer names a network namespace.
	NetnsGone(path string) bool
}

// TempCollector removes the temp files killed writers left in the state
// directory (StateDirTemps: the Store's directories, the IPAM and WireGuard ones,
// each file unlocked and old enough): the leak collection runs it every
// tick, so a plugin killed mid-ADD leaves nothing behind for long.
type TempCollector interface {
	RemoveStaleTemps() (removed []string, err error)
}

// RepairRecorder notes drift repairs for the state endpoint
// (*inspect.RepairLog, which the overlay's and the allowlist's OnRepair
// share): detail names the object ("" when only counted). It must be
// safe for concurrent use.
type RepairRecorder interface {
	Add(object, detail string, n int)
}

// noRepairs is the RepairRecorder when none is given.
type noRepairs struct{}

// Add notes nothing.
func (noRepairs) Add(string, string, int) {}

// The loop's default periods (routeletd's resync-period, device-check-period
// and leak-grace-period).
const (
	// DefaultResyncPeriod is how often every record and the whole routing
	// table are re-read: the most a lost event can cost.
	DefaultResyncPeriod = periods.Resync
	// DefaultTickPeriod is the liveness and leak-check tick.
	DefaultTickPeriod = periods.Tick
	// DefaultLeakGracePeriod is how long a record's netns and host veth
	// must be gone before the record is released.
	DefaultLeakGracePeriod = periods.LeakGrace
)

// Options configure an Agent. Zero durations take the defaults noted.
type Options struct {
	NodeName      string
	Self          peers.Record   // this node's record, published through the PeerSource (a SelfPublisher may change it)
	LocalBlocks   []netip.Prefix // blackholed; also published in daemon.json
	PodMTU        int
	Version       string
	IfacePrefix   string // default podnet.DefaultPrefix
	RouteProtocol int    // default routes.DefaultProtocol
	VXLANPort     int    // published in daemon.json for the plugin's pod guards; 0: podguard.DefaultVXLANPort
	// Devices are the overlay devices' names, published in daemon.json for
	// the plugin's owned-link rule (overlay.OwnedLinks).
	Devices         overlay.Devices
	ResyncPeriod    time.Duration // default DefaultResyncPeriod
	TickPeriod      time.Duration // liveness and leak checks; default DefaultTickPeriod
	LeakGracePeriod time.Duration // default DefaultLeakGracePeriod
	Debounce        time.Duration // default 1ms; negative disables
	// StaticARP programs a permanent neighbour entry with the container MAC
	// for each IPv4 workload route, as Calico does (saves an ARP round trip).
	StaticARP bool
	// NodeSpace is the node's own address space (addresses, connected
	// subnets). A workload address of a family without local blocks must
	// not overlap it; with local blocks it must lie inside one.
	NodeSpace nodespace.Host
	// OnReady, when set, is called on the loop goroutine each time the
	// daemon publishes its status as ready: after the first full sync, and
	// again whenever the status is rewritten while ready (after a spell of
	// not ready, a changed sync error). It must not block.
	OnReady func()
}

// Deps are the Agent's collaborators. Workloads, Peers, Status, RT4,
// Host, Health, Metrics and Log are required; the others may be nil.
type Deps struct {
	Workloads Workloads
	Peers     PeerSource
	Status    StatusWriter
	RT4, RT6  RouteTable // RT6 nil on IPv4-only nodes
	Releaser  Releaser   // nil: leaked records are deleted without IPAM release (no local blocks)
	Host      Host
	// Managers are the further dataplane components (overlay,
	// allowlists, the veth keeper: KeeperManager), applied after the
	// workload routes, in this order.
	Managers []Manager
	// Temps, when set, is run by the leak collection every tick.
	Temps TempCollector
	// Repairs notes the drift repairs (nil: none noted).
	Repairs RepairRecorder
	Health  *health.Status
	Metrics *health.Metrics
	Log     *slog.Logger
}

// Agent is the apply loop. Notify* methods may be called from any
// goroutine; everything else belongs to the goroutine running Run.
type Agent struct {
	opts     Options
	statusW  StatusWriter
	status   *health.Status
	metrics  *health.Metrics
	log      *slog.Logger
	now      func() time.Time
	wl       *workloadRoutes // the workload routes manager: the records' source for the others (Served)
	managers []Manager       // in pass order: wl, then Deps.Managers
	peers    *peerFeed       // this node's record out, the validated peers in
	hints    hints
	pass     passState
	ready    readiness
	snap     *snapState // snapshots for the state endpoint (snapshot.go)
}

// hints collect watcher hints between two passes: pending is guarded by
// mu; kick (capacity 1) wakes the loop.
type hints struct {
	mu      sync.Mutex
	pending pending
	kick    chan struct{}
}

// passState is what the loop keeps between passes.
type passState struct {
	needApply    bool
	needResync   bool
	checks       []Manager // managers whose check or hint is queued: a pass applies them even without needApply
	retryBackoff time.Duration
	graceWait    time.Duration // > 0: apply again after this (grace period ends)
}

// readiness is what the loop last published of its readiness.
type readiness struct {
	ready   bool   // the first full sync is done
	lastErr string // the last pass's error
	blocked string // a manager's not-ready reason, "" when none
}

// pending collects watcher hints between two loop passes.
type pending struct {
	workloads map[string]struct{} // workload keys
	peers     bool                // the peers may have changed
	rescan    bool
	links     map[string]linkState // latest state per workload iface
	routeEvs  []RouteEvent
	neighEvs  []NeighEvent
	sysctls   map[string]struct{} // workload ifaces whose sysctls changed; "": the node's
	apply     bool                // a manager asked for an Apply pass (NotifyApply)
}

type linkState struct {
	up, exists bool
	kind       string // netlink kind, e.g. "veth"
}

// New returns an Agent on d with opts, defaults applied.
func New(opts Options, d Deps) *Agent {
	opts.IfacePrefix = cmp.Or(opts.IfacePrefix, podnet.DefaultPrefix)
	opts.RouteProtocol = cmp.Or(opts.RouteProtocol, routes.DefaultProtocol)
	// A period not above zero takes the default.
	opts.ResyncPeriod = cmp.Or(max(opts.ResyncPeriod, 0), DefaultResyncPeriod)
	opts.TickPeriod = cmp.Or(max(opts.TickPeriod, 0), DefaultTickPeriod)
	opts.LeakGracePeriod = cmp.Or(max(opts.LeakGracePeriod, 0), DefaultLeakGracePeriod)
	opts.Debounce = cmp.Or(opts.Debounce, time.Millisecond) // negative: none
	repairs := d.Repairs
	if repairs == nil {
		repairs = noRepairs{}
	}
	a := &Agent{
		opts: opts, statusW: d.Status, status: d.Health, metrics: d.Metrics, log: d.Log, now: time.Now,
		hints: hints{kick: make(chan struct{}, 1)},
		snap:  newSnapState(),
	}
	now := func() time.Time { return a.now() } // one clock for the loop and its parts
	a.wl = newWorkloadRoutes(&a.opts, d, d.Metrics, d.Log, repairs)
	a.peers = newPeerFeed(d.Peers, opts.Self, d.Metrics, d.Log)
	a.wl.now, a.peers.now = now, now
	a.wl.badNodes = func() int { return a.peers.badNodes }
	a.managers = managerList(a.wl, d.Managers)
	return a
}

// managerList returns the managers in pass order: the workload routes
// first (a pod's route goes before everything else), then extra.
func managerList(wl *workloadRoutes, extra []Manager) []Manager {
	return append([]Manager{wl}, extra...)
}

// wake signals the loop without blocking.
func (a *Agent) wake() {
	select {
	case a.hints.kick <- struct{}{}:
	default:
	}
}

// NotifyWorkload records that the workload record under key was created,
// changed or removed.
func (a *Agent) NotifyWorkload(key string) { a.notifyKey(&a.hints.pending.workloads, key) }

// hint records a watcher's hint (note changes the pending hints under the lock)
// and wakes the loop.
func (a *Agent) hint(note func(p *pending)) {
	a.hints.mu.Lock()
	note(&a.hints.pending)
	a.hints.mu.Unlock()
	a.wake()
}

// notifyKey adds key to the pending set *set (a field of the pending hints) and
// wakes the loop.
func (a *Agent) notifyKey(set *map[string]struct{}, key string) {
	a.hint(func(*pending) {
		if *set == nil {
			*set = map[string]struct{}{}
		}
		(*set)[key] = struct{}{}
	})
}

// NotifyPeers records that the datastore's peers may have changed.
func (a *Agent) NotifyPeers() { a.hint(func(p *pending) { p.peers = true }) }

// NotifyRescan asks for a full re-read of every record and peer (e.g.
// after a watcher lost events).
func (a *Agent) NotifyRescan() { a.hint(func(p *pending) { p.rescan = true }) }

// NotifyLink records a workload link's state: its netlink kind ("veth",
// "bridge", …), up or down; exists is false once the link was deleted.
func (a *Agent) NotifyLink(name, kind string, up, exists bool) {
	if !strings.HasPrefix(name, a.opts.IfacePrefix) {
		return
	}
	a.hint(func(p *pending) {
		if p.links == nil {
			p.links = map[string]linkState{}
		}
		p.links[name] = linkState{up: up && exists, exists: exists, kind: kind}
	})
}

// NotifyApply asks the loop for an Apply pass: every table's and manager's
// Apply runs soon. Managers that watch their own kernel objects (the overlay
// devices) call it after recording a hint, since their Apply only runs on
// the loop goroutine.
func (a *Agent) NotifyApply() { a.hint(func(p *pending) { p.apply = true }) }

// RouteEvent is a kernel route notification, reduced to what ownership and
// tamper checks need.
type RouteEvent = netwatch.RouteEvent

// NotifyRoute queues a route notification; the loop decides whether it shows
// tampering with something routelet owns.
func (a *Agent) NotifyRoute(ev RouteEvent) {
	if ev.Iface != routes.InterfaceNone && !strings.HasPrefix(ev.Iface, a.opts.IfacePrefix) {
		// The agent's tables own only workload interfaces and
		// no-interface routes; routes with our protocol on shared devices
		// belong to the overlay manager, whose own watcher repairs them.
		return
	}
	a.hint(func(p *pending) { p.routeEvs = append(p.routeEvs, ev) })
}

// NeighEvent is a kernel neighbour notification on some interface.
type NeighEvent = netwatch.NeighEvent

// NotifyNeigh queues a neighbour notification (only deletions on workload
// interfaces can matter: those may remove a static ARP entry routelet set).
func (a *Agent) NotifyNeigh(ev NeighEvent) {
	if !ev.Deleted || !strings.HasPrefix(ev.Iface, a.opts.IfacePrefix) {
		return
	}
	a.hint(func(p *pending) { p.neighEvs = append(p.neighEvs, ev) })
}

// NotifySysctls records that a device configuration event named the
// workload interface iface, or with iface "" the node.
func (a *Agent) NotifySysctls(iface string) {
	if iface != "" && !strings.HasPrefix(iface, a.opts.IfacePrefix) {
		return
	}
	a.notifyKey(&a.hints.pending.sysctls, iface)
}

// Run is the loop. It starts watching the workload records and the
// datastore, reads every record, programs the kernel, reports ready, then
// reacts to hints and timers until ctx is done. On return the dataplane is
// left in place and daemon.json says the daemon stopped.
func (a *Agent) Run(ctx context.Context) error {
	// Watchers first, so nothing that happens during the first sync is lost.
	if err := a.wl.watch(ctx, a.NotifyWorkload, a.NotifyRescan); err != nil {
		return err
	}
	if err := a.peers.src.Watch(ctx, a.NotifyPeers); err != nil {
		return err
	}
	a.status.SetReady(false, "initial sync in progress")
	a.writeStatus("initial sync in progress")
	a.fullSync()
	a.peers.src.Flush()
	a.ready.ready = true
	a.publishReadiness(a.managersBlocked())
	a.log.Info("first full sync done", "workloads", len(a.wl.workloads), "peers", a.peers.records, "error", a.ready.lastErr)
	a.noteErrors()

	sched := a.newSchedule(ctx)
	timer := time.NewTimer(sched.wait(a.now()))
	defer timer.Stop()
	var retry, grace *time.Timer
	var retryC, graceC <-chan time.Time
	for {
		if a.pass.graceWait > 0 {
			if grace != nil {
				grace.Stop()
			}
			grace = time.NewTimer(a.pass.graceWait)
			graceC = grace.C
			a.pass.graceWait = 0
		}
		if a.pass.needApply && retryC == nil {
			// The last apply failed: retry with backoff rather than wait
			// for the next resync.
			if retry != nil {
				retry.Stop()
			}
			retry = time.NewTimer(a.pass.retryBackoff)
			retryC = retry.C
		}
		a.status.Progress()
		select {
		case <-ctx.Done():
			a.ready.ready = false
			a.status.SetReady(false, "stopping")
			a.writeStatus("routeletd stopped")
			return nil
		case <-a.hints.kick:
			if a.opts.Debounce > 0 {
				t := time.NewTimer(a.opts.Debounce)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					continue
				}
			}
		case <-timer.C:
			pass := sched.runDue(a.now())
			timer.Reset(sched.wait(a.now()))
			if !pass {
				continue
			}
		case <-retryC:
			retryC = nil
			a.pass.needApply = true
		case <-graceC:
			graceC = nil
			a.pass.needApply = true // the tables kept the held interfaces dirty
		case req := <-a.snap.req:
			req(a.snapshot())
			continue
		}
		if a.pass.needResync {
			a.fullSync()
		} else {
			a.processPending()
			if a.pass.needApply {
				a.apply()
			} else if len(a.pass.checks) > 0 {
				a.applyChecks()
			}
		}
		// What the peer source keeps across restarts (the claim ledger)
		// is written after the pass's Apply, off the path from a record
		// to the kernel.
		a.peers.src.Flush()
		a.noteErrors()
	}
}

// newSchedule returns the loop's periodic work: the full resync, the leak
// check and the temp file collection, and each Checker manager's check
// (the keeper's sysctl poll and guard check among them).
func (a *Agent) newSchedule(ctx context.Context) *schedule {
	s := &schedule{}
	now := a.now()
	s.add("resync", a.opts.ResyncPeriod, now, func() bool { a.pass.needResync = true; return true })
	s.add("leaks", a.opts.TickPeriod, now, func() bool {
		a.wl.collectLeaks(ctx)
		a.workloadsChanged()
		return true
	})
	if a.wl.temps != nil {
		s.add("temps", a.opts.TickPeriod, now, func() bool { a.wl.collectTemps(); return false })
	}
	for _, m := range a.managers {
		if c, ok := m.(Checker); ok && c.CheckPeriod() > 0 {
			s.add(fmt.Sprintf("check %T", m), c.CheckPeriod(), now, func() bool {
				c.QueueCheck()
				a.queue(m)
				return true
			})
		}
	}
	return s
}

// fullSync re-reads every record and peer, re-derives all desired
// routes, queues a full RouteTable resync and applies. It also drains
// pending hints, which the re-read supersedes except for link states.
func (a *Agent) fullSync() {
	start := a.now()
	a.pass.needResync = false
	p := a.takePending()
	a.applyLinks(p.links)

	bad := a.wl.readAll()
	a.peers.publish()
	a.peers.src.Rescan()
	a.peers.reportBad(a.nodesChanged(true))
	a.wl.reportBad(bad)
	a.wl.resync()
	a.workloadsChanged()
	a.apply()
	a.metrics.ResyncDuration.Observe(a.now().Sub(start).Seconds())
	a.snap.lastResync = a.now()
}

func (a *Agent) takePending() pending {
	a.hints.mu.Lock()
	defer a.hints.mu.Unlock()
	p := a.hints.pending
	a.hints.pending = pending{}
	return p
}

// processPending applies queued hints to memory and marks what needs an Apply.
func (a *Agent) processPending() {
	p := a.takePending()
	if p.rescan {
		// Events may have been lost: re-learn the links from one dump,
		// then apply what arrived since.
		a.wl.refreshLinks()
		a.applyLinks(p.links)
		a.fullSync()
		return
	}
	a.applyLinks(p.links)
	if p.apply {
		a.pass.needApply = true
	}
	for key := range p.workloads {
		a.wl.reloadWorkload(key)
	}
	routed := a.wl.syncDesired()
	if p.peers {
		if routed {
			// The records' routes go first: validating the peers may
			// read the node's every link, address and route again (a
			// host change), which a pod's route need not wait for.
			a.wl.applyTables()
		}
		_ = a.nodesChanged(false)
	}
	for _, ev := range p.routeEvs {
		a.wl.checkRouteEvent(ev)
	}
	for _, ev := range p.neighEvs {
		a.wl.checkNeighEvent(ev)
		a.toWatchers(func(w HostWatcher) { w.NeighChanged(ev.Iface) })
	}
	for name := range p.sysctls {
		a.toWatchers(func(w HostWatcher) { w.SysctlsChanged(name) })
	}
	a.workloadsChanged()
}

// applyLinks hands link states to the workload routes and the
// HostWatchers.
func (a *Agent) applyLinks(links map[string]linkState) {
	a.wl.applyLinks(links)
	for name := range links {
		a.toWatchers(func(w HostWatcher) { w.LinkChanged(name) })
	}
}

// toWatchers hands a hint to every HostWatcher manager and queues its
// Apply, as a check is queued: the pass applies it even when nothing else
// needs an Apply.
func (a *Agent) toWatchers(hint func(HostWatcher)) {
	for _, m := range a.managers {
		if w, ok := m.(HostWatcher); ok {
			hint(w)
			a.queue(m)
		}
	}
}

// queue makes the next pass apply m, even one that applies only the
// queued managers (applyChecks).
func (a *Agent) queue(m Manager) {
	if !slices.Contains(a.pass.checks, m) {
		a.pass.checks = append(a.pass.checks, m)
	}
}

// workloadsChanged takes what the workload routes changed: their tables
// need an Apply, the other managers hear of the served workloads
// (OnWorkloads).
func (a *Agent) workloadsChanged() {
	if a.wl.takeApply() {
		a.pass.needApply = true
	}
	if s, ok := a.wl.takeServed(); ok {
		for _, m := range a.managers {
			m.OnWorkloads(s)
		}
		a.pass.needApply = true
	}
}

// nodesChanged reads the validated peers (peerFeed.read) and hands them
// to the managers when they may have changed; it returns the unreadable
// peer records.
func (a *Agent) nodesChanged(full bool) []error {
	valid, hand, bad := a.peers.read(full)
	if hand {
		for _, m := range a.managers {
			m.OnNodes(valid)
		}
		a.pass.needApply = true
	}
	return bad
}

// apply runs every manager's Apply, updates metrics and status, and
// leaves needApply set when something failed (the caller retries).
func (a *Agent) apply() {
	a.applyPass(a.managers)
}

// applyChecks is the pass of a check tick or a HostWatcher's hint when
// nothing else needs an Apply: only the managers queued apply (and so
// check); the others have nothing to do. A failure makes the retry a full pass,
// as any failed pass does.
func (a *Agent) applyChecks() {
	a.applyPass(a.pass.checks)
}

// applyPass runs the Apply of managers, in order; it updates metrics and
// status and leaves needApply set when something failed. It clears the
// queued checks: every manager with one was among those applied (a full
// pass applies them all).
func (a *Agent) applyPass(managers []Manager) {
	start := a.now()
	var errs []error
	for _, m := range managers {
		if err := m.Apply(); err != nil {
			errs = append(errs, err)
		}
	}
	a.pass.checks = a.pass.checks[:0]
	a.updateSelf()
	a.metrics.ApplyDuration.Observe(a.now().Sub(start).Seconds())
	if d := a.wl.retryAfter(); d > 0 && (a.pass.graceWait == 0 || d < a.pass.graceWait) {
		a.pass.graceWait = d
	}
	err := errors.Join(errs...)
	msg := ""
	if err != nil {
		msg = err.Error()
		a.metrics.ApplyErrors.Inc()
		a.pass.needApply = true
		a.pass.retryBackoff = min(max(2*a.pass.retryBackoff, 50*time.Millisecond), 10*time.Second)
		if msg != a.ready.lastErr {
			a.log.Warn("apply failed, will retry", "err", err, "retry_in", a.pass.retryBackoff)
		}
	} else {
		a.pass.needApply = false
		a.pass.retryBackoff = 0
	}
	blocked := a.managersBlocked()
	if msg != a.ready.lastErr || blocked != a.ready.blocked {
		a.ready.lastErr = msg
		if a.ready.ready {
			a.publishReadiness(blocked)
		}
	}
}

// updateSelf asks the SelfPublisher managers for changes to this node's
// record and publishes it again when one made any.
func (a *Agent) updateSelf() {
	changed := false
	for _, m := range a.managers {
		if p, ok := m.(SelfPublisher); ok && p.UpdateSelf(&a.peers.self) {
			changed = true
		}
	}
	if changed {
		a.opts.Self = a.peers.self
		a.peers.published = false
		a.peers.publish()
	}
}

// managersBlocked joins the Blocker managers' not-ready reasons ("" for
// none).
func (a *Agent) managersBlocked() string {
	var why []string
	for _, m := range a.managers {
		if b, ok := m.(Blocker); ok {
			if r := b.NotReady(); r != "" {
				why = append(why, r)
			}
		}
	}
	return strings.Join(why, "; ")
}

// publishReadiness writes daemon.json, then /readyz and the ready metric:
// ready unless blocked names a reason. daemon.json goes first, so whoever
// sees /readyz ok also finds it ready.
func (a *Agent) publishReadiness(blocked string) {
	if blocked != a.ready.blocked && blocked != "" {
		a.log.Warn("not ready", "reason", blocked)
	} else if blocked != a.ready.blocked {
		a.log.Info("ready again")
	}
	a.ready.blocked = blocked
	a.writeStatus(blocked)
	a.status.SetReady(blocked == "", blocked)
	ready := 0.0
	if blocked == "" {
		ready = 1
	}
	a.metrics.Ready.Set(ready)
	if blocked == "" && a.opts.OnReady != nil {
		a.opts.OnReady()
	}
}

// writeStatus writes daemon.json; reason non-empty means not ready.
func (a *Agent) writeStatus(reason string) {
	var blocks []string
	for _, b := range a.opts.LocalBlocks {
		blocks = append(blocks, b.String())
	}
	st := &state.DaemonStatus{
		Ready:           a.ready.ready && reason == "",
		Reason:          reason,
		PodMTU:          a.opts.PodMTU,
		Blocks:          blocks,
		RouteProtocol:   a.opts.RouteProtocol,
		VXLANPort:       a.opts.VXLANPort,
		VXLANDevice:     a.opts.Devices.VXLAN,
		VXLANDeviceV6:   a.opts.Devices.VXLANv6,
		IPIPDevice:      a.opts.Devices.IPIP,
		WireGuardDevice: a.opts.Devices.WireGuard,
		DaemonVersion:   a.opts.Version,
		LastSyncError:   a.ready.lastErr,
		Updated:         a.now().UTC(),
	}
	if err := a.statusW.WriteDaemonStatus(st); err != nil {
		a.log.Error("cannot write daemon status", "err", err)
	}
}
