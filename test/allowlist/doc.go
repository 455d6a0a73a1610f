// Package allowlist holds routelet's privileged end-to-end tests of the
// overlay allowlists, forwarding and NAT outgoing: the real routeletd
// binary runs in a fresh "node" network namespace on a simulated underlay
// (a bridge in its own namespace) next to a peer node, an attacker that is
// no node and a host outside the cluster; pods are attached by the real
// plugin through libcni. Peers come from node records written into the
// node's state directory, as the file datastore does.
//
// Every test creates and removes its own namespaces and daemons, runs each
// scenario with both iptables backends (--iptables-backend=nft and legacy),
// and skips when not run as root. Nothing outside the test namespaces is
// touched.
package allowlist
