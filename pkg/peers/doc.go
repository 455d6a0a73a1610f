// Package peers is the trust boundary for node records: every datastore
// (the file datastore's nodes/ directory, the etcd datastore's keys, the
// Kubernetes datastore's Nodes) hands its records to one Validator as
// Record values, and
// only the NodeInfo values that come out reach the overlay and allowlist
// managers. Nothing downstream parses a peer's strings again.
//
// Validation has two steps:
//
//   - Parse checks one record on its own: the name, each address of the
//     right family and not special (loopback, link-local, multicast,
//     unspecified), each VTEP MAC a 6-byte unicast MAC, each block a masked
//     prefix that can be a pod block at all (nodespace.CheckBlock: never /0,
//     loopback, link-local, multicast), the WireGuard public key 32 bytes
//     of base64 and not all zero, the WireGuard port 1–65535 (absent: the
//     default 51820; refused: the node gets no WireGuard), the BGP AS
//     number 1–4294967294 (absent: the node speaks no BGP; refused: the
//     node gets no BGP). An AS number is no claim: nodes may share one.
//   - Resolve checks the records against this node and against each other.
//     A record carrying one of our host IPs, our VTEP MAC, our tunnel
//     address or our WireGuard public key is refused whole. A block overlapping the node's own
//     addresses or connected subnets (nodespace.Host), our own blocks, or
//     any peer's host IP is refused. Conflicts between peers (two claims of
//     overlapping blocks, a block covering a host IP, one host IP, VTEP
//     MAC, tunnel address or WireGuard key claimed twice) are decided for the established
//     claim: the value this daemon saw first keeps it, the newcomer's value
//     is refused.
//
// "Seen first" is per value (node, field, value), recorded in memory and,
// through the Validator's ledger file, across daemon restarts, so neither
// the name that sorts first nor a time stamp a record carries can take an
// established claim. Values first seen in the same pass (all records
// already present at the very first start) are ordered by the record's
// Updated time, then by node name, and that order is then recorded. A value
// that leaves the records gives its space up at once, but keeps its
// first-seen time for a while (DefaultRetain), so a record that was
// briefly unreadable (rewritten in place) comes back established.
//
// A refused value is dropped from the NodeInfo; the rest of the record and
// every other record keep working. Each refusal is logged once (warn) and
// exported as routelet_peer_values_refused{node,field,value} while it
// lasts.
package peers
