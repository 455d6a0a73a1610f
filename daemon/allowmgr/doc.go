// Package allowmgr connects routeletd's apply loop to the overlay
// allowlists of pkg/allowlist.
//
// Manager implements agent.Manager: OnNodes turns validated peers into the
// desired members of routelet's ipsets (peers' host IPs plus the configured
// external node CIDRs may send VXLAN or IPIP, peers' host IPs alone to the
// WireGuard port; every node's blocks are the pod pools that NAT outgoing
// leaves alone) and Apply hands them to the
// allowlist, which changes the kernel only by difference. Both run on the
// loop goroutine.
//
// The periodic check is a tick of the loop (agent.Checker): every check
// period the loop calls QueueCheck, and the next Apply asks the allowlist to
// re-read its sets and chains and repair whatever was tampered with (a
// flushed chain, a deleted jump or member, a destroyed set). A clean check
// changes nothing. Checks do nothing before the first Apply, so a
// restarting daemon never "repairs" the peer sets to empty before it has
// read the node records.
package allowmgr
