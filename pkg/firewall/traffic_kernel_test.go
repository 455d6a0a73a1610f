package firewall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/ipset"
)

// Traffic tests: real packets between network namespaces on veths, checked
// the way an operator would (who receives what, rule counters, sources).

// sh runs `ip`/sysctl-style setup commands inside n.
func sh(t *testing.T, n ns.NetNS, cmd string) {
	t.Helper()
	f := strings.Fields(cmd)
	if _, err := netnstest.Exec(context.Background(), n, f[0], f[1:]...); err != nil {
		t.Fatal(err)
	}
}

// sysctl sets key (e.g. "net/ipv4/ip_forward") inside n.
func sysctl(t *testing.T, n ns.NetNS, key, value string) {
	t.Helper()
	if _, err := netnstest.Sysctl(n, key, value); err != nil {
		t.Fatal(err)
	}
}

// newNS creates a namespace removed at cleanup.
func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	return netnstest.NewFor(t, "rltraf-")
}

// link connects a (device aDev, address aAddr) and b (bDev, bAddr) with a
// veth pair and brings both ends up. Addresses may be empty.
func link(t *testing.T, a ns.NetNS, aDev, aAddr string, b ns.NetNS, bDev, bAddr string) {
	t.Helper()
	sh(t, a, "ip link add "+aDev+" type veth peer name "+bDev+" netns "+netnstest.Name(b))
	for _, e := range []struct {
		n         ns.NetNS
		dev, addr string
	}{{a, aDev, aAddr}, {b, bDev, bAddr}} {
		if e.addr != "" {
			sh(t, e.n, "ip addr add "+e.addr+" dev "+e.dev)
		}
		sh(t, e.n, "ip link set "+e.dev+" up")
	}
}

// listenUDP opens a UDP socket inside n.
func listenUDP(t *testing.T, n ns.NetNS, addr string) *net.UDPConn {
	t.Helper()
	var c net.PacketConn
	err := n.Do(func(ns.NetNS) error {
		var err error
		c, err = net.ListenPacket(netnstest.UDPNetwork(addr), addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

// sendUDP sends one datagram from inside n.
func sendUDP(t *testing.T, n ns.NetNS, dst, payload string) {
	t.Helper()
	if err := netnstest.SendUDP(n, dst, payload); err != nil {
		t.Fatal(err)
	}
}

// mustDeliver sends payload from n to dst and fails t unless c receives it
// within 5 s from src; what names the path in the failure.
func mustDeliver(t *testing.T, n ns.NetNS, dst string, c net.PacketConn, payload, src, what string) {
	t.Helper()
	sendUDP(t, n, dst, payload)
	if p, from, ok := recv(t, c, 5*time.Second); !ok || p != payload || from != src {
		t.Fatalf("%s: got %q from %q (ok %v), want %q from %s", what, p, from, ok, payload, src)
	}
}

// recv waits up to wait for a datagram and returns its payload and source;
// ok is false when none arrived.
func recv(t *testing.T, c net.PacketConn, wait time.Duration) (payload, src string, ok bool) {
	t.Helper()
	buf := make([]byte, 1500)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	n, from, err := c.ReadFrom(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "", "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	host := from.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return string(buf[:n]), host, true
}

// waitPackets polls the packet counter of rule idx (0-based) of chain until
// it reaches want, failing after 5 s. Counters move as the kernel processes
// a packet, so once a drop is counted the packet is gone for good.
func waitPackets(t *testing.T, tab nsTable, table, chain string, idx int, want uint64) {
	t.Helper()
	netnstest.WaitFor(t, 5*time.Second, fmt.Sprintf("%s/%s rule %d to count %d packets", table, chain, idx, want), func() error {
		p, err := tab.packets(table, chain)
		if err != nil {
			t.Fatal(err)
		}
		if idx < len(p) && p[idx] >= want {
			return nil
		}
		return fmt.Errorf("counted %v", p)
	})
}

// TestAllowlistTraffic: an attacker that is not a peer sends VXLAN (UDP
// 4789) and IPIP to the node: the drop rules count the packets and nothing
// reaches the node's listeners; once its address is in the peer sets the
// same traffic is accepted, and removing it blocks it again.
func TestAllowlistTraffic(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) { testAllowlistTraffic(t, backend) })
	}
}

func testAllowlistTraffic(t *testing.T, backend string) {
	cfg := Config{VXLAN: true, IPIP: true}
	peers := map[string][]string{ipset.VXLANPeers: {"10.99.0.3/32"}, ipset.IPIPPeers: {"10.99.0.3/32"}}
	f := newFixture(t, backend, ipset.IPv4, cfg, peers)
	node := f.n
	attacker := newNS(t)
	link(t, node, "eth0", "10.99.0.1/24", attacker, "eth0", "10.99.0.2/24")

	c := New(f.tab, ipset.IPv4, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	vxlan := listenUDP(t, node, "0.0.0.0:4789")
	var ipip net.PacketConn
	if err := node.Do(func(ns.NetNS) error {
		var err error
		ipip, err = net.ListenPacket("ip4:4", "0.0.0.0")
		return err
	}); err != nil {
		t.Logf("raw IPIP socket unavailable, IPIP checks skipped: %v", err)
		ipip = nil
	} else {
		defer ipip.Close()
	}
	sendIPIP := func() {
		t.Helper()
		err := attacker.Do(func(ns.NetNS) error {
			c, err := net.Dial("ip4:4", "10.99.0.1")
			if err != nil {
				return err
			}
			defer c.Close()
			// An inner IPv4 header (10.244.9.9 → 10.244.0.2, UDP) as a
			// real IPIP packet would carry.
			inner := []byte{0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 244, 9, 9, 10, 244, 0, 2}
			_, err = c.Write(inner)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	const (
		vxlanAccept = iota
		vxlanDrop
		ipipAccept
		ipipDrop
	)

	// Not a peer: dropped and counted.
	sendUDP(t, attacker, "10.99.0.1:4789", "vxlan-1")
	waitPackets(t, f.tab, "filter", InputChain, vxlanDrop, 1)
	if p, _, ok := recv(t, vxlan, 200*time.Millisecond); ok {
		t.Fatalf("listener on 4789 received %q from a non-peer", p)
	}
	if ipip != nil {
		sendIPIP()
		waitPackets(t, f.tab, "filter", InputChain, ipipDrop, 1)
		if _, src, ok := recv(t, ipip, 200*time.Millisecond); ok {
			t.Fatalf("IPIP from non-peer %s reached the node", src)
		}
	}

	// Not a peer, to the limited broadcast address: the node delivers
	// broadcast UDP to every socket bound to the port, the VXLAN device's
	// included, so it is dropped and counted too.
	sendBroadcast(t, attacker, "10.99.0.2", "255.255.255.255:4789", "vxlan-bcast")
	waitPackets(t, f.tab, "filter", InputChain, vxlanDrop, 2)
	if p, _, ok := recv(t, vxlan, 200*time.Millisecond); ok {
		t.Fatalf("listener on 4789 received %q, broadcast by a non-peer", p)
	}

	// Made a peer: accepted.
	for _, base := range []string{ipset.VXLANPeers, ipset.IPIPPeers} {
		if err := f.sets.Set(base, ipset.IPv4, []netip.Prefix{mustPrefix(t, "10.99.0.3/32"), mustPrefix(t, "10.99.0.2/32")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.sets.Apply(); err != nil {
		t.Fatal(err)
	}
	mustDeliver(t, attacker, "10.99.0.1:4789", vxlan, "vxlan-2", "10.99.0.2", "peer's VXLAN")
	waitPackets(t, f.tab, "filter", InputChain, vxlanAccept, 1)
	if ipip != nil {
		sendIPIP()
		if _, src, ok := recv(t, ipip, 5*time.Second); !ok || src != "10.99.0.2" {
			t.Fatalf("peer's IPIP not received (from %q, ok %v)", src, ok)
		}
		waitPackets(t, f.tab, "filter", InputChain, ipipAccept, 1)
	}

	// Removed again: dropped again.
	if err := f.sets.Set(ipset.VXLANPeers, ipset.IPv4, []netip.Prefix{mustPrefix(t, "10.99.0.3/32")}); err != nil {
		t.Fatal(err)
	}
	if err := f.sets.Apply(); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, attacker, "10.99.0.1:4789", "vxlan-3")
	waitPackets(t, f.tab, "filter", InputChain, vxlanDrop, 3)
	if p, _, ok := recv(t, vxlan, 200*time.Millisecond); ok {
		t.Fatalf("listener received %q after the peer was removed", p)
	}
}

// TestWireGuardAllowlistTraffic: with encryption on, UDP to the WireGuard
// port from an address not in the WireGuard peers set is dropped and
// counted, broadcast included, and reaches no listener on the port; once
// the sender is a member it is accepted; removed, it is dropped again.
func TestWireGuardAllowlistTraffic(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) { testWireGuardAllowlistTraffic(t, backend) })
	}
}

func testWireGuardAllowlistTraffic(t *testing.T, backend string) {
	const port = "51821" // not the default: the configured port is the one guarded
	cfg := Config{WireGuard: true, WireGuardPort: 51821}
	f := newFixture(t, backend, ipset.IPv4, cfg, map[string][]string{ipset.WireGuardPeers: {"10.99.0.3/32"}})
	node := f.n
	sender := newNS(t)
	link(t, node, "eth0", "10.99.0.1/24", sender, "eth0", "10.99.0.2/24")

	c := New(f.tab, ipset.IPv4, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	wg := listenUDP(t, node, "0.0.0.0:"+port)
	other := listenUDP(t, node, "0.0.0.0:51820")
	const (
		wgAccept = iota
		wgDrop
	)

	// Not a member: dropped and counted, unicast and broadcast.
	sendUDP(t, sender, "10.99.0.1:"+port, "wg-1")
	waitPackets(t, f.tab, "filter", InputChain, wgDrop, 1)
	if p, _, ok := recv(t, wg, 200*time.Millisecond); ok {
		t.Fatalf("listener on %s received %q from a non-member", port, p)
	}
	sendBroadcast(t, sender, "10.99.0.2", "255.255.255.255:"+port, "wg-bcast")
	waitPackets(t, f.tab, "filter", InputChain, wgDrop, 2)
	if p, _, ok := recv(t, wg, 200*time.Millisecond); ok {
		t.Fatalf("listener on %s received %q, broadcast by a non-member", port, p)
	}
	// Another port is not the rule's business.
	mustDeliver(t, sender, "10.99.0.1:51820", other, "not-wg", "10.99.0.2", "UDP to a port other than the WireGuard port")

	// A member: accepted.
	if err := f.sets.Set(ipset.WireGuardPeers, ipset.IPv4, []netip.Prefix{mustPrefix(t, "10.99.0.3/32"), mustPrefix(t, "10.99.0.2/32")}); err != nil {
		t.Fatal(err)
	}
	if err := f.sets.Apply(); err != nil {
		t.Fatal(err)
	}
	mustDeliver(t, sender, "10.99.0.1:"+port, wg, "wg-2", "10.99.0.2", "member's WireGuard")
	waitPackets(t, f.tab, "filter", InputChain, wgAccept, 1)

	// Removed again: dropped again.
	if err := f.sets.Set(ipset.WireGuardPeers, ipset.IPv4, []netip.Prefix{mustPrefix(t, "10.99.0.3/32")}); err != nil {
		t.Fatal(err)
	}
	if err := f.sets.Apply(); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, sender, "10.99.0.1:"+port, "wg-3")
	waitPackets(t, f.tab, "filter", InputChain, wgDrop, 3)
	if p, _, ok := recv(t, wg, 200*time.Millisecond); ok {
		t.Fatalf("listener received %q after the member was removed", p)
	}
}

// sendBroadcast sends one datagram from inside n, from local address src,
// to the broadcast address dst.
func sendBroadcast(t *testing.T, n ns.NetNS, src, dst, payload string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
			}); err != nil {
				return err
			}
			return serr
		}}
		c, err := lc.ListenPacket(context.Background(), "udp4", src+":0")
		if err != nil {
			return err
		}
		defer c.Close()
		to, err := net.ResolveUDPAddr("udp4", dst)
		if err != nil {
			return err
		}
		_, err = c.WriteTo([]byte(payload), to)
		return err
	})
	if err != nil {
		t.Fatalf("broadcast to %s from %s: %v", dst, src, err)
	}
}

// podNode builds a node namespace with two pods behind cali veths (pod
// addresses 10.244.0.2 and .3, /32 each, gateway 169.254.1.1 as routelet
// wires them) and an "outside" namespace on a second link (node 10.99.1.1,
// outside 10.99.1.2). The node forwards with FORWARD policy DROP.
func podNode(t *testing.T, f *fixture) (pod1, pod2, outside ns.NetNS) {
	t.Helper()
	node := f.n
	pod1, pod2, outside = newNS(t), newNS(t), newNS(t)
	link(t, node, "eth1", "10.99.1.1/24", outside, "eth0", "10.99.1.2/24")
	for i, p := range []ns.NetNS{pod1, pod2} {
		dev, ip := []string{"caliaaaa", "calibbbb"}[i], []string{"10.244.0.2", "10.244.0.3"}[i]
		link(t, node, dev, "", p, "eth0", ip+"/32")
		sysctl(t, node, "net/ipv4/conf/"+dev+"/proxy_arp", "1")
		sh(t, node, "ip route add "+ip+"/32 dev "+dev)
		sh(t, p, "ip route add 169.254.1.1 dev eth0 scope link")
		sh(t, p, "ip route add default via 169.254.1.1 dev eth0")
	}
	// proxy ARP answers for 169.254.1.1 only when the node has a route to it.
	sh(t, node, "ip route add default via 10.99.1.2 dev eth1")
	sysctl(t, node, "net/ipv4/ip_forward", "1")
	f.run(t, "-P", "FORWARD", "DROP")
	return pod1, pod2, outside
}

// TestForwardAndNATTraffic: with FORWARD policy DROP pods reach each other
// only through ROUTELET-FORWARD; with NAT outgoing the outside sees the
// node's address, while pod-to-pod traffic keeps the pod's source.
func TestForwardAndNATTraffic(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) { testForwardAndNAT(t, backend) })
	}
}

func testForwardAndNAT(t *testing.T, backend string) {
	cfg := Config{VXLAN: true, NATOutgoing: true}
	f := newFixture(t, backend, ipset.IPv4, cfg, map[string][]string{ipset.Pools: {"10.244.0.0/16"}, ipset.NATPools: {"10.244.0.0/16"}})
	pod1, pod2, outside := podNode(t, f)
	ctx := context.Background()

	// Control: without routelet's chains the DROP policy stops pods.
	if _, err := netnstest.Exec(ctx, pod1, "ping", "-n", "-c", "1", "-W", "1", "10.244.0.3"); err == nil {
		t.Fatal("pods reached each other through a FORWARD policy DROP without routelet's rules: the test proves nothing")
	}

	c := New(f.tab, ipset.IPv4, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if out, err := netnstest.Ping(ctx, pod1, "10.244.0.3", 1); err != nil {
		t.Fatalf("pod-to-pod with FORWARD policy DROP: %v\n%s", err, out)
	}

	// NAT outgoing: the outside sees the node's address.
	out := listenUDP(t, outside, "0.0.0.0:9000")
	mustDeliver(t, pod1, "10.99.1.2:9000", out, "to-outside", "10.99.1.1", "pod to outside, from the node's address")
	if out, err := netnstest.Ping(ctx, pod1, "10.99.1.2", 1); err != nil {
		t.Fatalf("pod to outside (replies need the masquerade): %v\n%s", err, out)
	}
	// Pod to pod: not masqueraded.
	in := listenUDP(t, pod2, "0.0.0.0:9001")
	mustDeliver(t, pod1, "10.244.0.3:9001", in, "to-pod", "10.244.0.2", "pod to pod, from the pod's own address")

	// NAT outgoing off: the pod's address leaves unchanged.
	if err := c.SetConfig(Config{VXLAN: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	mustDeliver(t, pod1, "10.99.1.2:9000", out, "no-nat", "10.244.0.2", "pod to outside with NAT outgoing off")
}

// TestOlderPreroutingRemoved: a node upgraded from a routelet that kept
// the pod source check in raw PREROUTING (the chain, its rules and both
// forms of its jump, written with the iptables binary): the first Apply
// removes the chain and the jumps and someone else's raw rule stays; with
// nf_tables and nothing else in it, the raw table goes too, so no raw
// hook is left registered on routelet's account.
func TestOlderPreroutingRemoved(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		for _, other := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/other=%v", backend, other), func(t *testing.T) { testOlderPreroutingRemoved(t, backend, other) })
		}
	}
}

func testOlderPreroutingRemoved(t *testing.T, backend string, other bool) {
	cfg := Config{VXLAN: true}
	f := newFixture(t, backend, ipset.IPv4, cfg, nil)
	f.run(t, "-t", "raw", "-N", PreroutingChain)
	f.run(t, "-t", "raw", "-A", PreroutingChain, "-i", "cali+", "-m", "rpfilter", "--invert", "-j", "DROP")
	f.run(t, "-t", "raw", "-A", PreroutingChain, "-i", "cali+", "-p", "udp", "--dport", "4789", "-j", "DROP")
	f.run(t, "-t", "raw", "-I", "PREROUTING", "1", "-i", "cali+", "-j", PreroutingChain)
	f.run(t, "-t", "raw", "-A", "PREROUTING", "-j", PreroutingChain)
	if other {
		f.run(t, "-t", "raw", "-A", "PREROUTING", "-s", "192.0.2.1/32", "-j", "DROP")
	}
	c := New(f.tab, ipset.IPv4, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.wantKernel(t, cfg, ipset.IPv4, false)
	exists, err := f.tab.HasTable(TableRaw)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case backend == BackendNFT && !other:
		if exists {
			t.Errorf("nft: the raw table is left after removing routelet's chain from it:\n%s", f.run(t, "-t", "raw", "-S"))
		}
	default:
		got := strings.TrimSpace(f.run(t, "-t", "raw", "-S"))
		want := "-P PREROUTING ACCEPT\n-P OUTPUT ACCEPT"
		if other {
			want += "\n-A PREROUTING -s 192.0.2.1/32 -j DROP"
		}
		if got != want {
			t.Errorf("raw table after Apply:\n%s\nwant\n%s", got, want)
		}
	}
}
