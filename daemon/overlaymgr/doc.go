// Package overlaymgr connects pkg/overlay to routeletd's apply loop: it is
// the agent.Manager that keeps the overlay devices (vxlan.calico,
// vxlan-v6.calico, tunl0), their per-peer ARP/NDP and FDB entries and the
// routes to every peer's pod blocks in line with the node records.
//
// Per IP family with a host IP (and, for IPv6, an IPv6 block) it holds:
// the parent (the link holding the host IP), the device manager of the mode
// and its own RouteTable. That table owns only routelet-protocol routes on
// overlay.OwnedInterfaces (the overlay devices and the parent), so it never
// overlaps the agent's table, which owns the workload interfaces and the
// blackholes. Keeping the overlay routes in a table of its own lets Apply
// order the work: devices first, then their routes, in one pass — a route
// through vxlan.calico cannot exist before the device does.
//
// OnNodes (memory only) turns every validated peer (pkg/peers) into
// overlay.Peer values, hands them to the VXLAN manager and hands the route
// table only the targets of overlay.Routes that differ from the last call
// (RouteUpdate, and RouteRemove for a target no longer wanted, so routes
// of a vanished peer or block go). Interest says which netlink events are
// the overlay's (its devices, parents and owned interfaces); Events is the
// daemon/netwatch handler for them, which only records hints and asks the
// loop for a pass (agent.NotifyApply). As an agent.Checker it has the
// periodic device check: the loop calls QueueCheck every CheckPeriod and
// then runs a pass. Apply then repairs: a recreated device
// (DeviceInfo.Created grew) gets its routes re-read and re-programmed at
// once. As an agent.Blocker it keeps the daemon not ready (NotReady) while
// a device cannot be made: the kernel lacks the mode's link kind, or a
// VXLAN device routelet does not own holds the VNI and port.
//
// See docs/overlay.md.
package overlaymgr
