// Package bgp is routeletd's BGP speaker: the GoBGP library
// (github.com/osrg/gobgp/v3) run in-process, announcing this node's pod
// blocks and handing back the routes its peers announce. It is the only
// package that uses GoBGP; the rest of routelet sees Peer, Route and
// PeerStatus.
//
// # The speaker
//
// New starts a GoBGP server with the node's AS and router ID, listening
// on Config.ListenPort on every address of both families (0: it only
// connects out). SetPeers and SetAnnounced take the whole wanted state and
// apply the difference: a peer is keyed by its address, and one whose AS,
// port, password or prefix limit changed is deleted (Cease) and added
// again, while Description and RouteReflector only show in status.
// Sessions start with the first SetAnnounced, so that their first updates
// and End-of-RIB carry everything the node announces (see graceful
// restart). A peer's address decides its one address family: an IPv4 address makes an
// ipv4-unicast session, an IPv6 address an ipv6-unicast one. IPv4 prefixes
// are announced with NEXT_HOP nextHop4, IPv6 ones in MP_REACH_NLRI with
// nextHop6, origin IGP. An eBGP peer gets the next hop as given (GoBGP
// keeps a local path's next hop), and outgoing eBGP packets have TTL 1: a
// peer is expected on a connected subnet.
//
// The speaker announces only what SetAnnounced gave it: a global export
// policy accepts GoBGP's local paths and rejects every other, so a route
// learned from one peer is never passed on to another (no transit, no
// reflection, for iBGP and eBGP alike). Learned is every path learned from
// the peers, best first for each prefix (so a caller that refuses the
// best takes the next); our own announcements are never in it.
// Peers is each configured session's state, counts, whether End-of-RIB
// came, and its last error. OnChange is called (from a goroutine of the
// speaker, never GoBGP's own, so a slow callback holds nothing up) after
// any message from a session: state changes and updates. Hints coalesce;
// the callback reads Learned and Peers for the state.
//
// # Defaults and timers
//
// ConnectRetry (DefaultConnectRetry, 5s) is the wait between connection
// attempts; GoBGP makes its first one 1–2 s after a peer is added, and
// after a session fails it stays idle for 5 s before trying again.
// HoldTime (DefaultHoldTime, 90s) is proposed in OPEN, keepalives go
// every third of it. Both are whole seconds. RestartTime
// (DefaultRestartTime, 120s) is what graceful restart advertises.
//
// # Graceful restart
//
// With Config.GracefulRestart every session advertises the capability
// (RFC 4724) with RestartTime and, for its family, the Forwarding State
// bit: the kernel keeps the routes routeletd programmed while the speaker
// restarts. Each Speaker starts as a restarting one (the Restart State
// bit, and GoBGP's per-peer "local restarting"), so after a crash or Close
// the peers keep our routes, stale, until the new Speaker's session is up
// and its End-of-RIB arrived; a peer that had no session before ignores
// the bits. GoBGP would hold our own announcements back until every peer's
// End-of-RIB; the selection deferral is set to one second, since nothing
// we announce depends on what we learn.
//
// Stop ends every session with a Cease NOTIFICATION: the peers drop our
// routes at once (BGP turned off, cleanup). Close ends the speaker as a
// crash would: GoBGP has no call that drops a session silently (StopBgp
// and DeletePeer send a Cease), so Close first finds the process's TCP
// sockets that are sessions to a configured peer (in /proc/self/fd:
// connected to the peer's address, to its port or from our listen port)
// and shuts them down in both directions; the peer sees a FIN and no
// NOTIFICATION and starts its graceful restart, and the Cease that StopBgp
// then writes fails on the shut socket. Both end every goroutine of the
// speaker and of GoBGP (its main loop never returns by itself; the speaker
// ends it from GoBGP's timing hook after the last operation).
//
// # Failure modes
//
//   - A peer that does not answer: the session cycles through active,
//     LastError "connect: … i/o timeout". A TCP MD5 mismatch (or a
//     password on one side only) looks exactly so: the kernel drops
//     segments whose signature does not match without a word, so the
//     status can only say that no answer came and that a mismatch is one
//     reason.
//   - TCP MD5 needs plain TCP listeners. Go listens with MPTCP by default
//     (since Go 1.24), where setting TCP_MD5SIG fails with ENOPROTOOPT; the
//     module's go.mod sets `godebug multipathtcp=0` for routeletd and the
//     tests. A program built otherwise shows "TCP MD5 password not set on
//     the listener" in LastError.
//   - Something other than BGP on the peer's port: the session fails in
//     opensent ("read-failed in opensent" when the other side closes or
//     sends a length GoBGP waits for in vain, "malformed BGP Header …"
//     with a NOTIFICATION otherwise), and GoBGP tries again later.
//   - A connection from an address that is no configured peer is closed
//     unread.
//   - More prefixes from a peer than its MaxPrefixes (per family): GoBGP
//     sends a Cease (maximum number of prefixes reached) and closes the
//     session; LastError says so, and the session comes back 5 s later, to
//     be closed again while the peer sends too many.
//   - A NOTIFICATION from the peer shows as "notification-received code …
//     subcode …"; connection errors after it keep it in LastError.
//   - GoBGP v3.37.0 crashes the process when a session's peer sends a
//     message of an unknown type (its parser returns no message and the
//     error handling dereferences it). Only a configured peer can (with TCP
//     MD5, only one holding the password); graceful restart keeps the
//     routes while the daemon restarts.
//
// GoBGP's log goes to Config.Logger: its debug and info messages
// (connection attempts, state changes, updates) at debug, its warnings and
// errors at warn; its Fatal and Panic only log.
package bgp
