// Package cleanup implements `routeletd cleanup`: it removes what routelet
// created on a node, for decommissioning or starting over. It is never run
// implicitly; stopping routeletd leaves the dataplane in place.
//
// What it removes, in this order:
//  1. host-side workload veths named in workload records (only names with the
//     configured interface prefix); their pods lose connectivity;
//  2. the VXLAN devices (vxlan.calico, vxlan-v6.calico; only links of type
//     vxlan), and with them their ARP/NDP and FDB entries;
//     then, given a WireGuard device name (Options.WireGuardDevice), that
//     link when its kind is wireguard or tun, and the userspace datapath
//     its pid file in <stateDir>/wireguard names, only while that
//     process's command line is the datapath's for the device;
//  3. every route carrying routelet's route protocol in the main table, IPv4
//     and IPv6 (pod routes, the local blocks' blackholes, the routes to the
//     peers' blocks); with bgp on in the configuration cleanup runs with,
//     also the main table's routes via a gateway carrying
//     bgp-route-protocol (default 186, the learned BGP routes). With bgp
//     off those stay: 186 is also what FRR gives its routes, and cleanup
//     never removes a route it cannot tell is routelet's (run it with bgp
//     on to remove an earlier BGP run's routes);
//  4. the jumps to routelet's iptables chains, the ROUTELET-* chains
//     (IPv4 and IPv6, through the configured iptables backend) and then
//     every ipset named routelet-*;
//  5. the nftables table netdev routelet: the pod guards (pkg/podguard);
//  6. what routelet wrote in the state directory, recognised by its format
//     (statedir.go): records in workloads/ and nodes/, the IPAM layout of
//     pkg/ipam/doc.go, daemon.json, peer-claims.json, routeletd.lock, the
//     state socket routeletd.sock (left by a killed daemon), in wireguard/
//     the private key, the datapath's <device>.pid and <device>.log, and
//     writers' .tmp-<digits> files; then the directories it emptied, the state
//     directory itself last. Anything else is left and reported (Report.Left),
//     and routeletd.lock with it, so a second run still recognises the
//     directory; no link is followed and files go through their directory's
//     descriptor.
//
// A state directory that is a symlink, or that holds no routelet marker
// (routeletd.lock, daemon.json or peer-claims.json in routelet's format,
// ipam/lock, a record), is refused before anything is touched
// (CheckStateDir, ErrNotStateDir).
//
// tunl0 stays: it is the kernel's fallback device for the ipip module.
package cleanup
