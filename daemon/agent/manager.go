package agent

import (
	"iter"
	"maps"
	"net/netip"
	"time"

	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// Manager is one dataplane component the loop drives: the workload routes
// (built in), the overlay (daemon/overlaymgr), the ipset allowlists
// (daemon/allowmgr), the pod veths' keeper and guards (KeeperManager).
// Every method runs on the loop goroutine; On* touch memory only, Apply
// is the only path to the kernel.
//
// A manager that needs only the peers (a WireGuard device, a BGP
// speaker's sessions; the local blocks come with its configuration)
// leaves OnWorkloads empty; one that needs only the workloads leaves
// OnNodes empty.
type Manager interface {
	// OnNodes hands over every peer, validated, when they may have
	// changed. The slice is the validator's and is reused by the next
	// read: a manager that keeps peers keeps a copy.
	OnNodes(peers []peers.NodeInfo)
	// OnWorkloads tells that the served workloads changed (see Served).
	OnWorkloads(s Served)
	// Apply programs the kernel; an error makes the loop retry the pass
	// with backoff and shows in daemon.json's last sync error.
	Apply() error
}

// The optional capabilities of a Manager, which the loop asks for by
// type. Each is declared here; the loop asks for no other.
//
//   - Checker: a periodic check on the loop's schedule.
//   - Blocker: holds the daemon not ready while its dataplane cannot work.
//   - HostWatcher: hears the link, neighbour and sysctl hints of the
//     workload interfaces (and the node's sysctls).
//   - SelfPublisher: changes this node's published record while the
//     daemon runs.
//
// The state endpoint's parts of a snapshot (inspect.Snapshotter) and a
// manager's Close are asked for by routeletd's wiring, not by the loop.

// Checker is a Manager with a periodic check (the overlay's device check,
// the allowlist's re-read of its sets and chains, the keeper's sysctl
// poll and guard check). The loop calls QueueCheck every CheckPeriod and
// then runs an Apply pass: the check's kernel reads and repairs happen in
// Apply, the only path to the kernel. A period not above zero schedules
// no check.
type Checker interface {
	CheckPeriod() time.Duration
	QueueCheck()
}

// Blocker is a Manager that can tell that its dataplane cannot work as
// configured (e.g. the kernel lacks the overlay's link kind): NotReady
// returns why, "" when it can. The loop asks after every pass.
type Blocker interface {
	NotReady() string
}

// HostWatcher is a Manager that hears the loop's kernel hints about the
// workload interfaces: a link changed, a neighbour entry was deleted, a
// device configuration (sysctl) event arrived (name "" is the node's).
// Each hint queues the manager's Apply for the pass, as a check does.
type HostWatcher interface {
	LinkChanged(name string)
	NeighChanged(name string)
	SysctlsChanged(name string)
}

// SelfPublisher is a Manager owning a part of this node's published
// record that can change while the daemon runs (the WireGuard public key,
// after the key file was rotated). After every pass the loop hands it the
// record (Options.Self as last published); one that changed it reports
// true, and the loop publishes the record again at once (a failed
// publish is retried at every full sync). Calling it after the pass's
// Apply lets the manager put its kernel side in place (the device's new
// key) before the peers learn of it.
type SelfPublisher interface {
	UpdateSelf(self *peers.Record) (changed bool)
}

// Served is what the workload routes manager serves, handed to every
// Manager's OnWorkloads after it changed. It is a view of the manager's
// current state, read on the loop goroutine (at OnWorkloads or later, up
// to the next full read); only All and Changed are particular to the
// call.
type Served struct {
	// All: every record may have changed (a full read); Changed is then
	// empty.
	All bool
	// Changed are the keys of the records read again or whose routed
	// addresses were decided again, both families. Every manager is
	// handed the same map: it is read only, and valid until the next
	// OnWorkloads (the loop reuses it).
	Changed map[string]struct{}
	src     *workloadRoutes
}

// Keys returns the key of every record read (served or not).
func (s Served) Keys() iter.Seq[string] { return maps.Keys(s.src.workloads) }

// Record returns the record under key, every address it claims (in its
// order) and those routed to it, and ok: whether it is served — read,
// not refused, owning its veth (not superseded) and named with the
// interface prefix.
func (s Served) Record(key string) (w *state.Workload, addrs, routed []netip.Addr, ok bool) {
	return s.src.served(key)
}

// Known reports whether a record is read under key (served or not).
func (s Served) Known(key string) bool { _, ok := s.src.workloads[key]; return ok }
