// Package nodeid works out a node's underlay identity: the host IPv4/IPv6
// addresses peers use to reach it and the interface that carries them (whose
// MTU sizes the pod MTU). It reads links, addresses and routes through a
// narrow netlink seam of the calling thread's network namespace and never
// changes anything.
package nodeid
