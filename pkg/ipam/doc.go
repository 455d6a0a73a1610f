// Package ipam is routelet's node-local block IPAM, used in-process by the CNI
// plugin. Addresses come from the node's blocks (daemon.json or the conflist's
// ipam.blocks); allocations are keyed by (containerID, ifname) and survive a
// crash of the plugin at any point without ever handing one address to two
// attachments.
package ipam
