package allowlist

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/state"
)

// podGateway is the pod's next hop, answered by the node's proxy ARP.
const podGateway = "169.254.1.1"

// rawFrames opens an AF_PACKET socket on the pod's eth0, as a pod with
// CAP_NET_RAW can, and returns a func writing one whole Ethernet frame, and
// eth0's MAC.
func rawFrames(t *testing.T, pod ns.NetNS) (send func([]byte), mac net.HardwareAddr) {
	t.Helper()
	var fd, ifindex int
	err := pod.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		ifindex, mac = ifi.Index, ifi.HardwareAddr
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		t.Fatalf("packet socket in the pod: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func(b []byte) {
		t.Helper()
		if err := unix.Sendto(fd, b, 0, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
			t.Fatalf("send a frame from the pod: %v", err)
		}
	}, mac
}

// ethernet is an Ethernet frame from src to dst with the VLAN tags tpids
// (outermost first, VID 0), then typ and payload.
func ethernet(dst, src net.HardwareAddr, tpids []uint16, typ uint16, payload []byte) []byte {
	b := append(append([]byte{}, dst...), src...)
	for _, tpid := range tpids {
		b = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, tpid), 0)
	}
	return append(binary.BigEndian.AppendUint16(b, typ), payload...)
}

// gatewayMAC is the MAC the pod resolved its gateway to (the node's end of
// the veth).
func gatewayMAC(t *testing.T, pod ns.NetNS) net.HardwareAddr {
	t.Helper()
	h := netnstest.HandleFor(t, pod)
	entries, err := h.NeighList(0, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range entries {
		if n.IP.String() == podGateway && len(n.HardwareAddr) == 6 {
			return n.HardwareAddr
		}
	}
	t.Fatalf("the pod has no neighbour entry for %s: %v", podGateway, entries)
	return nil
}

// TestPodTaggedFrames: a pod with CAP_NET_RAW writes frames behind two
// VLAN tags (802.1ad + 802.1Q and 802.1Q + 802.1Q, VID 0; the node would
// strip both and take the packet) and ARP requests from senders it was not
// given. A spoofed IPv4 source never reaches the outside host, VXLAN from
// the pod's own address never leaves the node for the peer (NAT outgoing
// would make it the node's, which the peer accepts), the node keeps no
// neighbour entry for the foreign senders, and the pod's guard counts
// each; the pod's own traffic still works.
func TestPodTaggedFrames(t *testing.T) {
	c := newLAN(t, firewall.BackendNFT)
	c.rpfOff(t)
	const peerMAC = "66:00:00:00:00:0b"
	if err := c.store.PutNode(&state.Node{Version: 1, Name: "node-b", HostIPv4: peerIP, Blocks: []string{peerBlock},
		VTEPMAC: peerMAC, TunnelIPv4: "10.244.2.0", Updated: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	c.startDaemonEncap("vxlan")
	pod, own := c.addPod(t, "tagger")
	out4 := listenUDPOn(t, c.outside, "udp4", "9100")
	sendUDPFrom(t, pod, own, net.JoinHostPort(outsideIP, "9100"), []byte("own-v4"))
	if from := arrival(t, out4, "own-v4", 5*time.Second); from != nodeIP {
		t.Fatalf("the pod's own IPv4 traffic reached the outside from %q, want the node's %s (NAT outgoing)", from, nodeIP)
	}
	send, podMAC := rawFrames(t, pod)
	gw := gatewayMAC(t, pod)
	twoTags := [][]uint16{{unix.ETH_P_8021AD, unix.ETH_P_8021Q}, {unix.ETH_P_8021Q, unix.ETH_P_8021Q}}

	tagsBefore, arpBefore := c.countBefore(otherType), c.countBefore(arpDrop)
	for _, tags := range twoTags {
		send(ethernet(gw, podMAC, tags, unix.ETH_P_IP, innerUDP("198.51.100.7", outsideIP, 9100, "tagged-spoofed")))
	}
	if from := arrival(t, out4, "tagged-spoofed", time.Second); from != "" {
		t.Errorf("a datagram the pod sent from 198.51.100.7 inside two VLAN tags reached the outside host (seen from %s)", from)
	}

	peerRaw := listenRaw(t, c.peer, "17")
	vxlan := string(vxlanFrame(t, "66:00:00:00:00:0a", peerMAC, innerUDP("10.244.2.9", "10.244.1.9", 9002, "tagged-vxlan")))
	for _, tags := range twoTags {
		send(ethernet(gw, podMAC, tags, unix.ETH_P_IP, innerUDP(own, peerIP, 4789, vxlan)))
	}
	if peerRaw.sawFrom(t, nodeIP, "tagged-vxlan", 2*time.Second) {
		t.Errorf("VXLAN the pod sent to peer %s inside two VLAN tags left the node as the node's", peerIP)
	}

	// ARP for the gateway from 50 senders not the pod's: the node's proxy
	// ARP would answer each and keep an entry for it. The pod's own
	// datagram after them arrives once the node has been through them.
	var senders []netip.Addr
	for i := range 50 {
		s := netip.AddrFrom4([4]byte{10, 99, 0, byte(1 + i)})
		senders = append(senders, s)
		req := []byte{0, 1, 0x08, 0, 6, 4, 0, 1}
		req = append(append(req, podMAC...), s.AsSlice()...)
		req = append(append(req, 0, 0, 0, 0, 0, 0), netip.MustParseAddr(podGateway).AsSlice()...)
		send(ethernet(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, podMAC, nil, unix.ETH_P_ARP, req))
	}
	sendUDPFrom(t, pod, own, net.JoinHostPort(outsideIP, "9100"), []byte("own-v4-after"))
	if from := arrival(t, out4, "own-v4-after", 5*time.Second); from != nodeIP {
		t.Fatalf("after the tagged frames the pod's own IPv4 traffic reached the outside from %q, want %s", from, nodeIP)
	}
	neigh, err := netnstest.HandleFor(t, c.node.NS).NeighList(0, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var foreign []netip.Addr
	for _, n := range neigh {
		if a, ok := netip.AddrFromSlice(n.IP); ok && slices.Contains(senders, a.Unmap()) {
			foreign = append(foreign, a.Unmap())
		}
	}
	if len(foreign) != 0 {
		t.Errorf("the node holds neighbour entries for %d senders the pod was not given: %v", len(foreign), foreign)
	}

	netnstest.Eventually(t, 5*time.Second, "4 frames inside two VLAN tags and 50 ARP requests counted by the pod's guard", func() bool {
		tags, err1 := c.guardDrops(otherType)
		arps, err2 := c.guardDrops(arpDrop)
		return err1 == nil && err2 == nil && tags >= tagsBefore+4 && arps >= arpBefore+uint64(len(senders))
	})
}
