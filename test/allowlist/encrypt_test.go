package allowlist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
)

// TestEncryptionGuard: with encryption on (and a WireGuard device name of
// the test's own), the WireGuard device deleted
// while routeletd cannot make it again (stopped with SIGSTOP) takes the
// routes to the peer's block with it, so a pod's and the node's packets
// to the peer's pods would follow the default route to the outside host
// in plaintext: ROUTELET-ENCRYPT drops and counts them and the outside
// host sees nothing. With the guard flushed the same packets do reach it
// (the test can fail). Resumed, routeletd puts the guard back within its
// check and makes the device and its routes again.
func TestEncryptionGuard(t *testing.T) { eachBackend(t, testEncryptionGuard) }

func testEncryptionGuard(t *testing.T, backend string) {
	const peerPod = "10.244.2.7"
	// A device name of this test's own: the userspace datapath's socket
	// is /var/run/wireguard/<device>.sock whatever the namespace, shared
	// with any other test running routeletd on this host.
	dev := fmt.Sprintf("wgg%d%c", os.Getpid()%1000000, backend[0])
	c := newLAN(t, backend)
	// The userspace datapath lives in the node's network namespace, so
	// that namespace outlives its name until the datapath exits, which it
	// does once its link is gone: deleted here after routeletd stopped
	// (cleanups run last first) and before the namespace's name goes.
	t.Cleanup(func() { _, _ = netnstest.Exec(context.Background(), c.node.NS, "ip", "link", "del", dev) })
	c.writeNode("node-b", peerIP, peerBlock)
	d := c.startDaemon("--encapsulation=vxlan", "--encryption=wireguard", "--wireguard-device="+dev)
	pod, podIP := c.addPod(t, "enc")
	// Whatever reaches the outside host for the peer's pod is plaintext
	// that left the node: it takes the address, and routes the node's
	// block back (reverse path) through the node.
	sh(t, c.outside, "ip addr add "+peerPod+"/32 dev eth0")
	sh(t, c.outside, "ip route add "+nodeBlock+" via "+nodeIP)
	raw := listenRaw(t, c.outside, "17")
	routed := func() bool {
		return strings.Contains(sh(t, c.node.NS, "ip route show "+peerBlock), "dev "+dev)
	}
	netnstest.Eventually(t, 10*time.Second, "the peer's block routed into "+dev, routed)

	pid := d.proc.Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume) // before the harness stops it
	sh(t, c.node.NS, "ip link del "+dev)
	if routed() {
		t.Fatal("the peer's block is still routed into the deleted device: the test proves nothing")
	}

	drops := func() uint64 {
		t.Helper()
		var n uint64
		err := c.node.NS.Do(func(ns.NetNS) error {
			stats, err := c.ipt.StructuredStats("filter", firewall.EncryptChain)
			for _, s := range stats {
				if s.Target == "DROP" {
					n = s.Packets
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := 0
	// send sends one datagram to the peer's pod from host (the pod or the
	// node, src its address) and reports whether the outside host got it.
	send := func(host ns.NetNS, src string) bool {
		t.Helper()
		n++
		marker := fmt.Sprintf("routelet-test-encrypt-%d", n)
		if err := netnstest.SendUDP(host, peerPod+":9", marker); err != nil && !errors.Is(err, syscall.EPERM) {
			t.Fatal(err)
		}
		return raw.sawFrom(t, src, marker, 500*time.Millisecond)
	}

	for _, h := range []struct {
		what string
		n    ns.NetNS
		src  string
	}{{"the pod's", pod, podIP}, {"the node's", c.node.NS, nodeIP}} {
		before := drops()
		if send(h.n, h.src) {
			t.Fatalf("%s packet to the peer's pod left in plaintext with the WireGuard device gone", h.what)
		}
		if after := drops(); after <= before {
			t.Errorf("%s packet to the peer's pod: %s drop counter stayed at %d", h.what, firewall.EncryptChain, after)
		}
	}

	// Control: without the guard the same packets leave.
	c.mustIptables("-F", firewall.EncryptChain)
	if !send(pod, podIP) {
		t.Fatal("with the guard flushed the pod's packet did not reach the outside host either: the test proves nothing")
	}

	resume()
	netnstest.Eventually(t, 5*time.Second, firewall.EncryptChain+" repaired", func() bool {
		return strings.Contains(c.chain("filter", firewall.EncryptChain), "-j DROP")
	})
	netnstest.Eventually(t, 10*time.Second, "the device and the peer's route made again", routed)
	if send(pod, podIP) {
		t.Fatal("the pod's packet to the peer's pod left in plaintext after routeletd resumed")
	}
}
