package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/daemon/periods"
	"github.com/routelet/routelet/pkg/netguard"
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

// Manager is a further dataplane component driven by the loop, such as the
// overlay or the ipset allowlists. Both methods run on the loop goroutine.
type Manager interface {
	// OnNodes hands over every peer, validated (memory only). The slice
	// is the validator's and is reused by the next pass: a manager that
	// keeps peers keeps a copy.
	OnNodes(peers []peers.NodeInfo)
	// Apply programs the kernel; failures are retried on the next pass.
	Apply() error
}

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
	NodeName        string
	Self            peers.Record   // this node's record, built once; published through the PeerSource
	LocalBlocks     []netip.Prefix // blackholed; also published in daemon.json
	PodMTU          int
	Version         string
	IfacePrefix     string        // default podnet.DefaultPrefix
	RouteProtocol   int           // default routes.DefaultProtocol
	VXLANPort       int           // published in daemon.json for the plugin's pod guards; 0: podguard.DefaultVXLANPort
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
	NodeSpace netguard.Host
	// OnReady, when set, is called on the loop goroutine each time the
	// daemon publishes its status as ready: after the first full sync, and
	// again whenever the status is rewritten while ready (after a spell of
	// not ready, a changed sync error). It must not block.
	OnReady func()
}

// Agent is the apply loop. Notify* methods may be called from any
// goroutine; everything else belongs to the goroutine running Run.
type Agent struct {
	opts     Options
	wls      Workloads
	ds       PeerSource
	statusW  StatusWriter
	rt4, rt6 RouteTable
	releaser Releaser // nil: leaked records are deleted without IPAM release
	host     Host
	managers []Manager
	status   *health.Status
	metrics  *health.Metrics
	log      *slog.Logger
	now      func() time.Time

	// Hints from watchers, guarded by mu; kick (capacity 1) wakes the loop.
	mu      sync.Mutex
	pending pending
	kick    chan struct{}

	// Loop-owned state.
	workloads    map[string]*state.Workload // by source key
	peerRecords  int                        // peer records at the last read
	published    bool                       // Self went through Publish
	absentSince  map[string]time.Time       // host iface → first seen missing (leak collection)
	links        map[string]string          // prefix links that exist → kind, from link events and dumps
	badSeen      map[string]bool            // bad-record messages already logged
	badFiles     map[string]string          // workload keys that cannot be read → why (served from their last good read when there is one)
	held         map[string]struct{}        // veths whose routes the tables keep while a record no good read ever came from is unreadable
	badNodes     int                        // unreadable peer records at the last full read
	desired      *desiredSet                // the desired routes of workloads and links (syncDesired)
	changedKeys  map[string]struct{}        // workload keys changed since the last syncDesired
	changedLinks map[string]struct{}        // prefix links that appeared, vanished or changed kind since then
	refused      map[string]string          // workload keys refused by checkWorkload → why (logged)
	winners      map[netip.Addr]string      // addresses several records claim → the key served (logged)
	superseded   map[string]string          // workload keys whose veth another record owns → its key (logged)
	ready        bool
	lastErr      string
	blocked      string // a manager's not-ready reason, "" when none
	needApply    bool
	checks       []Manager // managers whose check is queued: a pass applies them even without needApply
	needResync   bool
	retryBackoff time.Duration
	graceWait    time.Duration // > 0: apply again after this (grace period ends)
	temps        TempCollector // nil: no temp files collected (SetTempCollector)
	tempErr      string        // the temp collector's last error, logged once
	keeper       Keeper        // nil: veth settings are not kept (SetKeeper)
	guardPeriod  time.Duration // pod guard check period (SetGuardPeriod); 0: none
	keepPeriod   time.Duration
	kept         map[string]keptVeth            // by record key: what the keeper was last handed (keeperVeths)
	keptBy       map[string]map[string]struct{} // host veth → keys of the records in kept naming it
	keepKeys     map[string]struct{}            // records whose veth the keeper may need anew (keeperVeths)
	keepAll      bool                           // every record's (after a full read)
	snap         *snapState                     // snapshots for the state endpoint (snapshot.go)
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

// New returns an Agent. rt6 may be nil on IPv4-only nodes; releaser may be
// nil when there are no local blocks.
func New(opts Options, wls Workloads, ds PeerSource, statusW StatusWriter, rt4, rt6 RouteTable, releaser Releaser, host Host, managers []Manager,
	status *health.Status, metrics *health.Metrics, log *slog.Logger) *Agent {
	opts.IfacePrefix = cmp.Or(opts.IfacePrefix, podnet.DefaultPrefix)
	opts.RouteProtocol = cmp.Or(opts.RouteProtocol, routes.DefaultProtocol)
	// A period not above zero takes the default.
	opts.ResyncPeriod = cmp.Or(max(opts.ResyncPeriod, 0), DefaultResyncPeriod)
	opts.TickPeriod = cmp.Or(max(opts.TickPeriod, 0), DefaultTickPeriod)
	opts.LeakGracePeriod = cmp.Or(max(opts.LeakGracePeriod, 0), DefaultLeakGracePeriod)
	opts.Debounce = cmp.Or(opts.Debounce, time.Millisecond) // negative: none
	return &Agent{
		opts: opts, wls: wls, ds: ds, statusW: statusW, rt4: rt4, rt6: rt6, releaser: releaser, host: host, managers: managers,
		status: status, metrics: metrics, log: log, now: time.Now,
		kick:         make(chan struct{}, 1),
		workloads:    map[string]*state.Workload{},
		absentSince:  map[string]time.Time{},
		links:        map[string]string{},
		badSeen:      map[string]bool{},
		badFiles:     map[string]string{},
		held:         map[string]struct{}{},
		changedKeys:  map[string]struct{}{},
		keepKeys:     map[string]struct{}{},
		changedLinks: map[string]struct{}{},
		refused:      map[string]string{},
		winners:      map[netip.Addr]string{},
		superseded:   map[string]string{},
		snap:         newSnapState(),
	}
}

// wake signals the loop without blocking.
func (a *Agent) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// NotifyWorkload records that the workload record under key was created,
// changed or removed.
func (a *Agent) NotifyWorkload(key string) { a.notifyKey(&a.pending.workloads, key) }

// hint records a watcher's hint (note changes a.pending under the lock)
// and wakes the loop.
func (a *Agent) hint(note func(p *pending)) {
	a.mu.Lock()
	note(&a.pending)
	a.mu.Unlock()
	a.wake()
}

// notifyKey adds key to the pending set *set (a field of a.pending) and
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

// Run is the loop. It starts watching the workload records and the
// datastore, reads every record, programs the kernel, reports ready, then
// reacts to hints and timers until ctx is done. On return the dataplane is
// left in place and daemon.json says the daemon stopped.
func (a *Agent) Run(ctx context.Context) error {
	// Watchers first, so nothing that happens during the first sync is lost.
	if err := a.wls.Watch(ctx, a.NotifyWorkload, a.NotifyRescan); err != nil {
		return err
	}
	if err := a.ds.Watch(ctx, a.NotifyPeers); err != nil {
		return err
	}
	a.status.SetReady(false, "initial sync in progress")
	a.writeStatus("initial sync in progress")
	a.fullSync()
	a.flushPeers()
	a.ready = true
	a.publishReadiness(a.managersBlocked())
	a.log.Info("first full sync done", "workloads", len(a.workloads), "peers", a.peerRecords, "error", a.lastErr)
	a.noteErrors()

	sched := a.newSchedule(ctx)
	timer := time.NewTimer(sched.wait(a.now()))
	defer timer.Stop()
	var retry, grace *time.Timer
	var retryC, graceC <-chan time.Time
	for {
		if a.graceWait > 0 {
			if grace != nil {
				grace.Stop()
			}
			grace = time.NewTimer(a.graceWait)
			graceC = grace.C
			a.graceWait = 0
		}
		if a.needApply && retryC == nil {
			// The last apply failed: retry with backoff rather than wait
			// for the next resync.
			if retry != nil {
				retry.Stop()
			}
			retry = time.NewTimer(a.retryBackoff)
			retryC = retry.C
		}
		a.status.Progress()
		select {
		case <-ctx.Done():
			a.ready = false
			a.status.SetReady(false, "stopping")
			a.writeStatus("routeletd stopped")
			return nil
		case <-a.kick:
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
			a.needApply = true
		case <-graceC:
			graceC = nil
			a.needApply = true // the tables kept the held interfaces dirty
		case reply := <-a.snap.req:
			a.serveSnapshot(reply)
			continue
		}
		if a.needResync {
			a.fullSync()
		} else {
			a.processPending()
			if a.needApply {
				a.apply()
			} else if len(a.checks) > 0 {
				a.applyChecks()
			}
		}
		a.keep(false)
		a.flushPeers()
		a.noteErrors()
	}
}

// flushPeers lets the peer source write what it keeps across restarts
// (datastore.Peers.Flush: the claim ledger), after the pass's Apply so
// the write is off the path from a record to the kernel.
func (a *Agent) flushPeers() {
	if f, ok := a.ds.(interface{ Flush() }); ok {
		f.Flush()
	}
}

// newSchedule returns the loop's periodic work: the full resync, the leak
// check and the temp file collection, each Checker manager's check and
// the keeper's sysctl check.
func (a *Agent) newSchedule(ctx context.Context) *schedule {
	s := &schedule{}
	now := a.now()
	s.add("resync", a.opts.ResyncPeriod, now, func() bool { a.needResync = true; return true })
	s.add("leaks", a.opts.TickPeriod, now, func() bool { a.collectLeaks(ctx); return true })
	if a.temps != nil {
		s.add("temps", a.opts.TickPeriod, now, func() bool { a.collectTemps(); return false })
	}
	for _, m := range a.managers {
		if c, ok := m.(Checker); ok && c.CheckPeriod() > 0 {
			s.add(fmt.Sprintf("check %T", m), c.CheckPeriod(), now, func() bool {
				c.QueueCheck()
				if !slices.Contains(a.checks, m) {
					a.checks = append(a.checks, m)
				}
				return true
			})
		}
	}
	if a.keeper != nil {
		// The sysctls without change events are polled on their own
		// tick, without a pass of their own.
		s.add("keeper", a.keepPeriod, now, func() bool { a.keep(true); return false })
		if a.guardPeriod > 0 {
			s.add("guards", a.guardPeriod, now, func() bool { a.keepGuards(); return false })
		}
	}
	return s
}

// fullSync re-reads every record, re-derives all desired routes, queues a
// full RouteTable resync and applies. It also drains pending hints, which the
// re-read supersedes except for link states.
func (a *Agent) fullSync() {
	start := a.now()
	a.needResync = false
	p := a.takePending()
	a.applyLinks(p.links)

	ws, bad, wdirErr := a.wls.All()
	var errs []error
	for key, msg := range bad {
		if last := a.workloads[key]; last != nil && wdirErr == nil {
			ws[key] = last
			a.unreadable(key, msg, last)
			continue
		}
		errs = append(errs, errors.New(msg))
	}
	// A source that cannot be listed says nothing about the records in
	// it: keep serving what we had rather than withdraw every pod's route.
	a.publishSelf()
	a.ds.Rescan()
	a.reportBad(append(errs, a.nodesChanged(true)...))
	if wdirErr == nil {
		a.workloads = ws
		a.badFiles = bad
	} else {
		a.log.Error("cannot list workload records, keeping the last known set", "err", wdirErr)
	}
	a.desired = nil // derived again from every record
	a.syncDesired()
	if a.keeper != nil {
		a.keeperVeths() // so that CheckAll covers the veths of this read
		a.keeper.CheckAll()
	}
	a.rt4.QueueResync()
	if a.rt6 != nil {
		a.rt6.QueueResync()
	}
	a.apply()
	a.metrics.ResyncDuration.Observe(a.now().Sub(start).Seconds())
	a.snap.lastResync = a.now()
}

func (a *Agent) takePending() pending {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pending
	a.pending = pending{}
	return p
}

// processPending applies queued hints to memory and marks what needs an Apply.
func (a *Agent) processPending() {
	p := a.takePending()
	if p.rescan {
		// Events may have been lost: re-learn the links from one dump,
		// then apply what arrived since.
		a.refreshLinks()
		a.applyLinks(p.links)
		a.fullSync()
		return
	}
	a.applyLinks(p.links)
	if p.apply {
		a.needApply = true
	}
	for key := range p.workloads {
		a.reloadWorkload(key)
	}
	routed := a.syncDesired()
	if p.peers {
		if routed {
			// The records' routes go first: validating the peers may
			// read the node's every link, address and route again (a
			// host change), which a pod's route need not wait for.
			a.applyTables()
		}
		_ = a.nodesChanged(false)
	}
	for _, ev := range p.routeEvs {
		a.checkRouteEvent(ev)
	}
	for _, ev := range p.neighEvs {
		a.checkNeighEvent(ev)
		if a.keeper != nil {
			a.keeper.NeighChanged(ev.Iface)
		}
	}
	if a.keeper != nil {
		for name := range p.sysctls {
			a.keeper.SysctlsChanged(name)
		}
	}
}

// applyLinks hands link states to the tables and records which workload
// links exist and of what kind; a link that appeared, vanished or changed
// kind (which can change which record an address is routed to) goes into
// changedLinks.
func (a *Agent) applyLinks(links map[string]linkState) {
	for name, ls := range links {
		a.rt4.OnIfaceStateChanged(name, ls.up)
		if a.rt6 != nil {
			a.rt6.OnIfaceStateChanged(name, ls.up)
		}
		if a.keeper != nil {
			a.keeper.LinkChanged(name)
		}
		if _, had := a.links[name]; ls.exists {
			a.setLink(name, ls.kind)
			if ls.kind == "veth" {
				delete(a.absentSince, name)
			}
		} else if had {
			delete(a.links, name)
			a.changedLinks[name] = struct{}{}
		}
		a.needApply = true
	}
}

// setLink records that the prefix link name exists with kind, noting it in
// changedLinks when that is news.
func (a *Agent) setLink(name, kind string) {
	if old, had := a.links[name]; !had || old != kind {
		a.links[name] = kind
		a.changedLinks[name] = struct{}{}
	}
}

// refreshLinks replaces what link events said with one dump; on failure the
// event-derived knowledge stays.
func (a *Agent) refreshLinks() {
	all, err := a.host.Links()
	if err != nil {
		a.log.Warn("cannot list links, keeping what link events said", "err", err)
		return
	}
	clear(a.links)
	for name, kind := range all {
		if strings.HasPrefix(name, a.opts.IfacePrefix) {
			a.links[name] = kind
		}
	}
}

// ownVeth reports whether name is one of routelet's veths that exists: it
// has the interface prefix and is a veth.
func (a *Agent) ownVeth(name string) bool {
	return ownVeth(a.opts.IfacePrefix, a.links, name)
}

// reloadWorkload re-reads one workload record and notes it in changedKeys
// when it was or is served. A record that is gone is no longer served; one
// that cannot be read is served as its last good read said (unreadable),
// and, without one, is logged and not served.
func (a *Agent) reloadWorkload(name string) {
	old := a.workloads[name]
	w, err := a.wls.Get(name)
	switch {
	case errors.Is(err, state.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		delete(a.workloads, name)
		delete(a.badFiles, name)
	case err != nil && old != nil:
		a.unreadable(name, err.Error(), old)
		a.badFiles[name] = err.Error()
	case err != nil:
		if a.badFiles[name] != err.Error() {
			a.log.Warn("skipping bad workload record", "file", name, "err", err)
		}
		a.badFiles[name] = err.Error()
	default:
		a.workloads[name] = w
		delete(a.badFiles, name)
	}
	a.metrics.Workloads.Set(float64(len(a.workloads)))
	a.setBadRecords()
	if (old != nil || a.workloads[name] != nil) && old != a.workloads[name] {
		a.changedKeys[name] = struct{}{}
	}
}

// unreadable handles a record that cannot be read (why) while its last
// good read (last) is served: a record that cannot be read is not one that
// is gone, so the pod keeps its routes, guard and leak-collection rules as
// last read. It is logged when why is news, and a file holding no JSON at
// all is written back from last (Workloads.Repair; counted as a "record"
// repair). A file of another version or otherwise unreadable is left to
// whoever wrote it.
func (a *Agent) unreadable(key, why string, last *state.Workload) {
	if a.badFiles[key] != why {
		a.log.Warn("workload record unreadable: serving its last good read", "file", key, "err", why,
			"container", last.ContainerID, "iface", last.HostIface, "ips", last.IPs)
	}
	fixed, err := a.wls.Repair(key, last)
	switch {
	case err != nil:
		a.log.Warn("cannot repair workload record, serving its last good read", "file", key, "err", err)
	case fixed:
		a.log.Info("workload record repaired from its last good read", "file", key, "container", last.ContainerID, "iface", last.HostIface)
		a.metrics.Repairs.WithLabelValues("record").Inc()
		a.snap.repairs.Add("record", key, 1)
	}
}

// reportBad logs each bad record once (until it is fixed or changes).
func (a *Agent) reportBad(bad []error) {
	seen := map[string]bool{}
	for _, err := range bad {
		msg := err.Error()
		seen[msg] = true
		if !a.badSeen[msg] {
			a.log.Warn("skipping bad record", "err", err)
		}
	}
	a.badSeen = seen
	a.setBadRecords()
}

// setBadRecords publishes routelet_bad_records: workload files that cannot
// be read or were refused, and bad node records of the last full read.
func (a *Agent) setBadRecords() {
	a.metrics.BadRecords.Set(float64(len(a.badFiles) + len(a.refused) + a.badNodes))
}

// holdUnnamed makes the route tables keep the routes of every routelet veth
// that no served record names while some record that cannot be read has
// no good read to serve (the daemon started with it, or never read it
// whole): that record may be the veth's, so what the kernel holds there
// stays, as the plugin left it, until the record can be read. The leak
// collector never sees such a record, so it is not collected either. Held
// veths are released once no such record is left (or a record names them).
func (a *Agent) holdUnnamed() {
	blind := false
	for key := range a.badFiles {
		if a.workloads[key] == nil {
			blind = true
			break
		}
	}
	if !blind && len(a.held) == 0 {
		return
	}
	want := map[string]struct{}{}
	if blind {
		named := make(map[string]struct{}, len(a.workloads))
		for _, w := range a.workloads {
			named[w.HostIface] = struct{}{}
		}
		for name := range a.links {
			if _, ok := named[name]; !ok && a.ownVeth(name) {
				want[name] = struct{}{}
			}
		}
	}
	hold := func(name string, on bool) {
		for _, rt := range []RouteTable{a.rt4, a.rt6} {
			if rt != nil {
				rt.Hold(name, on)
			}
		}
		a.needApply = true
	}
	for name := range a.held {
		if _, ok := want[name]; !ok {
			delete(a.held, name)
			hold(name, false)
		}
	}
	for name := range want {
		if _, ok := a.held[name]; !ok {
			a.held[name] = struct{}{}
			hold(name, true)
			a.log.Warn("keeping the routes of a veth no record names: an unreadable workload record may be its", "iface", name)
		}
	}
}

// syncDesired brings the desired routes up to date with the records in
// changedKeys and the links in changedLinks (desiredSet.update: only what
// they can affect is derived again), or, after a full read (desired nil),
// with every record, and hands the interfaces whose routes changed to the
// tables; it reports whether it handed them any. Refused records and
// addresses several records claim are logged when that changes. First it
// brings the tables' held veths up to date (holdUnnamed).
func (a *Agent) syncDesired() bool {
	a.holdUnnamed()
	if a.desired != nil && len(a.changedKeys) == 0 && len(a.changedLinks) == 0 {
		return false
	}
	routed := false
	var delta desiredDelta
	if a.desired == nil {
		a.desired, delta = newDesiredSet(RouteInput{
			Workloads: a.workloads, Links: a.links, LocalBlocks: a.opts.LocalBlocks, NodeSpace: a.opts.NodeSpace,
			IfacePrefix: a.opts.IfacePrefix, StaticARP: a.opts.StaticARP,
		})
		d := a.desired.d
		// What was noted of records and addresses no longer there goes.
		maps.DeleteFunc(a.refused, func(key, _ string) bool { _, ok := d.Refused[key]; return !ok })
		maps.DeleteFunc(a.winners, func(addr netip.Addr, _ string) bool { _, ok := d.Contested[addr]; return !ok })
		maps.DeleteFunc(a.superseded, func(key, _ string) bool { _, ok := d.Superseded[key]; return !ok })
		for fam, rt := range []RouteTable{a.rt4, a.rt6} {
			if rt != nil && rt.SetAllRoutes(d.Routes[fam]) {
				routed = true
			}
		}
		a.keepAll = true
	} else {
		delta = a.desired.update(a.changedKeys, a.changedLinks)
		for fam, rt := range []RouteTable{a.rt4, a.rt6} {
			if rt == nil {
				continue
			}
			for _, iface := range delta.ifaces[fam] {
				rt.SetRoutes(iface, a.desired.d.Routes[fam][iface])
				routed = true
			}
		}
	}
	clear(a.changedKeys)
	clear(a.changedLinks)
	a.noteDesired(delta)
	a.metrics.Workloads.Set(float64(len(a.workloads)))
	a.needApply = a.needApply || routed
	return routed
}

// noteDesired logs what delta decided anew: records refused (or refused
// for another reason), records whose veth another record owns (or a new
// one) and addresses several records claim that went to another record. It also tells the keeper which records' veths to derive
// again: those derived again and those claiming an address decided again,
// IPv4 as IPv6, since a pod guard lets through the addresses routed to its
// record (the keeper runs after the pass's Apply, off the way from a
// record to its route).
func (a *Agent) noteDesired(delta desiredDelta) {
	d := a.desired.d
	for _, name := range delta.keys {
		if why, news := noteChange(a.refused, d.Refused, name); news {
			w := a.workloads[name]
			a.log.Warn("refusing workload record: no route is programmed for it", "file", name,
				"container", w.ContainerID, "iface", w.HostIface, "ips", w.IPs, "err", why)
		}
	}
	a.setBadRecords()
	for _, name := range delta.keys {
		if owner, news := noteChange(a.superseded, d.Superseded, name); news {
			w, o := a.workloads[name], a.workloads[owner]
			a.log.Warn("workload record superseded: another record owns its veth; nothing is routed or allowed for it", "file", name,
				"container", w.ContainerID, "iface", w.HostIface, "ips", w.IPs, "created", w.Created,
				"owner", owner, "ownerContainer", o.ContainerID, "ownerCreated", o.Created)
		}
	}
	for _, addr := range delta.addrs {
		if name, news := noteChange(a.winners, d.Contested, addr); news {
			w := a.workloads[name]
			a.log.Warn("several workload records claim one address; routing it to one", "ip", addr,
				"file", name, "container", w.ContainerID, "iface", w.HostIface, "ifaceExists", a.ownVeth(w.HostIface))
		}
	}
	if a.keeper == nil || a.keepAll {
		return
	}
	for _, key := range delta.keys {
		a.keepKeys[key] = struct{}{}
	}
	for _, addr := range delta.addrs {
		for _, key := range a.desired.claims[addr] {
			a.keepKeys[key] = struct{}{}
		}
	}
}

// noteChange brings noted[k] in line with now[k] (deleted when now has
// none) and returns now's value and whether it is one noted did not hold.
func noteChange[K comparable](noted, now map[K]string, k K) (string, bool) {
	v, ok := now[k]
	if !ok {
		delete(noted, k)
		return "", false
	}
	news := noted[k] != v
	noted[k] = v
	return v, news
}

// checkRouteEvent marks an owned interface dirty when a route event shows its
// routes differ from what is desired: a desired route deleted, or an
// unexpected or foreign-protocol route added. Events that match the desired
// state (the echo of routelet's own writes) are ignored.
func (a *Agent) checkRouteEvent(ev RouteEvent) {
	if ev.Table != 0 && ev.Table != 254 {
		return
	}
	rt := a.rt4
	if ev.IPv6 {
		rt = a.rt6
	}
	if rt == nil {
		return
	}
	if ev.Dst.Addr().Is6() && ev.Dst.Addr().IsLinkLocalUnicast() {
		return // the kernel's fe80::/64 on every interface; the tables leave it alone
	}
	if ev.Deleted == rt.Wants(ev.Iface, ev.Dst) || (!ev.Deleted && ev.Protocol != a.opts.RouteProtocol) {
		a.log.Debug("route tampered with, repairing", "iface", ev.Iface, "cidr", ev.Dst, "deleted", ev.Deleted, "proto", ev.Protocol)
		rt.MarkDirty(ev.Iface)
		a.needApply = true
		a.snap.repairs.Add("route", ev.Dst.String()+" dev "+ev.Iface, 1)
	}
}

// checkNeighEvent marks a workload interface dirty when a neighbour entry for
// one of its desired IPv4 routes was deleted (the static ARP entry).
func (a *Agent) checkNeighEvent(ev NeighEvent) {
	if !a.opts.StaticARP || !ev.IP.Is4() {
		return
	}
	if a.rt4 != nil && a.rt4.Wants(ev.Iface, netip.PrefixFrom(ev.IP, 32)) {
		a.rt4.MarkDirty(ev.Iface)
		a.needApply = true
		a.snap.repairs.Add("neigh", ev.IP.String()+" dev "+ev.Iface, 1)
	}
}

// applyTables runs the route tables' Apply ahead of the rest of a pass,
// whose own Apply still follows (it reports errors and retries what failed
// here).
func (a *Agent) applyTables() {
	for _, rt := range []RouteTable{a.rt4, a.rt6} {
		if rt != nil {
			_ = rt.Apply()
		}
	}
}

// apply runs every table's and manager's Apply, updates metrics and status,
// and leaves needApply set when something failed (the caller retries).
func (a *Agent) apply() {
	a.applyPass(true, a.managers)
}

// applyChecks is the pass of a check tick when nothing else needs an
// Apply: only the managers whose check is queued apply (and so check);
// the tables and the other managers have nothing to do. A failure makes
// the retry a full pass, as any failed pass does.
func (a *Agent) applyChecks() {
	a.applyPass(false, a.checks)
}

// applyPass runs the Apply of managers and, with tables, of the route
// tables first; it updates metrics and status and leaves needApply set when
// something failed. It clears the queued checks: every manager with one
// was among those applied (a full pass applies them all).
func (a *Agent) applyPass(tables bool, managers []Manager) {
	start := a.now()
	var errs []error
	for _, rt := range []RouteTable{a.rt4, a.rt6} {
		if rt == nil || !tables {
			continue
		}
		if err := rt.Apply(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range managers {
		if err := m.Apply(); err != nil {
			errs = append(errs, err)
		}
	}
	a.checks = a.checks[:0]
	a.metrics.ApplyDuration.Observe(a.now().Sub(start).Seconds())
	for i, rt := range []RouteTable{a.rt4, a.rt6} {
		if rt == nil {
			continue
		}
		if d, ok := rt.RetryAfter(); ok && (a.graceWait == 0 || d < a.graceWait) {
			a.graceWait = max(d, time.Millisecond)
		}
		st := rt.Stats()
		table := [2]string{"ipv4", "ipv6"}[i]
		a.metrics.RoutesProgrammed.WithLabelValues(table).Set(float64(st.Routes))
		a.metrics.DirtyInterfaces.WithLabelValues(table).Set(float64(st.DirtyIfaces))
	}
	err := errors.Join(errs...)
	msg := ""
	if err != nil {
		msg = err.Error()
		a.metrics.ApplyErrors.Inc()
		a.needApply = true
		a.retryBackoff = min(max(2*a.retryBackoff, 50*time.Millisecond), 10*time.Second)
		if msg != a.lastErr {
			a.log.Warn("apply failed, will retry", "err", err, "retry_in", a.retryBackoff)
		}
	} else {
		a.needApply = false
		a.retryBackoff = 0
	}
	blocked := a.managersBlocked()
	if msg != a.lastErr || blocked != a.blocked {
		a.lastErr = msg
		if a.ready {
			a.publishReadiness(blocked)
		}
	}
}

// blocker is a Manager that can tell that its dataplane cannot work as
// configured (e.g. the kernel lacks the overlay's link kind).
type blocker interface {
	NotReady() string
}

// managersBlocked joins the managers' not-ready reasons ("" for none).
func (a *Agent) managersBlocked() string {
	var why []string
	for _, m := range a.managers {
		if b, ok := m.(blocker); ok {
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
	if blocked != a.blocked && blocked != "" {
		a.log.Warn("not ready", "reason", blocked)
	} else if blocked != a.blocked {
		a.log.Info("ready again")
	}
	a.blocked = blocked
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
		Ready:         a.ready && reason == "",
		Reason:        reason,
		PodMTU:        a.opts.PodMTU,
		Blocks:        blocks,
		RouteProtocol: a.opts.RouteProtocol,
		VXLANPort:     a.opts.VXLANPort,
		DaemonVersion: a.opts.Version,
		LastSyncError: a.lastErr,
		Updated:       a.now().UTC(),
	}
	if err := a.statusW.WriteDaemonStatus(st); err != nil {
		a.log.Error("cannot write daemon status", "err", err)
	}
}

// publishSelf hands this node's record to the datastore once (retried at
// every full sync until it succeeds); the datastore keeps it published.
func (a *Agent) publishSelf() {
	if a.published {
		return
	}
	if err := a.ds.Publish(a.opts.Self); err != nil {
		a.log.Error("cannot publish own node record, will retry", "node", a.opts.Self.Name, "err", err)
		return
	}
	a.published = true
}

// nodesChanged reads the validated peers from the datastore, updates the
// peer metric and hands the peers to the managers. A datastore that cannot
// list its peers says nothing about them: the managers keep the last ones.
// full: a full read, whose unreadable records are counted and returned.
// A read that is not full and validates to the peers the managers have
// (a hint that changed nothing, e.g. a host event) leaves them alone.
func (a *Agent) nodesChanged(full bool) []error {
	valid, n, bad, err := a.ds.Peers()
	same := !a.notePeers(valid, n, bad, err, full) && !full
	if err != nil {
		a.log.Error("cannot list node records, keeping the last known set", "err", err)
		return nil
	}
	if full {
		a.badNodes = len(bad)
	}
	a.peerRecords = n
	a.metrics.Peers.Set(float64(len(valid)))
	if same {
		return bad
	}
	for _, m := range a.managers {
		m.OnNodes(valid)
		a.needApply = true
	}
	return bad
}
