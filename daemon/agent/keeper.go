package agent

import (
	"log/slog"
	"maps"
	"net"
	"slices"
	"time"

	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// Keeper is the part of *podnet.Keeper the loop drives: it re-asserts the
// per-veth and node settings the plugin's ADD made (sysctls, veth up, IPv6
// pod neighbours).
type Keeper interface {
	SetVeths(vs []podnet.HostVeth)
	// UpdateVeths changes the veths of set and stops keeping those named
	// in gone; the others stay as they are.
	UpdateVeths(set []podnet.HostVeth, gone []string)
	LinkChanged(name string)
	NeighChanged(name string)
	SysctlsChanged(name string)
	CheckAll()
	Check(poll bool) (podnet.Repairs, error)
	// CheckGuards reads back and repairs the veths' pod guards.
	CheckGuards() (podnet.Repairs, error)
}

// DefaultKeepPeriod is how often, at most, the owned veths' sysctls whose
// changes the kernel does not announce (proxy_delay, accept_ra,
// accept_dad) are read: the longest such a change stays. The announced
// ones are read on their netconf events.
const DefaultKeepPeriod = DefaultTickPeriod

// KeeperManager is the Manager of the pod veths' settings and guards: it
// hands the served workloads' host veths to a Keeper (keeperVeths) and
// runs it in Apply; listed last among the managers, it runs after the
// routes and the other managers, so a pod's route never waits for it. Its check (Checker) has two ticks: the
// silent sysctls every keepPeriod, the pod guards every guardPeriod (0:
// left to link events); the check period is the shorter, and QueueCheck
// queues those due. The announced sysctls, links and neighbours are
// checked on their hints (HostWatcher); everything on each full read.
// The keeper's errors are logged, not the pass's: the keeper retries
// them on its next run (a hint, a full read, its tick).
type KeeperManager struct {
	k           Keeper
	keepPeriod  time.Duration
	guardPeriod time.Duration
	repairs     RepairRecorder
	metrics     *health.Metrics
	log         *slog.Logger
	now         func() time.Time

	src       Served                         // the workloads as last handed over (OnWorkloads)
	kept      map[string]keptVeth            // by record key: what the keeper was last handed (keeperVeths)
	keptBy    map[string]map[string]struct{} // host veth → keys of the records in kept naming it
	keepKeys  map[string]struct{}            // records whose veth the keeper may need anew (keeperVeths)
	keepAll   bool                           // every record's (after a full read)
	poll      bool                           // the silent sysctls are due (QueueCheck)
	guards    bool                           // the guard check is due (QueueCheck)
	nextPoll  time.Time
	nextGuard time.Time
}

// KeeperOptions configure a KeeperManager.
type KeeperOptions struct {
	// KeepPeriod is how often the silent sysctls are read (at most
	// DefaultKeepPeriod; 0 means that).
	KeepPeriod time.Duration
	// GuardPeriod is how often the pod guards are checked (0: left to
	// link events).
	GuardPeriod time.Duration
	Repairs     RepairRecorder // nil: repairs only counted in the metric
	Metrics     *health.Metrics
	Log         *slog.Logger
}

// NewKeeperManager returns the manager of k. routeletd lists it last in
// Deps.Managers, so a pass programs every route first.
func NewKeeperManager(k Keeper, o KeeperOptions) *KeeperManager {
	keep := o.KeepPeriod
	if keep <= 0 || keep > DefaultKeepPeriod {
		keep = DefaultKeepPeriod
	}
	repairs := o.Repairs
	if repairs == nil {
		repairs = noRepairs{}
	}
	return &KeeperManager{k: k, keepPeriod: keep, guardPeriod: max(o.GuardPeriod, 0),
		repairs: repairs, metrics: o.Metrics, log: o.Log, now: time.Now, keepKeys: map[string]struct{}{}}
}

var (
	_ Manager     = (*KeeperManager)(nil)
	_ Checker     = (*KeeperManager)(nil)
	_ HostWatcher = (*KeeperManager)(nil)
)

// OnNodes implements Manager: the veths' settings do not depend on peers.
func (m *KeeperManager) OnNodes([]peers.NodeInfo) {}

// OnWorkloads implements Manager: it notes which records' veths to derive
// again; after a full read it hands over every veth at once and has the
// keeper check them all (CheckAll), so the start-up sync (every veth new)
// re-asserts every veth's settings at the pass's Apply, not at the next
// poll.
func (m *KeeperManager) OnWorkloads(s Served) {
	m.src = s
	if s.All {
		m.keepAll = true
		m.keeperVeths()
		m.k.CheckAll()
		return
	}
	for key := range s.Changed {
		m.keepKeys[key] = struct{}{}
	}
}

// LinkChanged implements HostWatcher.
func (m *KeeperManager) LinkChanged(name string) { m.k.LinkChanged(name) }

// NeighChanged implements HostWatcher.
func (m *KeeperManager) NeighChanged(name string) { m.k.NeighChanged(name) }

// SysctlsChanged implements HostWatcher.
func (m *KeeperManager) SysctlsChanged(name string) { m.k.SysctlsChanged(name) }

// CheckPeriod implements Checker: the shorter of the two ticks.
func (m *KeeperManager) CheckPeriod() time.Duration {
	if m.guardPeriod > 0 {
		return min(m.keepPeriod, m.guardPeriod)
	}
	return m.keepPeriod
}

// QueueCheck implements Checker: it queues the sysctl poll and the guard
// check when each is due.
func (m *KeeperManager) QueueCheck() {
	now := m.now()
	due := func(next *time.Time, period time.Duration) bool {
		if next.IsZero() {
			*next = now.Add(period - m.CheckPeriod()) // the first check tick is one CheckPeriod after the start
		}
		if now.Before(*next) {
			return false
		}
		*next = next.Add(period)
		if !now.Before(*next) {
			*next = now.Add(period)
		}
		return true
	}
	if due(&m.nextPoll, m.keepPeriod) {
		m.poll = true
	}
	if m.guardPeriod > 0 && due(&m.nextGuard, m.guardPeriod) {
		m.guards = true
	}
}

// Apply implements Manager: it hands the keeper the veths of the records
// changed since (keeperVeths), runs the guard check when queued, then the
// keeper's check: the silent sysctls when queued, the hinted sysctls,
// links and neighbours always. Repairs are counted in
// routelet_repairs_total; errors are logged and Apply returns nil.
func (m *KeeperManager) Apply() error {
	m.keeperVeths()
	if m.guards {
		m.guards = false
		rep, err := m.k.CheckGuards()
		m.countRepairs(rep)
		if err != nil {
			m.log.Warn("keeping pod guards", "err", err)
		}
	}
	poll := m.poll
	m.poll = false
	rep, err := m.k.Check(poll)
	m.countRepairs(rep)
	if err != nil {
		m.log.Warn("keeping pod veths", "err", err)
	}
	return nil
}

// keptVeth is what keeperVeths last derived from one record: the record
// and the veth handed to the keeper.
type keptVeth struct {
	w *state.Workload
	v podnet.HostVeth
}

// keeperVeths hands the served workloads' host veths to the keeper: only
// records the workload routes accepted that own their veth (not
// superseded, so one record per veth name, whatever the keys' order),
// each with the addresses routed to it (its pod guard's sources; the IPv6
// ones its neighbours). It derives a veth again only for a record in
// keepKeys (read again, a claimant of an address decided again, or one
// whose veth changed owner) and hands over only the veths those name
// (UpdateVeths); after a full read (keepAll) it derives every record's
// and hands over the whole list (SetVeths). Nothing is handed over when
// nothing changed.
func (m *KeeperManager) keeperVeths() {
	if m.src.src == nil || (!m.keepAll && len(m.keepKeys) == 0) {
		return
	}
	if m.kept == nil {
		m.kept, m.keptBy = map[string]keptVeth{}, map[string]map[string]struct{}{}
	}
	changed := map[string]struct{}{} // veth names
	derive := func(name string) {
		old, had := m.kept[name]
		w, addrs, routed, ok := m.src.Record(name)
		if !ok {
			if had {
				m.unkeep(name, old)
				changed[old.v.Name] = struct{}{}
			}
			return
		}
		if had && old.w == w && slices.Equal(old.v.Addrs, routed) {
			return
		}
		kv := keptVeth{w: w, v: podnet.HostVeth{Name: w.HostIface, Addrs: routed}}
		kv.v.MAC, _ = net.ParseMAC(w.ContainerMAC)
		for _, addr := range addrs {
			if addr.Is6() {
				kv.v.IPv6 = true
			}
		}
		for _, addr := range routed {
			if addr.Is6() {
				kv.v.Neighbours = append(kv.v.Neighbours, addr)
			}
		}
		if had {
			m.unkeep(name, old)
			changed[old.v.Name] = struct{}{}
		}
		m.kept[name] = kv
		if m.keptBy[kv.v.Name] == nil {
			m.keptBy[kv.v.Name] = map[string]struct{}{}
		}
		m.keptBy[kv.v.Name][name] = struct{}{}
		changed[kv.v.Name] = struct{}{}
	}
	all := m.keepAll
	if all {
		for name := range m.kept {
			if !m.src.Known(name) {
				derive(name)
			}
		}
		for name := range m.src.Keys() {
			derive(name)
		}
	} else {
		for name := range m.keepKeys {
			derive(name)
		}
	}
	m.keepAll = false
	clear(m.keepKeys)
	switch {
	case len(changed) == 0:
	case all:
		vs := make([]podnet.HostVeth, 0, len(m.kept))
		for _, name := range slices.Sorted(maps.Keys(m.kept)) {
			vs = append(vs, m.kept[name].v)
		}
		m.k.SetVeths(vs)
	default:
		var set []podnet.HostVeth
		var gone []string
		for veth := range changed {
			if keys := m.keptBy[veth]; len(keys) > 0 {
				set = append(set, m.kept[slices.Max(slices.Collect(maps.Keys(keys)))].v)
			} else {
				gone = append(gone, veth)
			}
		}
		m.k.UpdateVeths(set, gone)
	}
}

// unkeep forgets what keeperVeths derived from record name (kv).
func (m *KeeperManager) unkeep(name string, kv keptVeth) {
	delete(m.kept, name)
	if keys := m.keptBy[kv.v.Name]; keys != nil {
		delete(keys, name)
		if len(keys) == 0 {
			delete(m.keptBy, kv.v.Name)
		}
	}
}

// countRepairs counts what the keeper put back.
func (m *KeeperManager) countRepairs(rep podnet.Repairs) {
	for _, r := range []struct {
		object string
		n      int
	}{{"sysctl", rep.Sysctls}, {"link", rep.Links}, {"neigh", rep.Neighbours}, {"guard", rep.Guards}} {
		m.metrics.Repairs.WithLabelValues(r.object).Add(float64(r.n))
		m.repairs.Add(r.object, "", r.n)
	}
}
