package diagnose

import (
	"crypto/sha256"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/wireguard"
)

// fakeWGKey is node name's WireGuard public key in the fakes.
func fakeWGKey(name string) wgtypes.Key { return wgtypes.Key(sha256.Sum256([]byte("wg " + name))) }

// wgDev is the fake node's WireGuard device name.
const wgDev = defaults.DeviceWireGuard

// encrypt turns n into a node running encryption wireguard as routeletd
// programs it: every record carries its key, the overlay has no peer
// routes, neighbours or FDB entries, every peer block is routed into the
// kernel's WireGuard device, which holds every peer (endpoint host
// IPv4:51820, allowed IPs its blocks) with a handshake 12 s ago, and the
// WireGuard allowlist holds the peers' host IPs.
func encrypt(n *fakeNode) {
	n.cfg.Encrypted, n.cfg.WireGuardDevice, n.cfg.WireGuardPort = true, wgDev, defaults.WireGuardPort
	for i := range n.st.nodes {
		n.st.nodes[i].WireGuardPublicKey = fakeWGKey(n.st.nodes[i].Name).String()
	}
	for v := range n.k.routes {
		n.k.routes[v] = slices.DeleteFunc(n.k.routes[v], func(r Route) bool { return strings.HasPrefix(r.Iface, "vxlan") })
	}
	n.k.neighs[overlay.DeviceVXLAN+"/4"], n.k.neighs[overlay.DeviceVXLANv6+"/6"] = nil, nil
	n.k.fdb = map[string][]FDB{}
	n.k.links = append(n.k.links, Link{Name: wgDev, Index: 9, Kind: "wireguard", Up: true, LowerUp: true, MTU: fakePodMTU})
	dev := wireguard.Status{Name: wgDev, PublicKey: fakeWGKey("a"), Port: defaults.WireGuardPort}
	wg4, wg6 := ipset.Name(ipset.WireGuardPeers, ipset.IPv4), ipset.Name(ipset.WireGuardPeers, ipset.IPv6)
	n.k.sets[wg4], n.k.sets[wg6] = []netip.Prefix{}, []netip.Prefix{}
	for _, r := range n.st.nodes {
		if r.Name == "a" {
			continue
		}
		info, _ := peers.Parse(r)
		p := wireguard.PeerStatus{PublicKey: fakeWGKey(r.Name), Endpoint: netip.AddrPortFrom(info.IPv4.HostIP, defaults.WireGuardPort),
			LastHandshake: fakeNow.Add(-12 * time.Second), RxBytes: 4096, TxBytes: 8192}
		for _, b := range info.Blocks {
			p.AllowedIPs = append(p.AllowedIPs, b)
			v := familyOf(b.Addr())
			n.k.routes[v] = append(n.k.routes[v], Route{Dst: b, Iface: wgDev, Type: routes.TypeLink.KernelType(), Scope: unix.RT_SCOPE_LINK, Protocol: fakeProto})
		}
		dev.Peers = append(dev.Peers, p)
		n.k.sets[wg4] = append(n.k.sets[wg4], netip.PrefixFrom(info.IPv4.HostIP, 32))
		n.k.sets[wg6] = append(n.k.sets[wg6], netip.PrefixFrom(info.IPv6.HostIP, 128))
	}
	n.k.wg = map[string]wireguard.Status{wgDev: dev}
}

// wgPeer returns the device's entry of node name.
func wgPeer(n *fakeNode, name string) *wireguard.PeerStatus {
	d := n.k.wg[wgDev]
	for i := range d.Peers {
		if d.Peers[i].PublicKey == fakeWGKey(name) {
			return &d.Peers[i]
		}
	}
	return nil
}

// wgLink returns the WireGuard device's link.
func wgLink(n *fakeNode) *Link {
	for i := range n.k.links {
		if n.k.links[i].Name == wgDev {
			return &n.k.links[i]
		}
	}
	return nil
}

// record returns node name's record.
func record(n *fakeNode, name string) *peers.Record {
	for i := range n.st.nodes {
		if n.st.nodes[i].Name == name {
			return &n.st.nodes[i]
		}
	}
	return nil
}

// wgDaemon makes the daemon's state endpoint serve n's peers (datastore
// etcd) with the WireGuard section as the WireGuard manager fills it in.
func wgDaemon(n *fakeNode) {
	keys := map[string]string{}
	for _, r := range n.st.nodes {
		keys[r.Name] = r.WireGuardPublicKey
	}
	fromEndpoint(n, "etcd")
	wg := &statusapi.WireGuard{Implementation: wireguard.ImplKernel, Device: wgDev, PublicKey: keys["a"], Port: defaults.WireGuardPort, MTU: fakePodMTU, Up: true}
	for _, p := range n.daemon.Peers {
		if keys[p.Name] == "" {
			wg.PeersWithoutKey = append(wg.PeersWithoutKey, p.Name)
			continue
		}
		wg.Peers = append(wg.Peers, statusapi.WireGuardPeer{Node: p.Name, PublicKey: keys[p.Name], Endpoint: p.HostIPv4 + ":51820", AllowedIPs: p.Blocks, Configured: true})
	}
	n.daemon.WireGuard = wg
}

func init() {
	peer1 := fakePeerName(1)
	goldenCases = append(goldenCases, []struct {
		name     string
		src, dst string
		breakIt  func(n *fakeNode)
		failing  []string
		opts     Options
	}{
		{name: "wg-healthy", src: "demo/pod-0", dst: "10.100.1.5", breakIt: encrypt},
		{name: "wg-healthy-node", src: "demo/pod-1", dst: "node-0002", breakIt: encrypt},
		{name: "wg-healthy-ingress", src: "fd00:245:2::9", dst: "demo/pod-2", breakIt: encrypt},
		{name: "wg-daemon-healthy", src: "demo/pod-0", dst: "10.100.1.5", breakIt: func(n *fakeNode) { encrypt(n); wgDaemon(n) }},
		{name: "wg-daemon-peer-no-key", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-peer"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				record(n, peer1).WireGuardPublicKey = ""
				wgDaemon(n)
			}},
		{name: "wg-peer-no-key", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-peer"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				record(n, peer1).WireGuardPublicKey = ""
				d := n.k.wg[wgDev]
				d.Peers = slices.DeleteFunc(d.Peers, func(p wireguard.PeerStatus) bool { return p.PublicKey == fakeWGKey(peer1) })
				n.k.wg[wgDev] = d
			}},
		{name: "wg-peer-bad-key", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-peer"},
			breakIt: func(n *fakeNode) { encrypt(n); record(n, peer1).WireGuardPublicKey = "bm90IGEga2V5" }},
		{name: "wg-peer-not-on-device", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-peer"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				d := n.k.wg[wgDev]
				d.Peers = slices.DeleteFunc(d.Peers, func(p wireguard.PeerStatus) bool { return p.PublicKey == fakeWGKey(peer1) })
				n.k.wg[wgDev] = d
			}},
		{name: "wg-no-handshake", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-handshake"},
			breakIt: func(n *fakeNode) { encrypt(n); wgPeer(n, peer1).LastHandshake = time.Time{} }},
		{name: "wg-stale-handshake", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-handshake"},
			breakIt: func(n *fakeNode) { encrypt(n); wgPeer(n, peer1).LastHandshake = fakeNow.Add(-4 * time.Minute) }},
		{name: "wg-key-mismatch", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-key"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				d := n.k.wg[wgDev]
				d.PublicKey = fakeWGKey("old key of a")
				n.k.wg[wgDev] = d
			}},
		{name: "wg-endpoint-wrong", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-endpoint"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				wgPeer(n, peer1).Endpoint = netip.MustParseAddrPort("198.51.100.7:40000")
			}},
		{name: "wg-allowed-ips-missing", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-allowed-ips/4"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				p := wgPeer(n, peer1)
				p.AllowedIPs = slices.DeleteFunc(p.AllowedIPs, func(b netip.Prefix) bool { return b.Addr().Is4() })
			}},
		{name: "wg-route-via-vxlan", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-route/4"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				b := netip.MustParsePrefix("10.100.1.0/24")
				for i, r := range n.k.routes[4] {
					if r.Dst == b {
						n.k.routes[4][i] = Route{Dst: b, Iface: overlay.DeviceVXLAN, Type: routes.TypeGateway.KernelType(), Gateway: b.Addr(), OnLink: true, MTU: fakeVXLAN4, Protocol: fakeProto}
					}
				}
			}},
		{name: "wg-device-missing", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-device", "wireguard-route/4"},
			breakIt: func(n *fakeNode) {
				encrypt(n)
				n.st.running = false
				n.k.links = slices.DeleteFunc(n.k.links, func(l Link) bool { return l.Name == wgDev })
				n.k.routes[4] = slices.DeleteFunc(n.k.routes[4], func(r Route) bool { return r.Iface == wgDev })
				n.k.wg = nil
			}},
		{name: "wg-device-foreign", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-device"},
			breakIt: func(n *fakeNode) { encrypt(n); wgLink(n).Kind = "dummy"; n.k.wg = nil }},
		{name: "wg-device-down-mtu", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-device"},
			breakIt: func(n *fakeNode) { encrypt(n); wgLink(n).Up, wgLink(n).MTU = false, 1500 }},
		{name: "wg-datapath-silent", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"wireguard-device"},
			breakIt: func(n *fakeNode) { encrypt(n); wgLink(n).Kind = "tun"; n.k.wg = nil }},
	}...)
}

// TestWireGuardStepsReplaceOverlay: with encryption on, a remote pod's
// path has the WireGuard steps and none of the overlay's (no VXLAN
// device, VTEP, ARP or FDB step, no VXLAN allowlist), and each WireGuard
// step id shows once (dual-stack: the per-family ones once per family).
func TestWireGuardStepsReplaceOverlay(t *testing.T) {
	n := newFakeNode(3, 3)
	encrypt(n)
	rep, err := Run(n.cfg, n.st, n.k, "demo/pod-1", "node-0002", Options{})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range rep.Steps {
		count[s.ID]++
		if s.Status == Fail {
			t.Errorf("step %s IPv%d failed: %s; %s", s.ID, s.Family, s.Fact, s.Problem)
		}
	}
	for _, id := range []string{StepOverlayDevice, StepVTEP, StepVTEPARP, StepVTEPFDB, StepPathMTU, StepRoute} {
		if count[id] > 0 {
			t.Errorf("step %s shows with encryption on", id)
		}
	}
	for id, want := range map[string]int{StepWGDevice: 1, StepWGKey: 1, StepWGPeer: 1, StepWGEndpoint: 1, StepWGHandshake: 1,
		StepWGAllowedIPs: 2, StepWGRoute: 2, StepAllowlist: 1} {
		if count[id] != want {
			t.Errorf("step %s shows %d times, want %d", id, count[id], want)
		}
	}
	var allow Step
	for _, s := range rep.Steps {
		if s.ID == StepAllowlist {
			allow = s
		}
	}
	if !strings.Contains(allow.Fact, "routelet-wireguard-peers") {
		t.Errorf("allowlist step reads %q, want the WireGuard set", allow.Fact)
	}
}

// TestWireGuardPeerWithoutKeyMessage: the step of a peer without a key
// says its pods are unreachable, not sent in plaintext, and the route
// into the device is still checked (and there).
func TestWireGuardPeerWithoutKeyMessage(t *testing.T) {
	n := newFakeNode(1, 2)
	encrypt(n)
	record(n, fakePeerName(1)).WireGuardPublicKey = ""
	rep, err := Run(n.cfg, n.st, n.k, "demo/pod-0", "10.100.1.5", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var peer, route *Step
	for i, s := range rep.Steps {
		switch s.ID {
		case StepWGPeer:
			peer = &rep.Steps[i]
		case StepWGRoute:
			route = &rep.Steps[i]
		case StepWGEndpoint, StepWGHandshake, StepWGAllowedIPs:
			t.Errorf("step %s shows though the peer has no key", s.ID)
		}
	}
	if peer == nil || peer.Status != Fail || peer.Problem != "peer node-0001 has no WireGuard key: its pods are unreachable (not sent in plaintext)" {
		t.Fatalf("wireguard-peer step %+v", peer)
	}
	if route == nil || route.Status != Pass || !strings.Contains(route.Fact, "dev "+wgDev) {
		t.Errorf("wireguard-route step %+v, want the route into %s passing", route, wgDev)
	}
	if rep.OK {
		t.Error("report OK with a peer without a key")
	}
}
