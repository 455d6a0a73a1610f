// Package firewall renders routelet's iptables chains from a Config and keeps
// them, and the jumps to them, in place through coreos/go-iptables.
//
// Four chains, per IP family (iptables and ip6tables):
//
//   - ROUTELET-INPUT (filter, jumped to from INPUT): accept unicast VXLAN
//     (UDP to the configured port) from the peers set (and not from a pod
//     interface) and drop all other VXLAN this node would receive,
//     broadcast and multicast included; the same for IPIP (IPv4 protocol
//     4) and, with encryption, for WireGuard (UDP to its port, from the
//     WireGuard peers set). Rules exist only for the enabled
//     encapsulations and encryption.
//   - ROUTELET-FORWARD (filter, from FORWARD): accept traffic from and to
//     pod interfaces (cali+) and the enabled overlay devices, so pods are
//     forwarded even when the FORWARD policy is DROP. Only while FORWARD
//     can drop ([Chain.OnlyWhileHookCanDrop]: a policy other than ACCEPT,
//     or any rule but the jump to it, as Docker, ufw or kube-proxy add):
//     an accept cannot pierce a drop anywhere else, and with iptables-nft
//     the FORWARD base chain its jump needs costs every forwarded packet.
//     With encryption (WireGuard) it is kept whatever FORWARD holds: its
//     first rule jumps to ROUTELET-ENCRYPT. Otherwise the chain and its jump are removed like a chain the Config
//     leaves out, and with nf_tables the FORWARD base chain that removal
//     left empty with policy ACCEPT is deleted too (under the generation
//     guard, so a rule or policy set meanwhile is never lost). Each Check
//     decides again: after something adds a drop to FORWARD, pods'
//     forwarded traffic is dropped until the next Check installs the
//     chain (at most the allowlist check period, 1 s by default).
//   - ROUTELET-ENCRYPT (filter, from OUTPUT and from ROUTELET-FORWARD):
//     only with encryption, the encryption guard: drop every packet to a
//     pod CIDR (the pools set) whose output interface is not the
//     WireGuard device, a pod interface or loopback. While the WireGuard
//     device is missing (its datapath died, the link was deleted, not
//     made yet) the routes into it are gone and pod traffic to other
//     nodes would follow the default route onto the underlay in
//     plaintext; the guard drops and counts it instead.
//   - ROUTELET-POSTROUTING (nat, from POSTROUTING): only with NAT outgoing,
//     masquerade traffic from the NAT pools set to destinations outside
//     every pool; traffic leaving through an overlay device is never
//     masqueraded. Without NAT outgoing the chain and its jump are kept
//     absent and the nat table is never read or created ([Table.HasTable]
//     says whether there is one to clean up): a nat table alone switches
//     on conntrack and the NAT hooks for every packet.
//
// A [Chains] holds the desired Config in memory; [Chains.Apply] brings the
// kernel in line and [Chains.Check] re-reads each chain and repairs drift.
//
// The pod source check is not here: it sits on each pod veth's ingress hook
// (pkg/podguard). ROUTELET-PREROUTING (raw), where earlier versions kept
// it, is a known chain that is never rendered: a check removes it and its
// jump where found (its table read only when HasTable finds one), and with
// nf_tables a raw table that leaves empty.
//
// Reads are by table: one `iptables -t <table> -S` per table (filter and,
// with NAT outgoing, nat) lists routelet's chains and the built-in
// chains that jump to them, so a check costs one exec per table and
// family, not one per chain ([IPTables] adds that
// whole-table read to the go-iptables handle). With iptables-nft a check
// first reads the nf_tables ruleset generation over netlink and reads no
// table at all while it is unchanged since the last clean check: every
// change to any rule, by anyone, changes it.
//
// A chain whose rules differ is replaced as a whole — the new rules
// appended, then the old ones deleted from the top — never edited rule by
// rule and never left empty. Each jump sits first in its built-in chain,
// exactly once.
//
// Ownership: only the five ROUTELET-* chains (the four above and the old
// ROUTELET-PREROUTING) are ever flushed or deleted;
// in the built-in chains only rules that are exactly a jump to one of them
// are inserted or removed; a built-in chain itself (nf_tables FORWARD) is
// deleted only when the ruleset, at the generation read just before, shows
// it empty with policy ACCEPT.
package firewall
