package allowlist

import (
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// fakeVTEP gives host (underlay address hostIP) a real VXLAN device vx0
// (VNI 4096, port 4789, MAC mac) holding the spoofed pod address src, with
// a route to the node's block through the node's VTEP, as a node would
// have. Whatever host sends to a pod of the node then leaves as genuine
// VXLAN towards the node.
func fakeVTEP(t *testing.T, host ns.NetNS, hostIP, mac, src string, nodeRec *state.Node) {
	t.Helper()
	for _, cmd := range []string{
		"ip link add vx0 address " + mac + " type vxlan id 4096 dstport 4789 local " + hostIP + " dev eth0 nolearning",
		"ip addr add " + src + "/32 dev vx0",
		"ip link set vx0 up",
		"ip neigh replace " + nodeRec.TunnelIPv4 + " lladdr " + nodeRec.VTEPMAC + " dev vx0 nud permanent",
		"bridge fdb append " + nodeRec.VTEPMAC + " dev vx0 dst " + nodeIP,
		"ip route add " + nodeBlock + " via " + nodeRec.TunnelIPv4 + " dev vx0 onlink src " + src,
	} {
		sh(t, host, cmd)
	}
}

// TestVXLANPodInjection: an attacker on the underlay with its own VXLAN
// device sends to a pod on the node "from" a pod address of a real peer:
// the node drops it (the DROP counter shows it) and the pod receives
// nothing. The real peer, with the same setup, reaches the pod.
func TestVXLANPodInjection(t *testing.T) { eachBackend(t, testVXLANPodInjection) }

func testVXLANPodInjection(t *testing.T, backend string) {
	c := newLAN(t, backend)
	const peerMAC, peerTunnel, spoofed = "66:00:00:00:00:0b", "10.244.2.0", "10.244.2.9"
	if err := c.store.PutNode(&state.Node{Version: 1, Name: "node-b", HostIPv4: peerIP, Blocks: []string{peerBlock},
		VTEPMAC: peerMAC, TunnelIPv4: peerTunnel, Updated: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	c.startDaemon("--encapsulation=vxlan")
	var self *state.Node
	netnstest.Eventually(t, 10*time.Second, "node-a's record with its VTEP", func() bool {
		n, err := c.store.GetNode("node-a")
		self = n
		return err == nil && n.VTEPMAC != "" && n.TunnelIPv4 != ""
	})
	pod, podIP := c.addPod(t, "target")
	l := listenUDP(t, pod, "9002")

	fakeVTEP(t, c.peer, peerIP, peerMAC, spoofed, self)
	fakeVTEP(t, c.attacker, attackerIP, "66:00:00:00:00:66", spoofed, self)

	// The attacker first: a working peer path must not have been what let
	// anything through.
	_, d0, err := c.dropAcceptCounts()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		sendUDP(t, c.attacker, podIP+":9002", "from-attacker")
	}
	netnstest.Eventually(t, 5*time.Second, "DROP counter counts the attacker's 3 VXLAN packets", func() bool {
		_, d, err := c.dropAcceptCounts()
		return err == nil && d >= d0+3
	})

	// The peer's datagram arrives; the attacker's, sent before it, never do.
	sendUDP(t, c.peer, podIP+":9002", "from-peer")
	buf := make([]byte, 1500)
	_ = l.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := l.ReadFrom(buf)
	if err != nil {
		t.Fatalf("pod received nothing from the real peer: %v", err)
	}
	if got := string(buf[:n]); got != "from-peer" {
		t.Fatalf("pod received %q from %s, want only the peer's datagram", got, from)
	}
	if host, _, _ := net.SplitHostPort(from.String()); host != spoofed {
		t.Errorf("peer's datagram came from %s, want %s", host, spoofed)
	}
}
