// Package inspect compares what routeletd wants with what the kernel
// holds, into the state endpoint's document (statusapi.State).
//
// Desired is the daemon's side: the running daemon builds it on its apply
// loop's goroutine (agent.Query, from routeletd's state endpoint: the
// loop's Snapshot plus each Snapshotter's part); `routeletd status`
// without a daemon derives it from the state directory's records. Kernel is one read of everything the
// comparison needs (links, the main table's routes of both families, the
// neighbour and FDB entries of the overlay devices, the allowlist sets),
// through a Reader: Netlink on the real kernel, inspecttest.Fake in tests,
// Counting to count the reads. Compare joins the two; it never touches the
// kernel.
//
// The Reader is also every read `routeletd diagnose` shares with status
// (links, routes, neighbours, FDB, ipsets, sysctls, a pod's link):
// daemon/diagnose adds only its own (conntrack, the node's address space,
// the overlay's parent).
package inspect
