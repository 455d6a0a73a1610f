// Package ipset keeps routelet's allowlist ipsets in the kernel in line with
// the members the daemon wants, over netlink.
//
// The sets are hash:net sets named with the "routelet-" prefix (VXLANPeers,
// IPIPPeers, WireGuardPeers, Pools, NATPools and their "-v6" twins). A [Sets] holds the desired members
// in memory: setters never touch the kernel, [Sets.Apply] reconciles the sets
// marked dirty and [Sets.Check] re-reads every set from the kernel and
// repairs drift (a deleted member, a destroyed set, a foreign member).
//
// Members are applied by difference: missing ones are added before extra ones
// are deleted. A whole-set rewrite — first creation, a set of the wrong type
// or family, or a difference larger than half the set — is atomic: a
// temporary set "<name>-tmp" is built and filled, then swapped with (or, when
// the set does not exist yet, renamed to) the real one, so rules that match
// on the set never see it half filled.
//
// Ownership is decided by the name alone: only sets whose names start with
// "routelet-" are ever created, changed or destroyed.
//
// The kernel is reached through the narrow [Kernel] interface: [NewNetlink]
// is the real one (its own minimal ipset netlink codec on top of
// vishvananda/netlink's nl package), ipsettest.Fake an in-memory one with
// failure injection for tests.
package ipset
