// Command routelet is the routelet CNI plugin. It gives each attachment a
// host-side veth named after the pod (cali… by default), one IPv4 and/or IPv6
// address from node-local block IPAM (or from a delegated IPAM plugin),
// configured as /32 and /128 with 169.254.1.1 and fe80::ecee:eeff:feee:eeee as
// gateways, a workload record in the shared state directory for routeletd,
// and a host route per address (protocol 80, or the route protocol routeletd
// publishes in daemon.json; CHECK expects the same one).
//
// It implements ADD, DEL, CHECK, GC, STATUS and VERSION for CNI spec versions
// 0.3.1, 0.4.0, 1.0.0 and 1.1.0 through the skel package. Errors carry the
// spec's codes (4 bad environment, 6 undecodable config, 7 bad config, 11 try
// again later, 50 not ready) and name the offending value.
//
// Kernel work lives in pkg/podnet; this package decides what to do and in
// which order, and undoes it on failure.
package main
