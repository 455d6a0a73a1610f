package diagnose

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// The BGP steps (bgp on). In program mode (encapsulation none, no
// encryption) bgp-route and bgp-session replace the overlay's route step
// towards another node's pods; announcing only, the bgp step says so.
const (
	StepBGP        = "bgp"         // announce only: what BGP does here (Info)
	StepBGPRoute   = "bgp-route"   // the far end's block has a learned route via the uplink
	StepBGPSession = "bgp-session" // the session that announces it is established
)

// bgpState returns the running daemon's bgp block, or nil with why it is
// not there: "" when it is (then bgp is non-nil), else one of the
// bgpUnknown values.
func (w *world) bgpState() (*statusapi.BGP, string) {
	switch {
	case w.daemon != nil && w.daemon.BGP != nil:
		return w.daemon.BGP, ""
	case w.daemon != nil && w.daemon.Loop:
		return nil, bgpNoSpeaker
	case w.daemon != nil:
		return nil, bgpNoLoop
	case !w.running:
		return nil, bgpDaemonDown
	}
	return nil, bgpNoAnswer
}

// Why the daemon's bgp block is not there.
const (
	bgpNoSpeaker  = "the running routeletd has no BGP speaker (it runs without bgp)"
	bgpNoLoop     = "the running routeletd has not started its loop yet (not ready), so its BGP speaker does not run"
	bgpDaemonDown = "routeletd is not running: no BGP speaker runs on this node"
	bgpNoAnswer   = "the BGP sessions are the running routeletd's to tell, and its state endpoint did not answer"
)

// bgpAnnounceStep says, announcing only, that BGP routes nothing here:
// the overlay (or WireGuard) carries pod traffic from the node records.
func (w *world) bgpAnnounceStep() Step {
	st := Step{ID: StepBGP, Status: Info}
	why := fmt.Sprintf("encapsulation %s", w.cfg.Mode)
	carrier := "the overlay"
	if w.cfg.Encrypted {
		why, carrier = "encryption wireguard", "WireGuard"
	}
	st.Fact = fmt.Sprintf("bgp on, announcing only (%s): this node announces its blocks %s to its BGP peers; %s routes pod traffic between the nodes from their records, and no route learned from BGP is programmed",
		why, prefixList(w.local), carrier)
	if b, _ := w.bgpState(); b != nil {
		up := 0
		for _, p := range b.Peers {
			if p.State == bgpEstablished {
				up++
			}
		}
		st.Fact += fmt.Sprintf("; sessions: %d of %d established", up, len(b.Peers))
	}
	st.Fix = "for BGP to route pod traffic, run encapsulation none without encryption"
	return st
}

// bgpEstablished is a session's state once it is up.
const bgpEstablished = "established"

// remoteBGP checks, for family v, what this node needs to reach the far
// end e's blocks in program mode: a learned route to each block via the
// uplink (bgp-route), the session that announces them (bgp-session) and
// the MTU on the uplink.
func (w *world) remoteBGP(e End, n peers.NodeInfo, blocks []netip.Prefix, v int) []Step {
	var steps []Step
	uplink := w.bgpUplink(v)
	for _, b := range blocks {
		st := w.bgpRouteStep(e.Node, n, b, v, uplink)
		if st.Status == Pass && e.Kind == KindRemotePod {
			w.shadowed(&st, b, e.Addrs[0], v)
		}
		steps = append(steps, st)
	}
	steps = append(steps, w.bgpSessionStep(e.Node, n, v))
	if f := w.family(v); f.why == "" {
		steps = append(steps, w.pathMTUStep(f, f.parent.Name, v))
	}
	return steps
}

// bgpTable returns the daemon's BGP route table of family v (nil when it
// sent none).
func (w *world) bgpTable(v int) *statusapi.RouteTable {
	if w.daemon == nil {
		return nil
	}
	name := statusapi.TableBGPV4
	if v == 6 {
		name = statusapi.TableBGPV6
	}
	for i := range w.daemon.Tables {
		if w.daemon.Tables[i].Name == name {
			return &w.daemon.Tables[i]
		}
	}
	return nil
}

// bgpUplink is the interface the learned routes go out by: the one the
// daemon's BGP tables name, else the parent of this node's host IPv4
// (else IPv6), as the daemon picks it; "" when none is known.
func (w *world) bgpUplink(v int) string {
	for _, fv := range []int{v, 4, 6} {
		if t := w.bgpTable(fv); t != nil {
			for _, r := range t.Routes {
				if r.Iface != "" {
					return r.Iface
				}
			}
		}
	}
	for _, fv := range []int{4, 6} {
		if f := w.family(fv); f.why == "" {
			return f.parent.Name
		}
	}
	return ""
}

// bgpWanted returns the daemon's desired row for block b (exactly, or a
// learned prefix holding it), or nil.
func (w *world) bgpWanted(b netip.Prefix, v int) *statusapi.Route {
	t := w.bgpTable(v)
	if t == nil {
		return nil
	}
	var best *statusapi.Route
	bestBits := -1
	for i, r := range t.Routes {
		p, err := netip.ParsePrefix(r.CIDR)
		if err != nil || !r.Desired || p.Bits() > b.Bits() || !p.Contains(b.Addr()) {
			continue
		}
		if p.Bits() > bestBits {
			best, bestBits = &t.Routes[i], p.Bits()
		}
	}
	return best
}

// bgpKernelRoute returns the kernel's route to b: exactly b, else the
// most specific route of the BGP protocol holding it (a peer may announce
// a pool rather than the block), or nil.
func (w *world) bgpKernelRoute(kr []Route, b netip.Prefix) *Route {
	if r := findRoute(kr, b); r != nil {
		return r
	}
	var best *Route
	for i, r := range kr {
		if r.Protocol != w.cfg.BGPRouteProtocol || r.Dst.Bits() >= b.Bits() || !r.Dst.Contains(b.Addr()) {
			continue
		}
		if best == nil || r.Dst.Bits() > best.Dst.Bits() {
			best = &kr[i]
		}
	}
	return best
}

// bgpRouteStep checks the route to block b of node in program mode: a
// route learned from BGP, "<b> via <next hop> dev <uplink> proto
// <bgp-route-protocol>" (or one to a prefix holding b); when it is
// missing, the daemon's bgp block says why: a refusal, or the session
// that should have announced it.
func (w *world) bgpRouteStep(node string, n peers.NodeInfo, b netip.Prefix, v int, uplink string) Step {
	st := Step{ID: StepBGPRoute, Family: v, Status: Fail}
	proto := w.cfg.BGPRouteProtocol
	if w.blockUnroutable(&st, node, b, v, fmt.Sprintf("node %s's block %s is refused: routeletd accepts no learned route for it", node, b)) {
		return st
	}
	wantRow := w.bgpWanted(b, v)
	via := "<next hop>"
	if wantRow != nil && wantRow.Via != "" {
		via = wantRow.Via
	}
	wantDesc := fmt.Sprintf("%s via %s dev %s proto %d, learned from BGP", b, via, orNone(uplink), proto)
	if wantRow != nil && wantRow.CIDR != b.String() {
		wantDesc = fmt.Sprintf("%s via %s dev %s proto %d, learned from BGP", wantRow.CIDR, via, orNone(uplink), proto)
	}
	kr, err := w.routes(v)
	if err != nil {
		st.Fact, st.Problem = err.Error(), "cannot read the routing table"
		return st
	}
	got := w.bgpKernelRoute(kr, b)
	if got == nil {
		st.Fact = fmt.Sprintf("no route %s (want %s)", b, wantDesc) + w.daemonSays("", b.String())
		st.Problem, st.Fix = w.bgpMissing(node, n, b, v, wantRow)
		return st
	}
	st.Fact = fmt.Sprintf("%s (want %s)", describeRoute(*got), wantDesc)
	switch {
	case got.Protocol == w.cfg.RouteProtocol && got.Protocol != proto:
		st.Problem = fmt.Sprintf("route %s to node %s is routelet's own (proto %d), not one learned from BGP: with bgp on, encapsulation none and no encryption the routes to other nodes' blocks are BGP's", got.Dst, node, got.Protocol)
		st.Fix = w.daemonHint("removes it (in this mode the overlay routes no peer) and then programs the learned one")
	case got.Protocol != proto:
		st.Problem = fmt.Sprintf("route %s to node %s is not a learned BGP route (proto %d, want %d)", got.Dst, node, got.Protocol, proto)
		st.Fix = fmt.Sprintf("that route is not routelet's (proto %d) and routelet never replaces it: ip route del %s", got.Protocol, got.Dst)
	case uplink != "" && got.Iface != uplink:
		st.Problem = fmt.Sprintf("route %s of the BGP protocol %d goes out dev %s, not the uplink %s: routeletd's learned routes are on the uplink only, so this one is not routeletd's", got.Dst, proto, got.Iface, uplink)
		st.Fix = fmt.Sprintf("another routing daemon installed it (FRR's routes carry proto 186 too): stop it from installing the route, or run routeletd with another bgp-route-protocol; then ip route del %s", got.Dst)
	case got.Target() != routes.TypeGateway || !got.Gateway.IsValid():
		st.Problem = fmt.Sprintf("route %s to node %s has no next hop: routeletd writes learned routes via their next hop", got.Dst, node)
		st.Fix = w.daemonHint("corrects it")
	case wantRow != nil && wantRow.Via != "" && got.Gateway.String() != wantRow.Via:
		st.Problem = fmt.Sprintf("route %s goes via %s, routeletd wants it via %s (the next hop announced, or the gateway to it)", got.Dst, got.Gateway, wantRow.Via)
		st.Fix = w.daemonHint("corrects it")
	case wantRow == nil && w.daemon != nil && w.daemon.BGP != nil && w.bgpTable(v) != nil:
		// The daemon answered and wants no such route: an earlier run's,
		// kept until the sessions converge (graceful restart), else stale.
		if !w.daemon.BGP.Converged {
			st.Status = Pass
			st.Fact = describeRoute(*got) + " (BGP, kept from an earlier run until the sessions converge)"
			return st
		}
		st.Problem = fmt.Sprintf("route %s is not one routeletd wants now: no accepted learned route is for it (no peer announces it any more, or what they announce is refused: routeletd status, bgp block)", got.Dst)
		st.Fix = w.daemonHint("removes it")
	default:
		st.Status = Pass
		st.Fact = describeRoute(*got) + " (BGP)"
	}
	return st
}

// bgpMissing says why no learned route to b is in the kernel, and what
// fixes it: the daemon wants it (it re-adds it), it refused what it
// learned (the reason), or no session announced it (which one should
// have, in which state).
func (w *world) bgpMissing(node string, n peers.NodeInfo, b netip.Prefix, v int, want *statusapi.Route) (problem, fix string) {
	missing := fmt.Sprintf("route %s to node %s is missing", b, node)
	bs, why := w.bgpState()
	switch {
	case bs == nil && why == bgpDaemonDown:
		return missing + ": " + why + ", and no earlier run's learned route is left", w.daemonHint("learns the route from its peers again")
	case bs == nil:
		return missing + ": " + why, "see routeletd status (its bgp block: the sessions and the refused routes); " + w.daemonHint("programs the route once a peer announces it")
	case !bs.Programmed:
		return missing + ": the running routeletd only announces (its bgp block says programmed false), it programs no learned route",
			"give diagnose the daemon's configuration (--config, flags or ROUTELET_* variables)"
	case want != nil:
		return missing + fmt.Sprintf(": routeletd wants it (via %s) but the kernel does not hold it", orNone(want.Via)), w.daemonHint("re-adds it")
	}
	for _, r := range bs.Refused {
		p, err := netip.ParsePrefix(r.Prefix)
		if err != nil || !p.Masked().Overlaps(b) {
			continue
		}
		from := "peer " + r.Peer
		if r.NextHop != "" {
			from += ", next hop " + r.NextHop
		}
		detail := ""
		if r.Detail != "" {
			detail = ": " + r.Detail
		}
		return fmt.Sprintf("%s: %s was learned (%s) but refused, %s%s", missing, r.Prefix, from, r.Reason, detail), bgpRefusalFix(r.Reason, node)
	}
	ss, mesh := w.bgpSessions(bs, node, n, v)
	if len(ss) == 0 {
		return fmt.Sprintf("%s: no BGP session could have announced it: none to node %s (its record has no BGP AS: it runs without bgp, or bgp-node-mesh is off) and no IPv%d peer is configured", missing, node, v),
			fmt.Sprintf("run routeletd on node %s with bgp on (and bgp-node-mesh), or configure a peer that announces it (bgp-peer, or this node's per-node peers)", node)
	}
	var down []statusapi.BGPPeer
	received := 0
	for _, s := range ss {
		if s.State != bgpEstablished {
			down = append(down, s)
		}
		received += s.Received
	}
	if mesh && len(down) > 0 || !mesh && len(down) == len(ss) {
		return fmt.Sprintf("%s: the session that should announce it is not established: %s", missing, describeSession(down[0])), bgpSessionFix(down[0], node)
	}
	if mesh {
		return fmt.Sprintf("%s: the session to node %s is established (%d prefixes received) but it did not announce %s", missing, node, received, b),
			fmt.Sprintf("check that routeletd on node %s runs with bgp and announces %s (its routeletd status, bgp announced)", node, b)
	}
	return fmt.Sprintf("%s: no peer announced it (%d prefixes received from %d sessions)", missing, received, len(ss)),
		fmt.Sprintf("check that the peers have a route to %s and advertise it to this node (a route reflector or router: that node %s's session to it is established)", b, node)
}

// bgpSessions returns the sessions that should announce node's blocks of
// family v: the mesh session to it (mesh true), else every other session
// of the family (the routers and route reflectors).
func (w *world) bgpSessions(bs *statusapi.BGP, node string, n peers.NodeInfo, v int) (out []statusapi.BGPPeer, mesh bool) {
	host := n.Endpoint(v).HostIP
	var others []statusapi.BGPPeer
	for _, p := range bs.Peers {
		a, err := netip.ParseAddr(p.Address)
		if err != nil || familyOf(a) != v {
			continue
		}
		switch {
		case p.Description == "mesh "+node || host.IsValid() && a.Unmap() == host:
			out = append(out, p)
		case !strings.HasPrefix(p.Description, "mesh "):
			others = append(others, p)
		}
	}
	if len(out) > 0 {
		return out, true
	}
	return others, false
}

// describeSession renders a session for a fact.
func describeSession(p statusapi.BGPPeer) string {
	s := fmt.Sprintf("%s (%s, AS %d", p.Address, orNone(p.Description), p.ASN)
	if p.RouteReflector {
		s += ", route reflector"
	}
	s += "): " + p.State
	if !p.Since.IsZero() {
		s += " since " + p.Since.UTC().Format(time.RFC3339)
	}
	if p.State == bgpEstablished {
		s += fmt.Sprintf(", %d received, %d accepted, %d advertised", p.Received, p.Accepted, p.Advertised)
		if !p.EndOfRIB {
			s += ", no End-of-RIB yet"
		}
	}
	if p.LastError != "" {
		s += ", last error: " + p.LastError
	}
	return s
}

// bgpSessionStep checks, for family v, that the session announcing
// node's blocks is established: the mesh session to it, else at least
// one of the configured peers of the family.
func (w *world) bgpSessionStep(node string, n peers.NodeInfo, v int) Step {
	st := Step{ID: StepBGPSession, Family: v, Status: Fail}
	bs, why := w.bgpState()
	switch why {
	case bgpDaemonDown:
		st.Fact = why
		st.Problem = "no BGP session from this node: the learned routes stay in the kernel as they are, and the peers keep this node's blocks for bgp-restart-time at most (graceful restart), then withdraw them"
		st.Fix = w.daemonHint("opens the sessions again")
		return st
	case bgpNoAnswer, bgpNoLoop:
		st.Status, st.Fact = Info, why
		st.Fix = "see routeletd status (its bgp block) and run diagnose again"
		return st
	case bgpNoSpeaker:
		st.Fact = why
		st.Problem = "no BGP session from this node: nothing learns the routes to the other nodes' blocks"
		st.Fix = "run routeletd with bgp on, or give diagnose the daemon's configuration"
		return st
	}
	ss, mesh := w.bgpSessions(bs, node, n, v)
	if len(ss) == 0 {
		st.Fact = fmt.Sprintf("no IPv%d session to node %s nor to any configured peer (%d sessions)", v, node, len(bs.Peers))
		st.Problem = fmt.Sprintf("no BGP session announces node %s's blocks to this node", node)
		st.Fix = fmt.Sprintf("node %s publishes a BGP AS (bgpAS) in its record when its routeletd runs with bgp on; with bgp-node-mesh off, configure a peer (bgp-peer, or this node's per-node peers) that announces them", node)
		return st
	}
	var facts []string
	var down []statusapi.BGPPeer
	for _, s := range ss {
		facts = append(facts, describeSession(s))
		if s.State != bgpEstablished {
			down = append(down, s)
		}
	}
	st.Fact = strings.Join(facts, "; ")
	if !mesh {
		st.Fact = fmt.Sprintf("no mesh session to node %s; the peers: %s", node, st.Fact)
	}
	switch {
	case len(down) == 0, !mesh && len(down) < len(ss):
		st.Status = Pass
	default:
		st.Problem = fmt.Sprintf("the BGP session %s is %s: routes to node %s's blocks are not learned from it", down[0].Address, down[0].State, node)
		if !mesh {
			st.Problem = fmt.Sprintf("no BGP session of IPv%d is established: routes to node %s's blocks are learned from none", v, node)
		}
		st.Fix = bgpSessionFix(down[0], node)
	}
	return st
}

// bgpSessionFix says what brings a session in state p.State up.
func bgpSessionFix(p statusapi.BGPPeer, node string) string {
	port := p.Port
	if port == 0 {
		port = 179
	}
	who := "the peer " + p.Address
	if strings.HasPrefix(p.Description, "mesh ") {
		who = fmt.Sprintf("routeletd on node %s (bgp on)", node)
	}
	switch p.State {
	case "not configured":
		return "the speaker does not hold the session yet: the next apply sets it; if it stays so, the error in routeletd status's bgp block says why"
	case "idle":
		return "the speaker is not connecting: it waits after an error before it tries again (the last error says which; a peer that sent more than bgp-max-prefixes prefixes is closed so); see routeletd's log"
	case "connect", "active":
		return fmt.Sprintf("no BGP connection: check that %s listens on TCP port %d at %s, that nothing between the two drops TCP port %d, and that both use the same TCP MD5 password (with a wrong one the peer answers nothing at all and the session stays in connect or active)",
			who, port, p.Address, port)
	case "opensent", "openconfirm":
		return "the peer answers but the session is not agreed: check that each side expects the other's AS (bgp-as, the record's bgpAS, a bgp-peer's as=) and that the router IDs differ (bgp-router-id); the last error names the peer's notification"
	}
	return "see the last error and routeletd's log"
}

// bgpRefusalFix says what to do about a learned route refused for reason
// (statusapi.BGPRefused*).
func bgpRefusalFix(reason, node string) string {
	switch reason {
	case statusapi.BGPRefusedOutsidePools:
		return "routeletd programs only prefixes inside bgp-pool (default: the node records' blocks): add the pool, or have the peer announce pod blocks only"
	case statusapi.BGPRefusedOwnBlock:
		return "a peer announces a prefix overlapping this node's block: two nodes' pod-cidr overlap, or the peer sends this node's route back; fix the pod-cidr or the peer's export"
	case statusapi.BGPRefusedDefault:
		return "a default route learned from BGP is never programmed: have the peer announce the pod blocks"
	case statusapi.BGPRefusedUnderlay:
		return "the prefix holds a node's host IP or a local address: programming it would take the underlay away; the peer must not announce it"
	case statusapi.BGPRefusedNextHop:
		return "the next hop is not usable (none, of the other family, not unicast, this node's, or inside the pod address space): have the peer set a next hop on the underlay (next-hop-self)"
	case statusapi.BGPRefusedNotOwner:
		return fmt.Sprintf("node %s's mesh session announced a prefix outside the blocks of its record: the record and what it announces disagree; run routeletd there with the blocks it publishes", node)
	case statusapi.BGPRefusedNextHopUnreachable:
		return "this node reaches the next hop through another interface than the uplink, or not at all: fix the underlay's routing to it, or have the peer set a next hop on the uplink's subnet"
	}
	return "see routeletd status (its bgp block) and routeletd's log"
}
