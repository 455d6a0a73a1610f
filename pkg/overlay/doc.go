// Package overlay keeps routelet's overlay devices and the state that hangs
// off them in line with the desired state: the VXLAN device (vxlan.calico,
// and vxlan-v6.calico for an IPv6 underlay), the IPIP device (tunl0), the
// permanent ARP/NDP and FDB entries that point every peer's VTEP at its host,
// and the per-peer block routes the daemon hands to the RouteTable.
//
// The managers (VXLAN, IPIP) follow the "desired state, then Apply" shape:
// SetConfig and SetPeers only change memory and mark work dirty; Apply is the
// only path to the kernel; whatever fails stays dirty and is retried by the
// next Apply. Netlink link events (OnLinkUpdate) and the periodic device check
// (QueueCheck) are hints that mark things dirty; they never touch the kernel
// themselves.
//
// Routes are computed, not programmed: Routes turns the peers, the mode and
// this node's underlay into routes.Target values grouped by interface, for the
// daemon's RouteTable. OwnedInterfaces lists the interfaces whose
// routelet-protocol routes the RouteTable must own so that a mode switch
// removes the previous mode's routes.
//
// Ownership: the overlay devices are routelet's by name; every permanent
// neighbour entry and every FDB entry on them is routelet's. Nothing on any
// other device is touched, except reading the parent's addresses and MTU.
//
// Kernel access goes through one narrow seam, Netlink, with a real
// implementation (Kernel: vishvananda/netlink plus the ethtool ioctl for the
// TX checksum) and an in-memory fake (overlaytest.FakeNetlink) with
// per-call failure injection for tests that need no root.
//
// See docs/overlay.md for the operator's view.
package overlay
