// Package overlaytest holds an in-memory fake of the overlay package's
// kernel seam for tests that need no root: FakeNetlink (links, addresses,
// neighbour and FDB entries, failure injection) for overlay.Netlink.
package overlaytest
