// Package podguard keeps the pod source check on each pod veth's own
// ingress hook: a netdev base chain per host veth, in routelet's table
// `netdev routelet`, through google/nftables (no nft binary).
//
// The chain of a veth (named after the veth, hooked on its ingress,
// priority 0, policy accept) drops, counting each:
//
//   - UDP to the VXLAN port and IPIP (IP protocol 4), whatever the source
//     and destination, so a pod can never pass as a node to a peer's
//     allowlist;
//   - every IPv4 or IPv6 packet whose source is not one of the pod's
//     addresses; IPv6 link-local sources (fe80::/10) and the unspecified
//     source of duplicate address detection are let through. Other
//     protocols (ARP) pass.
//
// The check runs before any prerouting hook, only on packets from the pod,
// so the node's other packets (the overlay's outer and decapsulated ones)
// meet no hook for it.
//
// Ensure writes a guard in one nf_tables transaction (table, chain, its
// rules replaced as a whole), Read compares the kernel's chain and rules
// with the desired ones, Remove deletes one veth's chain, Chains lists the
// chains of the table, Cleanup deletes the table.
//
// Kernels differ in what a device's deletion does to a single-device
// netdev base chain: 6.1 releases the chain with the device; newer ones
// (6.18 here) keep it, detached, and attach it again to the next device of
// that name. Ensure therefore compares an existing chain's rules with the
// new pod's and rewrites them when they differ, Remove treats a missing
// chain as done, and the daemon deletes chains whose device is gone.
//
// Ownership: only the table `netdev routelet` and its chains are ever
// created, changed or deleted.
package podguard
