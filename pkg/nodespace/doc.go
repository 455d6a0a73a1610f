// Package nodespace holds the checks that keep what routelet is told —
// operator configuration, conflists, workload and node records — away from
// address space and links routelet does not own.
//
// Two layers:
//
//   - CheckBlock and SpecialRange are pure: they refuse prefixes that can
//     never be pod blocks on any node (/0, loopback, link-local — which holds
//     the pod gateway 169.254.1.1 —, multicast, unspecified, blocks too small
//     for one pod once IPAM's reserved addresses are taken out).
//   - Host is a snapshot of one network namespace (its addresses with their
//     connected subnets, its non-routelet connected routes, its links and
//     its uplinks). Host.CheckBlock adds "overlaps the node's own address
//     space"; Host.CheckInterfacePrefix refuses an interface prefix that
//     names an existing link routelet did not create or the uplink.
//
// ReadHost builds a Host from the kernel by netlink: with a nil handle (as
// the plugin and the daemon call it) through ReadHostAt, one raw socket
// that decodes only the fields the checks use. Every check
// returns an error that names the offending value and what it collides
// with.
package nodespace
