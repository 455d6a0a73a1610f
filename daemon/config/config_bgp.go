package config

import (
	"net/netip"
	"time"

	"github.com/routelet/routelet/pkg/peers"
)

// BGP is the BGP speaker's configuration (the bgp-* keys).
type BGP struct {
	Enabled  bool       // bgp: run the speaker
	ASN      uint32     // bgp-as: this node's AS, published in its record
	RouterID netip.Addr // bgp-router-id: invalid means the node's host IPv4
	NodeMesh bool       // bgp-node-mesh: a session to every node record with an AS
	// Peers are the bgp-peer sessions (PasswordFile set, never read here).
	Peers []peers.BGPPeer
	// Pools are the prefixes learned routes may fall in (bgp-pool); empty
	// means every node record's blocks, this node's included.
	Pools           []netip.Prefix
	ListenPort      int           // bgp-listen-port: 0 does not listen
	GracefulRestart bool          // bgp-graceful-restart
	RestartTime     time.Duration // bgp-restart-time, advertised to the peers
	RouteProtocol   int           // bgp-route-protocol: the learned routes' kernel protocol
	MaxPrefixes     int           // bgp-max-prefixes: per peer and family
}
