// Package agent is routeletd's apply loop: it turns the state directory's
// records into desired routes, hands them to the RouteTables and keeps the
// kernel in line.
//
// One goroutine (Run) owns every RouteTable and all desired state. The
// workloads' desired routes are kept current one record at a time
// (desiredSet: a changed record derives only its own routes and decides
// again only the addresses it claims or claimed, with the result of
// DesiredRoutes over all records), and the RouteTables are handed only the
// interfaces whose routes changed (SetRoutes; SetAllRoutes after a full
// read); the tamper checks ask the tables (Wants). Watchers
// (fsnotify on workloads/ and nodes/; the one netlink event source,
// daemon/netwatch, to which the agent is a Handler for the interfaces it
// owns) run in their own goroutines and only queue hints through the
// Notify* methods; the loop wakes, waits a short debounce so a burst becomes
// one pass, re-reads what the hints name, and calls Apply, the only path to
// the kernel. Periodic work is ticks of one schedule in the loop: the full
// re-read of every record plus a full RouteTable resync every resync period
// (so a lost event costs at most one period), the leak check, each Checker
// manager's check and the keeper's sysctl check.
//
// Ownership: routes on interfaces named with the interface prefix belong to
// routelet; elsewhere only routes carrying routelet's route protocol do (the
// local blocks' blackholes live under routes.InterfaceNone).
//
// The loop also keeps what the plugin's ADD set up on the node side of each
// pod (Keeper: veth sysctls, node forwarding, veth up, IPv6 neighbours):
// links and neighbours on their events, sysctls on a tick of at most 1s.
//
// Seams: workload records come from a Workloads source (daemon/workloads),
// peers from a PeerSource (daemon/datastore: a Datastore with the peer
// validator in front, so managers only see validated peers.NodeInfo);
// this node's record (Options.Self, built once) goes out through
// PeerSource.Publish and is never read back. The agent holds no path.
// A Manager takes validated peers and applies its own dataplane (overlay
// devices, ipsets) in the same loop; a Manager with a NotReady method can
// hold the daemon not ready, one with CheckPeriod/QueueCheck (Checker)
// gets a periodic check on the loop's schedule.
package agent
