// Package wireguard keeps the node's WireGuard device: its private key in
// the state directory, the device itself (the kernel's WireGuard where
// there is one, else the userspace implementation in a datapath process
// of its own), its listen port, MTU, addresses and peers.
package wireguard
