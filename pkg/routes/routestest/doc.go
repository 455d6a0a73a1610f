// Package routestest holds in-memory fakes of the routes package's kernel
// seams for tests that need no root: FakeNetlink (links, a route store
// keyed like the kernel's FIB, neighbours, failure injection) for
// routes.Netlink and FakeConntrack for routes.Conntrack.
package routestest
