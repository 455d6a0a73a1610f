package bgp

import (
	"net/netip"
	"time"
)

// Peer is one BGP session as wanted.
type Peer struct {
	Address        netip.Addr
	ASN            uint32
	Port           uint16 // 0 is 179
	Password       string // TCP MD5, "" none
	RouteReflector bool   // the peer is a route reflector (status only)
	MaxPrefixes    int    // per family; 0 is no limit
	Description    string // where the session comes from, for status
}

// Route is the best path to one prefix learned from a peer.
type Route struct {
	Prefix  netip.Prefix
	NextHop netip.Addr
	Peer    netip.Addr // the session it came from
	ASPath  []uint32
	Stale   bool // kept while its peer restarts (graceful restart)
}

// PeerStatus is one session's state.
type PeerStatus struct {
	Peer
	State      string // idle, connect, active, opensent, openconfirm, established
	Since      time.Time
	Received   int    // prefixes received
	Accepted   int    // prefixes in the best-path table from this peer
	Advertised int    // prefixes sent
	EndOfRIB   bool   // End-of-RIB received since the session came up
	LastError  string // the last notification or connection error, "" none
}
