package allowlist

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// TestOverlayAllowlist: an attacker on the underlay that is no node sends
// VXLAN (UDP 4789) or IPIP to the node: the DROP rule of ROUTELET-INPUT
// counts it and nothing reaches the host; the same traffic from a peer
// (whose record is in nodes/) is accepted. Writing a node record for the
// attacker makes its traffic accepted; deleting the record blocks it again.
func TestOverlayAllowlist(t *testing.T) { eachBackendAndEncap(t, testOverlayAllowlist) }

func testOverlayAllowlist(t *testing.T, backend, encap string) {
	c := newLAN(t, backend)
	set, proto, send := "routelet-vxlan-peers", "17", sendVXLAN
	if encap == "ipip" {
		set, proto, send = "routelet-ipip-peers", "4", sendIPIP
	}
	c.writeNode("node-b", peerIP, peerBlock)
	d := c.startDaemonEncap(encap)
	hasMember := func(ip string) func() bool {
		return func() bool {
			m, _ := c.setMembers(set)
			return slices.Contains(m, ip+"/32")
		}
	}
	netnstest.Eventually(t, 5*time.Second, "peer "+peerIP+" in "+set, hasMember(peerIP))
	raw := listenRaw(t, c.node.NS, proto)

	n := 0
	// expect sends one packet from host (address src) and checks that it
	// was accepted (delivered, the ACCEPT counter moved) or dropped (the
	// DROP counter moved, nothing delivered).
	expect := func(host ns.NetNS, src string, accepted bool) {
		t.Helper()
		n++
		marker := fmt.Sprintf("routelet-test-%s-%d", encap, n)
		a0, d0, err := c.dropAcceptCounts()
		if err != nil {
			t.Fatal(err)
		}
		send(t, host, marker)
		if accepted {
			if !raw.sawFrom(t, src, marker, 5*time.Second) {
				t.Fatalf("%s traffic from %s (%s) did not reach the node", encap, src, marker)
			}
			if a, _, _ := c.dropAcceptCounts(); a <= a0 {
				t.Errorf("ACCEPT counter of %s stayed at %d after %s traffic from %s", set, a, encap, src)
			}
			return
		}
		netnstest.Eventually(t, 5*time.Second, fmt.Sprintf("DROP counter moves for %s from %s", encap, src), func() bool {
			_, d, err := c.dropAcceptCounts()
			return err == nil && d > d0
		})
		if raw.sawFrom(t, src, marker, 200*time.Millisecond) {
			t.Fatalf("%s traffic from non-peer %s (%s) reached the node", encap, src, marker)
		}
	}

	expect(c.attacker, attackerIP, false)
	expect(c.peer, peerIP, true)

	c.writeNode("intruder", attackerIP, "10.244.66.0/24")
	netnstest.Eventually(t, 5*time.Second, "attacker "+attackerIP+" in "+set+" after its record was written", hasMember(attackerIP))
	expect(c.attacker, attackerIP, true)

	if err := c.store.DeleteNode("intruder"); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 5*time.Second, "attacker "+attackerIP+" out of "+set+" after its record was deleted",
		func() bool { return !hasMember(attackerIP)() })
	expect(c.attacker, attackerIP, false)
	expect(c.peer, peerIP, true)

	// A restart (after kill -9) with the attacker's subnet configured as
	// external nodes lets it in without a record; the peer never leaves
	// the set meanwhile (watched until the new daemon is ready and its
	// first checks have run).
	stopWatch := make(chan struct{})
	watched := make(chan []string, 1)
	go func() {
		var missing []string
		for {
			select {
			case <-stopWatch:
				watched <- missing
				return
			default:
			}
			if m, ok := c.setMembers(set); !slices.Contains(m, peerIP+"/32") {
				missing = append(missing, fmt.Sprintf("%v (set exists: %v)", m, ok))
			}
		}
	}()
	d.kill9()
	c.startDaemonEncap(encap, "--external-node-cidr=192.0.2.64/28")
	time.Sleep(1500 * time.Millisecond) // let the first checks run while still watching
	close(stopWatch)
	if missing := <-watched; len(missing) > 0 {
		t.Fatalf("peer %s left %s during a restart: %v", peerIP, set, missing)
	}
	netnstest.Eventually(t, 5*time.Second, "192.0.2.64/28 in "+set, func() bool {
		m, _ := c.setMembers(set)
		return slices.Contains(m, "192.0.2.64/28")
	})
	expect(c.attacker, attackerIP, true)
	expect(c.peer, peerIP, true)
}

// TestOverlayAllowlistIPv6: the same over an IPv6 underlay: VXLAN from an
// IPv6 address that is no node's is dropped by ip6tables' ROUTELET-INPUT;
// a peer's hostIPv6 (routelet-vxlan-peers-v6) is accepted, and so is the
// attacker's once its record carries its IPv6 address.
func TestOverlayAllowlistIPv6(t *testing.T) { eachBackend(t, testOverlayAllowlistIPv6) }

func testOverlayAllowlistIPv6(t *testing.T, backend string) {
	c := newLAN(t, backend)
	put := func(name, v4, v6, block string) {
		t.Helper()
		if err := c.store.PutNode(&state.Node{Version: 1, Name: name, HostIPv4: v4, HostIPv6: v6, Blocks: []string{block}, Updated: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	put("node-b", peerIP, peerIP6, peerBlock)
	c.startDaemon("--encapsulation=vxlan")
	const set = "routelet-vxlan-peers-v6"
	hasMember := func(ip string) func() bool {
		return func() bool {
			m, _ := c.setMembers(set)
			return slices.Contains(m, ip+"/128")
		}
	}
	netnstest.Eventually(t, 5*time.Second, "peer "+peerIP6+" in "+set, hasMember(peerIP6))
	raw := listenRawNet(t, c.node.NS, "ip6:17")
	n := 0
	expect := func(host ns.NetNS, src string, accepted bool) {
		t.Helper()
		n++
		marker := fmt.Sprintf("routelet-test-v6-%d", n)
		a0, d0, err := c.dropAcceptCountsOf(c.ipt6)
		if err != nil {
			t.Fatal(err)
		}
		sendVXLANTo(t, host, nodeIP6, marker)
		if accepted {
			if !raw.sawFrom(t, src, marker, 5*time.Second) {
				t.Fatalf("VXLAN over IPv6 from %s (%s) did not reach the node", src, marker)
			}
			if a, _, _ := c.dropAcceptCountsOf(c.ipt6); a <= a0 {
				t.Errorf("ip6tables ACCEPT counter stayed at %d after VXLAN from %s", a, src)
			}
			return
		}
		netnstest.Eventually(t, 5*time.Second, "ip6tables DROP counter moves for VXLAN from "+src, func() bool {
			_, d, err := c.dropAcceptCountsOf(c.ipt6)
			return err == nil && d > d0
		})
		if raw.sawFrom(t, src, marker, 200*time.Millisecond) {
			t.Fatalf("VXLAN over IPv6 from non-peer %s (%s) reached the node", src, marker)
		}
	}
	expect(c.attacker, attackerIP6, false)
	expect(c.peer, peerIP6, true)
	put("intruder", attackerIP, attackerIP6, "10.244.66.0/24")
	netnstest.Eventually(t, 5*time.Second, "attacker "+attackerIP6+" in "+set, hasMember(attackerIP6))
	expect(c.attacker, attackerIP6, true)
}

// TestWireGuardAllowlist: with encryption on, UDP to the WireGuard port
// (here the configured 51821) from an attacker that is no node is dropped
// and counted and reaches nothing on the node, a peer's is accepted; a
// record for the attacker makes it a member of routelet-wireguard-peers,
// deleting the record drops its traffic again.
func TestWireGuardAllowlist(t *testing.T) { eachBackend(t, testWireGuardAllowlist) }

func testWireGuardAllowlist(t *testing.T, backend string) {
	const set, port = "routelet-wireguard-peers", "51821"
	c := newLAN(t, backend)
	c.writeNode("node-b", peerIP, peerBlock)
	c.startDaemon("--encapsulation=none", "--encryption=wireguard", "--wireguard-port="+port)
	hasMember := func(ip string) func() bool {
		return func() bool {
			m, _ := c.setMembers(set)
			return slices.Contains(m, ip+"/32")
		}
	}
	netnstest.Eventually(t, 5*time.Second, "peer "+peerIP+" in "+set, hasMember(peerIP))
	raw := listenRaw(t, c.node.NS, "17")

	n := 0
	expect := func(host ns.NetNS, src string, accepted bool) {
		t.Helper()
		n++
		marker := fmt.Sprintf("routelet-test-wireguard-%d", n)
		a0, d0, err := c.dropAcceptCounts()
		if err != nil {
			t.Fatal(err)
		}
		if err := netnstest.SendUDP(host, net.JoinHostPort(nodeIP, port), marker); err != nil {
			t.Fatal(err)
		}
		if accepted {
			if !raw.sawFrom(t, src, marker, 5*time.Second) {
				t.Fatalf("UDP to the WireGuard port from %s (%s) did not reach the node", src, marker)
			}
			if a, _, _ := c.dropAcceptCounts(); a <= a0 {
				t.Errorf("ACCEPT counter of %s stayed at %d after UDP from %s", set, a, src)
			}
			return
		}
		netnstest.Eventually(t, 5*time.Second, "DROP counter moves for UDP to the WireGuard port from "+src, func() bool {
			_, d, err := c.dropAcceptCounts()
			return err == nil && d > d0
		})
		if raw.sawFrom(t, src, marker, 200*time.Millisecond) {
			t.Fatalf("UDP to the WireGuard port from non-peer %s (%s) reached the node", src, marker)
		}
	}

	expect(c.attacker, attackerIP, false)
	expect(c.peer, peerIP, true)

	c.writeNode("intruder", attackerIP, "10.244.66.0/24")
	netnstest.Eventually(t, 5*time.Second, "attacker "+attackerIP+" in "+set+" after its record was written", hasMember(attackerIP))
	expect(c.attacker, attackerIP, true)

	if err := c.store.DeleteNode("intruder"); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 5*time.Second, "attacker "+attackerIP+" out of "+set+" after its record was deleted",
		func() bool { return !hasMember(attackerIP)() })
	expect(c.attacker, attackerIP, false)
	expect(c.peer, peerIP, true)
}
