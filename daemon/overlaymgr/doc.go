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
// overlay.Peer values, hands them to the VXLAN manager and feeds every key
// of overlay.Routes to SetRoutes, empty lists included, so routes of a previous mode or of a
// vanished peer are removed. Interest says which netlink events are the
// overlay's (its devices, parents and owned interfaces); Events is the
// daemon/netwatch handler for them, and QueueCheck the periodic device
// check the loop runs every CheckPeriod. Both only record hints and ask the
// loop for a pass (agent.NotifyApply). Apply then repairs: a
// recreated device (DeviceInfo.Created grew) gets its routes re-read and
// re-programmed at once.
//
// See docs/overlay.md.
package overlaymgr
