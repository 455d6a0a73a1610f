// Package agent is routeletd's apply loop: it turns the state directory's
// records into desired routes, hands them to the RouteTables and keeps the
// kernel in line, with the other dataplane managers beside it.
//
// One goroutine (Run) owns the loop and every manager. The Agent itself
// keeps only the loop: the watchers' hints (Notify*, from any goroutine,
// under a lock), the debounce, the schedule of periodic work, the apply
// pass and readiness. Watchers (fsnotify on workloads/ and nodes/; the
// one netlink event source, daemon/netwatch, to which the agent is a
// Handler for the interfaces it owns) run in their own goroutines and
// only queue hints; the loop wakes, waits a short debounce so a burst
// becomes one pass, re-reads what the hints name, and runs every
// manager's Apply, the only path to the kernel.
//
// Managers (manager.go: the Manager interface and every optional
// capability the loop asks for, Checker, Blocker and HostWatcher, in one
// place) are applied in this order on each pass:
//
//   - the workload routes (workloadroutes.go): the records read from a
//     Workloads source, their desired routes kept current one record at
//     a time (desiredSet: a changed record derives only its own routes
//     and decides again only the addresses it claims or claimed, with the
//     result of DesiredRoutes over all records), handed to the tables
//     only for the interfaces whose routes changed (SetRoutes; SetAllRoutes
//     after a full read); the tamper checks on route and neighbour events
//     (RouteTable.Wants); the leak collection of records whose veth and
//     netns are gone (and of stale temp files). It serves the workloads to
//     the other managers (Served, through OnWorkloads).
//   - Deps.Managers, in their order: routeletd lists the ipset
//     allowlists (daemon/allowmgr) and the overlay (daemon/overlaymgr),
//     which take the validated peers (OnNodes), then the veth keeper.
//   - the keeper (KeeperManager, keeper.go), last, off the way from a
//     record to its route: it keeps what the plugin's ADD set up on the
//     node side of each served pod (veth sysctls, node forwarding, veth
//     up, IPv6 neighbours) and the pod guards. Links, neighbours and
//     announced sysctls are checked on their hints (HostWatcher); the
//     silent sysctls and the guards on its check (Checker), whose period
//     is the shorter of the sysctl poll (KeeperOptions.KeepPeriod, at
//     most DefaultKeepPeriod; routeletd: the device check period) and
//     the guard tick (KeeperOptions.GuardPeriod; routeletd: the
//     allowlist check period), each queued when due.
//
// Periodic work is ticks of one schedule in the loop: the full re-read of
// every record and peer plus a full RouteTable resync every resync period
// (so a lost event costs at most one period), the leak check and temp
// collection every tick period, and each Checker manager's check (the
// overlay's device check, the allowlist's re-read, the keeper's sysctl
// poll and guard check), which queues the check and runs a pass of only
// the managers checked when nothing else needs one.
//
// Ownership: routes on interfaces named with the interface prefix belong to
// routelet; elsewhere only routes carrying routelet's route protocol do (the
// local blocks' blackholes live under routes.InterfaceNone).
//
// Seams: workload records come from a Workloads source (daemon/workloads),
// peers from a PeerSource (daemon/datastore.Peers: a Datastore with the
// peer validator in front, so managers only see validated peers.NodeInfo,
// and the datastore's typed Health); this node's record (Options.Self,
// built once; a SelfPublisher manager may change its part of it, as the
// WireGuard manager does after a key rotation, and the loop publishes it
// again) goes out through PeerSource.Publish and is never read back.
// The agent holds no path. New takes its collaborators in one Deps.
// A coming manager (a BGP speaker announcing the local blocks to the
// peers) is one more Manager in Deps.Managers.
//
// Snapshots: the state endpoint asks the loop with Query, whose build
// function runs on the loop goroutine with a plain Snapshot (the records,
// their routes and refusals, the peers with their last change, the
// datastore's last read and Health, the objects' errors); turning it into
// the inspect and statusapi documents, and asking the managers for their
// parts (inspect.Snapshotter), happens there, so this package imports
// neither.
package agent
