// Package bgpmgr connects the BGP speaker (pkg/bgp) to routeletd's apply
// loop when bgp is on: it is the agent.Manager that keeps the speaker's
// sessions and announced prefixes in line with the node records and the
// configuration, and, with encapsulation none and no encryption, routes
// the pod blocks the peers announce.
//
// Sessions (OnNodes, memory only): one to every global peer (bgp-peer),
// one to every per-node peer of this node (the datastore's NodeBGPPeers,
// read again at every OnNodes; a read error keeps the last ones and shows
// in the status), and, with the node mesh, one per family to every node
// record with an AS, to its host IP of each family this node has too
// (Description "mesh <node>"). For the same address a global peer wins
// over a per-node one, and both over the mesh. Apply hands the speaker
// the sessions when they changed and announces the local blocks once,
// with the host IPs as next hops.
//
// Learned routes (Config.Program): read from the speaker when its
// OnChange hint (Changes) or the check asks, every one is checked before
// it may reach the kernel, and a refused one is counted by reason
// (routelet_bgp_refused_total, the status): default (a default route),
// outside-pools (not inside Config.Pools, or when there are none a known
// node block, this node's included), own-block (overlaps a local block),
// underlay (holds a node's host IP or a local address), next-hop (none,
// of the other family, not unicast, this node's, or inside the pod
// address space), not-owner (from a mesh session, not inside that node's
// own blocks), next-hop-unreachable (the kernel reaches the next hop
// through another interface or not at all). The speaker hands over every
// path to a prefix, best first, and the first that passes is the one
// programmed: a path BGP prefers cannot hide one that passes. An
// accepted route becomes
// "<prefix> via <next hop> dev <uplink> proto <bgp-route-protocol>"; a
// next hop off the uplink's connected subnets goes via the gateway of the
// kernel's route to it (Resolve, asked once per route check period). One
// routes.RouteTable per family owns only that protocol's routes on the
// uplink, so it never touches the overlay's or an operator's.
//
// Announcing only (an overlay mode or encryption: the overlay or
// WireGuard routes pod traffic), nothing learned is programmed, and the
// tables remove what an earlier run in the other mode left.
//
// Graceful restart: at New the kernel's routes of the protocol on the
// uplink (an earlier run's) are read and kept as wanted until the
// sessions converge — every session set on the speaker established and
// its End-of-RIB received, or the restart time since New passed — so a
// restarted daemon removes nothing its peers still announce; from then on
// only learned routes. Close closes the speaker without notifying its
// peers (bgp.Speaker.Close), so they keep this node's routes while it
// restarts; the kernel's routes stay for the next run.
//
// As an agent.Checker it reads the speaker again each check period while
// not converged or a session is not established, and every route check
// period anyway, when it also reads the uplink's routes back and resolves
// the next hops again. Interest and Events are its part of
// daemon/netwatch: a learned route deleted behind its back is put back by
// the Apply the event asks for. Snapshot is its part of the state
// endpoint (the bgp block and the bgp-ipv4 and bgp-ipv6 tables), Register
// its metrics (routelet_bgp_session_up, routelet_bgp_prefixes_received,
// routelet_bgp_prefixes_advertised, each by peer address and read from the
// speaker when scraped, and routelet_bgp_refused_total by reason).
package bgpmgr
