// Package multinode holds routelet's privileged multi-node end-to-end tests:
// three "node" network namespaces on an underlay — nodes a and b on one
// subnet (a bridge in a router namespace), node c behind that router on
// another subnet — each running the real routeletd with the file datastore,
// node records copied between their nodes/ directories as an operator would,
// and two pods per node attached through the real plugin with libcni. Each
// encapsulation mode is checked the way a user would: which pods reach which,
// and exactly which routes, ARP and FDB entries each node holds. With
// --encryption=wireguard each routeletd runs with a /var/run/wireguard of
// its own (cluster.Options.PrivateWireGuardRun) and a capture on a node's
// underlay (netnstest.StartCapture) shows what leaves it. With --bgp and
// --encapsulation none, BIRD 2 in the router namespace (internal/birdtest)
// is the fabric's BGP router or route reflector: pods on different
// subnets reach each other only through the routes BGP gave it and the
// nodes.
//
// The tests skip when not run as root; each builds and removes its own
// namespaces and daemons and never touches the machine's own network.
package multinode
