package allowlist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/state"
)

// The node's IPv6 pod block, next to nodeBlock.
const nodeBlock6 = "fd00:244:1::/120"

// What a pod guard's drop counters count (pkg/podguard).
type dropKind int

const (
	spoof4    dropKind = iota // IPv4 from a source the pod was not given
	spoof6                    // the same for IPv6
	encapDrop                 // VXLAN (UDP to the port) or IPIP from the pod
	otherType                 // a frame that is not IPv4, IPv6 or ARP (VLAN-tagged ones included)
	arpDrop                   // ARP with a sender the pod was not given
)

// rpfOff models Debian's default: no reverse-path filtering anywhere on the
// node, for existing interfaces and for the ones created later.
func (c *lan) rpfOff(t *testing.T) {
	t.Helper()
	for _, k := range []string{"net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter"} {
		if _, err := netnstest.Sysctl(c.node.NS, k, "0"); err != nil {
			t.Fatal(err)
		}
	}
}

// guards opens the pod guards of the node's namespace.
func (c *lan) guards() (*podguard.Guards, error) {
	return podguard.New(nftables.WithNetNSFd(int(c.node.NS.Fd())))
}

// guardDrops returns what the drop rules of kind counted, summed over
// every pod guard of the node (`nft list table netdev routelet` shows the
// same counters).
func (c *lan) guardDrops(kind dropKind) (uint64, error) {
	g, err := c.guards()
	if err != nil {
		return 0, err
	}
	have, err := g.Chains()
	if err != nil {
		return 0, err
	}
	var n uint64
	for name := range have {
		d, err := g.Drops(name)
		if err != nil {
			return 0, err
		}
		n += [...]uint64{d.Spoof4, d.Spoof6, d.VXLAN + d.IPIP, d.Ethertype, d.ARP}[kind]
	}
	return n, nil
}

// waitDropped waits until the pod guards' drops of kind counted more than
// before.
func (c *lan) waitDropped(t *testing.T, kind dropKind, before uint64, what string) {
	t.Helper()
	netnstest.Eventually(t, 5*time.Second, what+": counted by a pod guard", func() bool {
		n, err := c.guardDrops(kind)
		return err == nil && n > before
	})
}

// countBefore is guardDrops, with 0 while there is no guard yet (the code
// before the guards has none).
func (c *lan) countBefore(kind dropKind) uint64 {
	n, _ := c.guardDrops(kind)
	return n
}

// listenUDPOn opens a UDP socket of network ("udp4", "udp6") on port in n.
func listenUDPOn(t *testing.T, n ns.NetNS, network, port string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	err := n.Do(func(ns.NetNS) error {
		var err error
		c, err = net.ListenPacket(network, ":"+port)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendUDPFrom sends one datagram from src (an address of n) to dst
// (host:port).
func sendUDPFrom(t *testing.T, n ns.NetNS, src, dst string, payload []byte) {
	t.Helper()
	sendFrom(t, n, "udp", &net.UDPAddr{IP: net.ParseIP(src)}, dst, payload)
}

// sendIPIPFrom sends one IPIP packet (protocol 4) carrying inner from src
// (an address of n) to dst.
func sendIPIPFrom(t *testing.T, n ns.NetNS, src, dst string, inner []byte) {
	t.Helper()
	sendFrom(t, n, "ip4:4", &net.IPAddr{IP: net.ParseIP(src)}, dst, inner)
}

// sendFrom dials dst over network from local inside n and writes payload
// once.
func sendFrom(t *testing.T, n ns.NetNS, network string, local net.Addr, dst string, payload []byte) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		c, err := (&net.Dialer{LocalAddr: local}).Dial(network, dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(payload)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// arrival waits up to wait for payload on l and returns its source ("" when
// it did not arrive).
func arrival(t *testing.T, l net.PacketConn, payload string, wait time.Duration) string {
	t.Helper()
	buf := make([]byte, 2048)
	deadline := time.Now().Add(wait)
	for {
		_ = l.SetReadDeadline(deadline)
		n, from, err := l.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(buf[:n]) == payload {
			host, _, _ := net.SplitHostPort(from.String())
			return host
		}
	}
}

// addAddr gives the pod an extra address on its eth0, as a pod with
// CAP_NET_ADMIN can; the returned func removes it again.
func addAddr(t *testing.T, pod ns.NetNS, ip string) (remove func()) {
	t.Helper()
	cidr, opt := ip+"/32", ""
	if !netip.MustParseAddr(ip).Is4() {
		cidr, opt = ip+"/128", " nodad"
	}
	sh(t, pod, "ip addr add "+cidr+" dev eth0"+opt)
	return func() { t.Helper(); sh(t, pod, "ip addr del "+cidr+" dev eth0") }
}

// TestPodAntiSpoofing: on a node without reverse-path filtering (Debian's
// default), a pod gives itself addresses it was not given — a foreign one,
// another pod's, an unassigned one of the node's block — and sends UDP from
// each to a host outside, over IPv4 and IPv6. The source check on its host
// veth's ingress hook (the netdev chain the plugin's ADD wrote and
// routeletd keeps) counts every such packet and the outside host receives
// none. The pod's traffic from its own addresses
// still gets through: to the outside (masqueraded to the node's address),
// to another node's host and to another pod (with its own address).
func TestPodAntiSpoofing(t *testing.T) { eachBackend(t, testPodAntiSpoofing) }

func testPodAntiSpoofing(t *testing.T, backend string) {
	c := newLAN(t, backend)
	c.rpfOff(t)
	c.writeNode("node-b", peerIP, peerBlock)
	c.startDaemon("--encapsulation=vxlan", "--pod-cidr="+nodeBlock6)
	pod, own := c.addPodIn(t, "spoofer", nodeBlock, nodeBlock6)
	other, otherIPs := c.addPodIn(t, "other", nodeBlock, nodeBlock6)
	if len(own) != 2 || len(otherIPs) != 2 {
		t.Fatalf("pods got %v and %v, want an IPv4 and an IPv6 address each", own, otherIPs)
	}
	out4 := listenUDPOn(t, c.outside, "udp4", "9100")
	out6 := listenUDPOn(t, c.outside, "udp6", "9100")

	// The pod's own addresses work, both families (this also resolves
	// the outside host's neighbour entries, so a datagram that does not
	// arrive below was dropped, not queued).
	sendUDPFrom(t, pod, own[0], net.JoinHostPort(outsideIP, "9100"), []byte("own-v4"))
	if from := arrival(t, out4, "own-v4", 5*time.Second); from != nodeIP {
		t.Fatalf("the pod's own IPv4 traffic reached the outside from %q, want the node's %s (NAT outgoing)", from, nodeIP)
	}
	sendUDPFrom(t, pod, own[1], net.JoinHostPort("2001:db8::99", "9100"), []byte("own-v6"))
	if from := arrival(t, out6, "own-v6", 5*time.Second); from != nodeIP6 {
		t.Fatalf("the pod's own IPv6 traffic reached the outside from %q, want the node's %s (NAT outgoing)", from, nodeIP6)
	}

	for i, tc := range []struct {
		src string
		v6  bool
	}{
		{"198.51.100.7", false}, {otherIPs[0], false}, {"10.244.1.250", false},
		{"2001:db8:ffff::7", true}, {otherIPs[1], true}, {"fd00:244:1::fa", true},
	} {
		remove := addAddr(t, pod, tc.src)
		dst, l := net.JoinHostPort(outsideIP, "9100"), out4
		if tc.v6 {
			dst, l = net.JoinHostPort("2001:db8::99", "9100"), out6
		}
		payload := fmt.Sprintf("spoofed-%d", i)
		kind := spoof4
		if tc.v6 {
			kind = spoof6
		}
		before := c.countBefore(kind)
		sendUDPFrom(t, pod, tc.src, dst, []byte(payload))
		if from := arrival(t, l, payload, time.Second); from != "" {
			t.Fatalf("a datagram the pod sent from %s (not its address) reached the outside host (seen from %s)", tc.src, from)
		}
		c.waitDropped(t, kind, before, "spoofed source "+tc.src)
		remove()
	}

	// The rest of the pod's traffic, from its own addresses, still works.
	for _, dst := range []string{peerIP, peerIP6} {
		if out, err := netnstest.Ping(t.Context(), pod, dst, 1); err != nil {
			t.Fatalf("pod → another node's host %s: %v\n%s", dst, err, out)
		}
	}
	for i, network := range []string{"udp4", "udp6"} {
		l := listenUDPOn(t, other, network, "9101")
		payload := "pod-to-pod-" + network
		sendUDPFrom(t, pod, own[i], net.JoinHostPort(otherIPs[i], "9101"), []byte(payload))
		if from := arrival(t, l, payload, 5*time.Second); from != own[i] {
			t.Fatalf("pod → pod over %s arrived from %q, want the sender's own %s", network, from, own[i])
		}
	}
}

// innerUDP returns an IPv4 packet carrying one UDP datagram from src to
// dst:port with payload, header checksum set (the receiver checks it), UDP
// checksum 0 (none).
func innerUDP(src, dst string, port uint16, payload string) []byte {
	total := 20 + 8 + len(payload)
	p := make([]byte, 28, total)
	p[0], p[8], p[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(p[2:], uint16(total))
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(p[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(p[20:], 12345)
	binary.BigEndian.PutUint16(p[22:], port)
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	return append(p, payload...)
}

// vxlanFrame returns a VXLAN payload (VNI 4096) with an Ethernet frame from
// srcMAC to dstMAC carrying the IPv4 packet inner.
func vxlanFrame(t *testing.T, dstMAC, srcMAC string, inner []byte) []byte {
	t.Helper()
	d, err := net.ParseMAC(dstMAC)
	if err != nil {
		t.Fatal(err)
	}
	s, err := net.ParseMAC(srcMAC)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0x08, 0, 0, 0, 0, 0x10, 0, 0}
	b = append(b, d...)
	b = append(b, s...)
	b = append(b, 0x08, 0x00)
	return append(b, inner...)
}

// TestPodForgedEncapsulation: a pod that takes a peer's host IP as its
// source sends VXLAN or IPIP to its own node, the inner packet addressed
// to another pod of the node "from" a pod of the peer. Nothing reaches the
// node past ROUTELET-INPUT (a raw socket sees nothing), the target pod
// receives nothing, and the pod guard on its host veth counts it. The same
// pod sending VXLAN or IPIP from its own address to the peer's host — which
// NAT outgoing would masquerade to this node's address, one the peer
// accepts — is dropped on the node by the guard's encapsulation rule.
func TestPodForgedEncapsulation(t *testing.T) { eachBackendAndEncap(t, testPodForgedEncapsulation) }

func testPodForgedEncapsulation(t *testing.T, backend, encap string) {
	c := newLAN(t, backend)
	c.rpfOff(t)
	const peerMAC, peerTunnel, peerPod = "66:00:00:00:00:0b", "10.244.2.0", "10.244.2.9"
	if err := c.store.PutNode(&state.Node{Version: 1, Name: "node-b", HostIPv4: peerIP, Blocks: []string{peerBlock},
		VTEPMAC: peerMAC, TunnelIPv4: peerTunnel, Updated: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	c.startDaemonEncap(encap)
	var self *state.Node
	if encap == "vxlan" {
		netnstest.Eventually(t, 10*time.Second, "node-a's record with its VTEP", func() bool {
			n, err := c.store.GetNode("node-a")
			self = n
			return err == nil && n.VTEPMAC != ""
		})
	}
	forger, forgerIP := c.addPod(t, "forger")
	target, targetIP := c.addPod(t, "target")
	targetL := listenUDP(t, target, "9002")
	proto := "17"
	if encap == "ipip" {
		proto = "4"
	}
	nodeRaw := listenRaw(t, c.node.NS, proto)
	removePeerIP := addAddr(t, forger, peerIP)

	// send sends one encapsulated packet from src to dst whose inner
	// packet carries payload to the target pod.
	send := func(src, dst, payload string) {
		t.Helper()
		inner := innerUDP(peerPod, targetIP, 9002, payload)
		if encap == "ipip" {
			sendIPIPFrom(t, forger, src, dst, inner)
			return
		}
		mac := "66:00:00:00:00:0a"
		if self != nil {
			mac = self.VTEPMAC
		}
		sendUDPFrom(t, forger, src, net.JoinHostPort(dst, "4789"), vxlanFrame(t, mac, peerMAC, inner))
	}

	before := c.countBefore(encapDrop)
	send(peerIP, nodeIP, "forged-to-node")
	if from := arrival(t, targetL, "forged-to-node", 2*time.Second); from != "" {
		t.Fatalf("the target pod received the inner packet of %s a pod forged from peer %s (seen from %s)", encap, peerIP, from)
	}
	if nodeRaw.sawFrom(t, peerIP, "forged-to-node", 200*time.Millisecond) {
		t.Fatalf("%s a pod forged from peer %s reached the node past %s", encap, peerIP, firewall.InputChain)
	}
	c.waitDropped(t, encapDrop, before, encap+" forged from a peer's host IP")

	// To the peer, from the pod's own address; the peer's raw socket sees
	// whatever arrives, masqueraded or not.
	removePeerIP()
	peerRaw := listenRaw(t, c.peer, proto)
	before = c.countBefore(encapDrop)
	send(forgerIP, peerIP, "from-pod-to-peer")
	if peerRaw.sawFrom(t, nodeIP, "from-pod-to-peer", 2*time.Second) {
		t.Fatalf("%s a pod sent to peer %s left the node (masqueraded as the node, the peer would accept it)", encap, peerIP)
	}
	c.waitDropped(t, encapDrop, before, encap+" from a pod to a peer")
}
