package diagnose

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/wireguard"
)

// The WireGuard steps (encryption wireguard), which replace the overlay's
// towards another node's pods.
const (
	StepWGDevice     = "wireguard-device"      // the device: routelet's, up, MTU, port
	StepWGKey        = "wireguard-key"         // this node's key on the device is the published one
	StepWGPeer       = "wireguard-peer"        // the far node has a key, and the device that peer
	StepWGEndpoint   = "wireguard-endpoint"    // the peer's endpoint is its host IP:port
	StepWGAllowedIPs = "wireguard-allowed-ips" // the peer's allowed IPs cover the far end's block
	StepWGRoute      = "wireguard-route"       // the far end's block is routed into the device
	StepWGHandshake  = "wireguard-handshake"   // a recent handshake with the peer
)

// HandshakeMaxAge is the oldest a latest handshake may be for the session
// to be current: WireGuard rekeys every 2 minutes while traffic flows and
// rejects a session's keys after 3 (REJECT_AFTER_TIME).
const HandshakeMaxAge = 3 * time.Minute

// wgRead is the WireGuard device as read once: its link and what wgctrl
// says.
type wgRead struct {
	link Link
	ok   bool // the link exists
	dev  wireguard.Status
	err  error // the wgctrl read failed
}

// wireGuard reads the device (once per diagnose).
func (w *world) wireGuard() *wgRead {
	if w.wg != nil {
		return w.wg
	}
	r := &wgRead{}
	r.link, r.ok = w.links[w.cfg.WireGuardDevice]
	if r.ok {
		r.dev, r.err = w.k.WireGuard(w.cfg.WireGuardDevice)
	}
	w.wg = r
	return r
}

// remoteWireGuard checks, for family v, what this node needs to send to
// the far end e's blocks through WireGuard: the device, this node's key,
// the far node's peer entry (key, endpoint, allowed IPs), the route into
// the device, the handshake and the allowlist. The steps about the device
// and the peer as a whole come with the first family walked (first says
// so); a step that depends on a failed one is left out.
func (w *world) remoteWireGuard(e End, rec peers.Record, n peers.NodeInfo, blocks []netip.Prefix, v int, first bool) []Step {
	var steps []Step
	r := w.wireGuard()
	usable := r.ok && r.err == nil && (r.link.Kind == "wireguard" || r.link.Kind == "tun")
	if first {
		steps = append(steps, w.wgDeviceStep(r))
		if usable {
			steps = append(steps, w.wgKeyStep(r))
		}
	}
	var have *wireguard.PeerStatus
	peerOK := false
	if usable {
		var ps Step
		ps, have = w.wgPeerStep(r, e.Node, rec, n)
		if first {
			steps = append(steps, ps)
			if have != nil {
				steps = append(steps, w.wgEndpointStep(e.Node, n, have))
			}
		}
		peerOK = have != nil
	}
	if peerOK {
		steps = append(steps, w.wgAllowedStep(e.Node, have, blocks, v))
	}
	for _, b := range blocks {
		st := w.wgRouteStep(e.Node, b, v)
		if st.Status == Pass && e.Kind == KindRemotePod {
			w.shadowed(&st, b, e.Addrs[0], v)
		}
		steps = append(steps, st)
	}
	if first && peerOK {
		steps = append(steps, w.wgHandshakeStep(e.Node, n, have))
	}
	if first {
		if hs := n.HostIPs(); len(hs) > 0 {
			fv := familyOf(hs[0])
			steps = append(steps, w.allowStep(ipset.Name(ipset.WireGuardPeers, setFamily(fv)), "WireGuard", e.Node, hs[0], fv)...)
		}
	}
	return steps
}

// wgDeviceStep checks the device: a link routelet makes (kind wireguard,
// or tun for the userspace datapath) under the configured name, up, of
// the pod MTU (and room for WireGuard's overhead on the parent),
// answering wgctrl with the configured port.
func (w *world) wgDeviceStep(r *wgRead) Step {
	dev := w.cfg.WireGuardDevice
	st := Step{ID: StepWGDevice, Status: Fail}
	if !r.ok {
		st.Fact = fmt.Sprintf("no link %s", dev)
		st.Problem = fmt.Sprintf("the WireGuard device %s is missing: traffic to other nodes' pods has no route out (and is never sent in plaintext)", dev)
		st.Fix = w.daemonHint("re-creates it") + w.daemonSays("", w.cfg.WireGuardDevice)
		return st
	}
	l := r.link
	impl := map[string]string{"wireguard": wireguard.ImplKernel, "tun": wireguard.ImplUserspace}[l.Kind]
	state := "up"
	if !l.Up {
		state = "down"
	}
	st.Fact = fmt.Sprintf("%s: %s", dev, l.Kind)
	if impl != "" {
		st.Fact += " (" + impl + ")"
	}
	st.Fact += fmt.Sprintf(", %s, mtu %d", state, l.MTU)
	if impl == "" {
		st.Problem = fmt.Sprintf("%s is a %s link, not a WireGuard device (kind wireguard, or tun for routelet's userspace datapath): routelet does not use or touch it", dev, l.Kind)
		st.Fix = fmt.Sprintf("remove or rename that link (ip link del %s) or give routeletd another wireguard-device; routeletd then creates its own", dev)
		return st
	}
	if r.err != nil {
		st.Fact += "; " + r.err.Error()
		st.Problem = fmt.Sprintf("%s does not answer wgctrl: its configuration cannot be read or set", dev)
		if impl == wireguard.ImplUserspace {
			st.Problem = fmt.Sprintf("the userspace datapath of %s does not answer on %s/%s.sock", dev, wireguard.SocketDir, dev)
			st.Fix = fmt.Sprintf("see %s/%s/%s.log; %s", w.cfg.StateDir, wireguard.KeyDir, dev, w.daemonHint("restarts the datapath"))
		} else {
			st.Fix = w.daemonHint("re-creates the device")
		}
		return st
	}
	st.Fact += fmt.Sprintf(", port %d, %d peers", r.dev.Port, len(r.dev.Peers))
	var bad []string
	if !l.Up {
		bad = append(bad, "down")
	}
	if pod := w.podMTU(); pod > 0 && l.MTU != pod {
		bad = append(bad, fmt.Sprintf("mtu %d (want the pod MTU %d)", l.MTU, pod))
	}
	if r.dev.Port != w.cfg.WireGuardPort {
		bad = append(bad, fmt.Sprintf("listen port %d (want %d, which this node's record publishes)", r.dev.Port, w.cfg.WireGuardPort))
	}
	if l.MasterIndex != 0 {
		bad = append(bad, "enslaved to another link")
	}
	if f := w.family(4); f.why == "" && w.podMTU() > 0 {
		over := overlay.WireGuardOverhead(false)
		if p := w.links[f.parent.Name]; p.MTU > 0 && w.podMTU()+over > p.MTU {
			bad = append(bad, fmt.Sprintf("pod MTU %d plus %d bytes of WireGuard exceeds %s's %d: set mtu to at most %d (or 0)", w.podMTU(), over, f.parent.Name, p.MTU, p.MTU-over))
		}
	}
	if len(bad) > 0 {
		st.Problem = strings.Join(bad, "; ")
		st.Fix = w.daemonHint("re-asserts the device (and at once on a link event)")
		return st
	}
	st.Status = Pass
	return st
}

// wgKeyStep checks that the device's public key is the one this node's
// record publishes: peers encrypt to that one.
func (w *world) wgKeyStep(r *wgRead) Step {
	st := Step{ID: StepWGKey, Status: Fail}
	pub := ""
	if w.selfRec != nil {
		pub = w.selfRec.WireGuardPublicKey
	}
	st.Fact = fmt.Sprintf("device key %s; this node's record publishes %s", r.dev.PublicKey, orNone(pub))
	switch {
	case pub == "":
		st.Problem = fmt.Sprintf("node %s's record publishes no WireGuard key: peers have no WireGuard peer for it, so nothing from its pods reaches theirs", w.cfg.NodeName)
		st.Fix = w.daemonHint("publishes it")
	case r.dev.PublicKey == (wgtypes.Key{}):
		st.Problem = "the device has no private key: it can neither send nor receive"
		st.Fix = w.daemonHint(fmt.Sprintf("sets the key of %s/%s/%s", w.cfg.StateDir, wireguard.KeyDir, wireguard.KeyFile))
	case r.dev.PublicKey.String() != pub:
		st.Problem = "the device's key is not the published one: peers encrypt to the published key and this device cannot decrypt it"
		st.Fix = w.daemonHint(fmt.Sprintf("sets the key of %s/%s/%s on the device and publishes its public key (after routeletd wireguard rotate-key, at once)", w.cfg.StateDir, wireguard.KeyDir, wireguard.KeyFile))
	default:
		st.Status = Pass
	}
	return st
}

// wgPeerStep checks that the far node has a valid key in its record and
// that the device holds a peer with it; have is that peer (nil when the
// device holds none).
func (w *world) wgPeerStep(r *wgRead, node string, rec peers.Record, n peers.NodeInfo) (Step, *wireguard.PeerStatus) {
	st := Step{ID: StepWGPeer, Status: Fail}
	key := n.WireGuard.PublicKey
	if key == (wgtypes.Key{}) || !n.WireGuard.Valid() {
		st.Fact = fmt.Sprintf("node %s's record: WireGuard key %s", node, orNone(rec.WireGuardPublicKey))
		if rec.WireGuardPort != "" {
			st.Fact += ", port " + rec.WireGuardPort
		}
		if rf := refusalsOf(w.res.Refused, node, peers.FieldWireGuardPublicKey) + refusalsOf(w.res.Refused, node, peers.FieldWireGuardPort); rf != "" {
			st.Fact += "; refused: " + rf
		}
		st.Problem = fmt.Sprintf("peer %s has no WireGuard key: its pods are unreachable (not sent in plaintext)", node)
		st.Fix = fmt.Sprintf("run routeletd on node %s with encryption: wireguard; it publishes its public key (wireguardPublicKey) in its record (routeletd nodes list shows it); a malformed key, one another node holds or this node's own is refused", node)
		return st, nil
	}
	if i := slices.IndexFunc(w.res.Peers, func(p peers.NodeInfo) bool { return p.Name != node && p.WireGuard.PublicKey == key }); i >= 0 {
		st.Fact = fmt.Sprintf("node %s's key %s", node, key)
		st.Problem = fmt.Sprintf("node %s's WireGuard key is node %s's too: the device can have one peer per key, and neither gets it", node, w.res.Peers[i].Name)
		st.Fix = "one of the two records was copied from the other: let each node's routeletd publish its own key (routeletd wireguard rotate-key on the one that copied)"
		return st, nil
	}
	for i := range r.dev.Peers {
		if r.dev.Peers[i].PublicKey == key {
			st.Status = Pass
			st.Fact = fmt.Sprintf("%s holds node %s's key %s", w.cfg.WireGuardDevice, node, key)
			return st, &r.dev.Peers[i]
		}
	}
	st.Fact = fmt.Sprintf("node %s's key %s; %s holds %d peers, none with it", node, key, w.cfg.WireGuardDevice, len(r.dev.Peers))
	st.Problem = fmt.Sprintf("the device has no peer for node %s: packets to its pods are dropped (no key)", node)
	st.Fix = w.daemonHint("adds it") + w.daemonSays("", w.cfg.WireGuardDevice)
	return st, nil
}

// wgEndpoint is the endpoint the WireGuard manager wants for n: its host
// IPv4 (else IPv6) at its port.
func wgEndpoint(n peers.NodeInfo) netip.AddrPort {
	hs := n.HostIPs()
	if len(hs) == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(hs[0], n.WireGuard.Port)
}

// wgEndpointStep checks the peer's endpoint on the device.
func (w *world) wgEndpointStep(node string, n peers.NodeInfo, have *wireguard.PeerStatus) Step {
	st := Step{ID: StepWGEndpoint, Status: Pass}
	want := wgEndpoint(n)
	st.Fact = fmt.Sprintf("endpoint %s (node %s's host IP and WireGuard port: %s)", orNone(addrPortString(have.Endpoint)), node, orNone(addrPortString(want)))
	switch {
	case !want.IsValid():
		st.Status, st.Problem = Fail, fmt.Sprintf("node %s's record has no host IP: the device cannot know where to send", node)
		st.Fix = fmt.Sprintf("node %s's routeletd publishes its host IP once it knows it (node-ip)", node)
	case have.Endpoint != want:
		st.Status = Fail
		st.Problem = fmt.Sprintf("the device sends node %s's packets to %s, not to its host IP and port %s", node, orNone(addrPortString(have.Endpoint)), want)
		st.Fix = w.daemonHint("sets it back")
	}
	return st
}

// addrPortString is ap, or "" when it is not set.
func addrPortString(ap netip.AddrPort) string {
	if !ap.IsValid() {
		return ""
	}
	return ap.String()
}

// wgAllowedStep checks that the peer's allowed IPs cover every block of
// family v the far end is in: WireGuard sends a packet to the peer whose
// allowed IPs hold its destination, and drops what arrives from a peer
// outside them.
func (w *world) wgAllowedStep(node string, have *wireguard.PeerStatus, blocks []netip.Prefix, v int) Step {
	st := Step{ID: StepWGAllowedIPs, Family: v, Status: Pass}
	var mine, missing []string
	for _, p := range have.AllowedIPs {
		if familyOf(p.Addr()) == v {
			mine = append(mine, p.String())
		}
	}
	for _, b := range blocks {
		if !slices.ContainsFunc(have.AllowedIPs, func(p netip.Prefix) bool { return p.Bits() <= b.Bits() && p.Contains(b.Addr()) }) {
			missing = append(missing, b.String())
		}
	}
	st.Fact = fmt.Sprintf("node %s's allowed IPs (IPv%d): %s", node, v, orNone(strings.Join(mine, ", ")))
	if len(missing) > 0 {
		st.Status = Fail
		st.Problem = fmt.Sprintf("the allowed IPs of node %s leave out %s: WireGuard sends nothing there to it, and drops what it sends from there", node, strings.Join(missing, ", "))
		st.Fix = w.daemonHint("sets them from the peer's blocks")
	}
	return st
}

// blockUnroutable fills st and returns true when this node routes
// nothing to node's block b of family v whatever the kernel holds: the
// block was refused at the trust boundary (refusedBlock), or (IPv6) this
// node has no IPv6 block. fact is st's Fact for a refused block.
func (w *world) blockUnroutable(st *Step, node string, b netip.Prefix, v int, fact string) bool {
	if w.refusedBlock(st, node, b, fact) {
		return true
	}
	if v == 6 && len(blocksOf(w.local, 6)) == 0 {
		st.Fact = fmt.Sprintf("node %s has no IPv6 block", w.cfg.NodeName)
		st.Problem = fmt.Sprintf("block %s of node %s is not routed from here: this node has no IPv6 pods", b, node)
		st.Fix = "give this node an IPv6 block (pod-cidr)"
		return true
	}
	return false
}

// refusedBlock fills st and returns true when node's block b was refused
// at the trust boundary (peers.Resolve), so no route to it is wanted;
// fact, when not "", is st's Fact.
func (w *world) refusedBlock(st *Step, node string, b netip.Prefix, fact string) bool {
	for _, r := range w.res.Refused {
		if p, err := netip.ParsePrefix(r.Value); r.Node == node && r.Field == peers.FieldBlock && err == nil && p.Masked() == b {
			if fact != "" {
				st.Fact = fact
			}
			st.Problem = fmt.Sprintf("route %s missing: node %s's block was refused: %s (see the daemon's log, refusing a node record value)", b, node, r.Reason)
			st.Fix = "a block is refused when it overlaps this node's blocks or addresses, or a block another node claimed first: fix the pod-cidr of one of the two nodes and republish its record"
			return true
		}
	}
	return false
}

// wgRouteStep checks the route to block b of node: "dev <device> scope
// link proto <route-protocol>", as the WireGuard manager writes it for
// every peer's block, with a key or without.
func (w *world) wgRouteStep(node string, b netip.Prefix, v int) Step {
	st := Step{ID: StepWGRoute, Family: v, Status: Fail}
	dev := w.cfg.WireGuardDevice
	if w.blockUnroutable(&st, node, b, v, fmt.Sprintf("routeletd wants no route to %s (node %s)", b, node)) {
		return st
	}
	want := routes.Target{CIDR: b, Type: routes.TypeLink}
	wantDesc := fmt.Sprintf("%s dev %s scope link proto %d", b, dev, w.cfg.RouteProtocol)
	kr, err := w.routes(v)
	if err != nil {
		st.Fact, st.Problem = err.Error(), "cannot read the routing table"
		return st
	}
	got := findRoute(kr, b)
	diff := ""
	if got != nil && got.Iface == dev {
		diff = got.Mismatch(want, w.cfg.RouteProtocol)
	}
	switch {
	case got == nil:
		st.Fact = fmt.Sprintf("no route %s (want %s)", b, wantDesc) + w.daemonSays("", b.String())
		st.Problem = fmt.Sprintf("route %s to node %s is missing: its pods are reached by no route (the block's traffic follows the default route, or none)", b, node)
		st.Fix = w.daemonHint("re-adds it")
	case got.Iface != dev || diff != "":
		st.Fact = fmt.Sprintf("%s (want %s)", describeRoute(*got), wantDesc)
		if diff != "" {
			st.Fact += "; the kernel's has " + diff
		}
		st.Fact += w.daemonSays("", b.String())
		st.Problem = fmt.Sprintf("route %s to node %s does not go into %s: its pods' traffic is not encrypted there", b, node, dev)
		if got.Protocol != w.cfg.RouteProtocol {
			st.Fix = fmt.Sprintf("that route is not routelet's (proto %d) and routelet never replaces it: ip route del %s", got.Protocol, b)
		} else {
			st.Fix = w.daemonHint("corrects it")
		}
	default:
		st.Status = Pass
		st.Fact = describeRoute(*got) + " (WireGuard)"
	}
	return st
}

// wgHandshakeStep checks the peer's latest handshake: one less than
// HandshakeMaxAge ago means a current session.
func (w *world) wgHandshakeStep(node string, n peers.NodeInfo, have *wireguard.PeerStatus) Step {
	st := Step{ID: StepWGHandshake, Status: Pass}
	rxtx := fmt.Sprintf("rx %d B, tx %d B", have.RxBytes, have.TxBytes)
	ep := wgEndpoint(n)
	fix := fmt.Sprintf("check that routeletd runs on node %s with encryption: wireguard (its diagnose for the same pods says whether its device has this node's key), that node %s's allowlist lets this node (%s) send UDP to port %d (there: step allowlist), and that UDP port %d is reachable from here to %s (firewalls, security groups); a handshake starts with the first packet sent, so send some and run diagnose again",
		node, node, w.self.Endpoint(familyOf(ep.Addr())).HostIP, ep.Port(), ep.Port(), orNone(addrPortString(ep)))
	if have.LastHandshake.IsZero() {
		st.Status = Fail
		st.Fact = fmt.Sprintf("no handshake with node %s yet; %s", node, rxtx)
		st.Problem = fmt.Sprintf("no WireGuard session with node %s: packets to its pods wait in the device and are dropped when the handshake fails", node)
		st.Fix = fix
		return st
	}
	age := max(w.cfg.Now.Sub(have.LastHandshake), 0).Round(time.Second)
	st.Fact = fmt.Sprintf("latest handshake with node %s %s ago (%s); %s", node, age, have.LastHandshake.UTC().Format(time.RFC3339), rxtx)
	if age > HandshakeMaxAge {
		st.Status = Fail
		st.Problem = fmt.Sprintf("the latest handshake with node %s is older than %s: the session has expired and no new one was made", node, HandshakeMaxAge)
		st.Fix = fix
	}
	return st
}
