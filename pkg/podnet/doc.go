// Package podnet does the kernel work for one pod attachment: the veth pair
// (host side in the node network namespace, container side inside the pod's
// namespace), the pod's addresses, gateway routes and gateway neighbours, the
// host-side sysctls, the host routes to the pod and the read-back that the CNI
// CHECK command compares against the previous result.
//
// Every function works on the node side in the calling thread's current network
// namespace and on the pod side through a netlink handle opened inside the
// pod's namespace, so no function switches the namespace of the calling
// thread. Callers that run the node side in a namespace other than their
// process's (tests) must do so on a locked OS thread, for example inside
// ns.NetNS.Do.
//
// Gateways: the pod routes everything via 169.254.1.1 (IPv4) and
// fe80::ecee:eeff:feee:eeee (IPv6), with a permanent neighbour entry for each
// pointing at the host veth's MAC ee:ee:ee:ee:ee:ee. The entry saves the first
// packet's ARP/NDP round trip and does not depend on the node having a route
// to 169.254.1.1 (which proxy ARP needs); proxy_arp and proxy_ndp are set on
// the host side anyway for pods whose neighbour table gets flushed. The host
// side carries fe80::ecee:eeff:feee:eeee/64 without duplicate address
// detection, so it can solicit IPv6 pods from the first packet on.
//
// Ownership: podnet only deletes links it can prove it made: a veth whose name
// the caller derived from the attachment (see VethName). Host routes carry
// the route protocol the caller passes (the node daemon's,
// routes.DefaultProtocol by default) so other tools can tell them apart.
package podnet
