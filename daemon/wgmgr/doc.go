// Package wgmgr connects pkg/wireguard to routeletd's apply loop when
// encryption is wireguard: it is the agent.Manager that keeps the node's
// WireGuard device (wireguard.cali) configured with every peer's public
// key, endpoint and allowed IPs, and that routes every peer's pod blocks
// into that device.
//
// With encryption on, the WireGuard device replaces the overlay for pod
// traffic in every encapsulation mode: routeletd hands the overlay manager
// no peers, so it programs no peer routes, ARP or FDB entries (and removes
// those an earlier run left), and this manager routes each peer's blocks
// "dev wireguard.cali scope link proto <route-protocol>", both IP
// families, whether the peer has a WireGuard key or not. A peer without a
// (valid) key gets no WireGuard peer entry, so the device drops what is
// sent to its pods: nothing leaves in plaintext.
//
// OnNodes (memory only) turns the validated peers (pkg/peers) into
// wireguard.Peer values (key, endpoint = host IPv4 else IPv6 at the
// peer's port, allowed IPs = its blocks and tunnel addresses) for the
// device and into route targets for one routes.RouteTable per family,
// which owns only the route protocol's routes on the device. Apply sets a
// rotated key, applies the device, then the routes. As an agent.Checker
// it has the periodic device check; as an agent.Blocker it keeps the
// daemon not ready while the device cannot work (Device.NotReady); as an
// agent.SelfPublisher it puts the node's public key into the published
// record again after a rotation; Interest and Events are its part of
// daemon/netwatch (link, address and route events of the device), and
// Snapshot its part of the state endpoint.
//
// The private key lives in <stateDir>/wireguard/private.key
// (wireguard.LoadOrCreateKey at start); Watch watches that directory, so
// `routeletd wireguard rotate-key` (wireguard.RotateKey) takes effect at
// once: the next Apply sets the new key on the device and the record with
// the new public key is published after that pass.
//
// See docs/daemon.md, "WireGuard".
package wgmgr
