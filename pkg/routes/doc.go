// Package routes reconciles the routes routelet wants in one kernel routing
// table (one IP family) with what the kernel actually holds.
//
// Callers describe the desired routes per interface with SetRoutes,
// RouteUpdate and RouteRemove, or those of the whole table with
// SetAllRoutes; those only change memory, and Wants answers whether a route
// is desired (so a caller keeps no copy of its own). Apply is the only
// path to the kernel: the first call, and any call after QueueResync, reads
// the interface list and the whole table once (one dump per table, not one
// per interface) and repairs every difference; other calls only revisit the
// interfaces marked dirty.
//
// Kernel access goes through two narrow seams, Netlink and Conntrack, each
// with a real implementation (vishvananda/netlink, ti-mo/conntrack) and an
// in-memory fake (routestest.FakeNetlink, routestest.FakeConntrack) for tests
// that need no root.
//
// See docs/routes.md for the behaviour seen from an operator's side:
// ownership, the grace period, conntrack cleanup and resyncs.
package routes
