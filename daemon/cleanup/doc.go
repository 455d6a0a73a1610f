// Package cleanup implements `routeletd cleanup`: it removes what routelet
// created on a node, for decommissioning or starting over. It is never run
// implicitly; stopping routeletd leaves the dataplane in place.
//
// What it removes, in this order:
//  1. host-side workload veths named in workload records (only names with the
//     configured interface prefix); their pods lose connectivity;
//  2. the VXLAN devices (vxlan.calico, vxlan-v6.calico; only links of type
//     vxlan), and with them their ARP/NDP and FDB entries;
//  3. every route carrying routelet's route protocol in the main table, IPv4
//     and IPv6 (pod routes, the local blocks' blackholes);
//  4. the jumps to routelet's iptables chains, the ROUTELET-* chains
//     (IPv4 and IPv6, through the configured iptables backend) and then
//     every ipset named routelet-*;
//  5. the state directory's contents routelet knows: workloads/, nodes/,
//     ipam/, daemon.json, routeletd.lock, the state socket routeletd.sock
//     (left by a killed daemon) and leftover writer temp files, then the directory
//     itself when it is empty.
//
// tunl0 stays: it is the kernel's fallback device for the ipip module.
package cleanup
