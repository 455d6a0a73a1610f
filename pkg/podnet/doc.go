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
// Ownership: podnet only deletes links it can prove it made: a veth whose name
// the caller derived from the attachment (see VethName). Host routes carry
// RouteProtocol so other tools can tell them apart.
package podnet
