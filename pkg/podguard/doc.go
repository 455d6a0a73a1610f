// Package podguard keeps the pod source check on each pod veth's own
// ingress hook: a netdev base chain per host veth, in routelet's table
// `netdev routelet`, through google/nftables (no nft binary).
//
// The chain of a veth (named after the veth, hooked on its ingress,
// priority 0, policy accept) drops, counting each:
//
//   - every frame whose Ethernet type is not IPv4, IPv6 or ARP: any
//     VLAN-tagged frame (802.1Q, 802.1ad, QinQ, two 802.1Q tags), MPLS,
//     PPPoE, 802.3 length frames, any other type;
//   - UDP to the VXLAN port and IPIP (IP protocol 4), whatever the source
//     and destination, so a pod can never pass as a node to a peer's
//     allowlist;
//   - every IPv4 or IPv6 packet whose source is not one of the pod's
//     addresses; IPv6 link-local sources (fe80::/10) and the unspecified
//     source of duplicate address detection are let through;
//   - every ARP packet whose sender protocol address is not one of the
//     pod's IPv4 addresses (or whose protocol type and address lengths
//     are not IPv4's and Ethernet's, which the kernel ignores anyway), so
//     a pod cannot fill the node's neighbour table (the node makes an
//     entry for the sender of every request it answers). The probe's sender
//     0.0.0.0 is dropped too: the kernel makes no entry from it, but a
//     pod's addresses are assigned, not negotiated, so it has nothing to
//     probe for, and the rule stays "only the pod's own addresses".
//
// The Ethernet type is read from the frame (nft_payload's link-layer
// header, offset 12), not from meta protocol. By the time the ingress hook
// runs, the kernel has taken the outermost VLAN tag off the frame into the
// packet's metadata (__netif_receive_skb_core untags an 802.1Q or 802.1ad
// frame in software before the ingress hooks; a pod whose kernel offloads
// the tag, txvlan on, hands it over in the metadata already; the node's
// rxvlan setting changes neither), so meta protocol and the network
// header are what follows that tag. With one tag that is the IP header, so
// the address rules alone would see a single-tagged packet's real source
// (and drop a foreign one). With two tags meta protocol is the inner tag's
// TPID, no address rule would match, the policy would accept, and the
// kernel, finding no VLAN device for VID 0, would take off both tags and
// deliver the packet (a spoofed IPv4 or IPv6 source, a forged VXLAN
// packet). nft_payload puts a tag held in the metadata back into the
// link-layer header it shows (on 6.1 as on newer kernels), so offset 12 is
// the outermost type as the pod sent it; once it is IPv4, IPv6 or ARP the
// frame carries no tag and meta protocol is the same type.
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
// (6.18, for one) keep it, detached, and attach it again to the next device of
// that name. Ensure therefore compares an existing chain's rules with the
// new pod's and rewrites them when they differ, Remove treats a missing
// chain as done, and the daemon deletes chains whose device is gone.
//
// Ownership: only the table `netdev routelet` and its chains are ever
// created, changed or deleted.
package podguard
