// Package cleanup implements `routeletd cleanup`: it removes what routelet
// created on a node, for decommissioning or starting over. It is never run
// implicitly; stopping routeletd leaves the dataplane in place.
//
// What it removes, in this order:
//  1. host-side workload veths named in workload records (only names with the
//     configured interface prefix); their pods lose connectivity;
//  2. every route carrying routelet's route protocol in the main table, IPv4
//     and IPv6 (pod routes, the local blocks' blackholes);
//  3. the state directory's contents routelet knows: workloads/, nodes/,
//     ipam/, daemon.json, routeletd.lock and leftover writer temp files, then the directory
//     itself when it is empty.
//
// Overlay devices, ipsets and iptables chains are added here as those parts
// of routelet land.
package cleanup
