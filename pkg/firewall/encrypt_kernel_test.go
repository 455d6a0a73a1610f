package firewall

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/ipset"
)

// TestEncryptionGuardTraffic: with encryption on, a packet to a pod CIDR
// that the routes send out of neither the WireGuard device nor a pod veth
// (the WireGuard device gone, its routes with it: a peer's block follows
// the default route onto the underlay) is dropped and counted by
// ROUTELET-ENCRYPT, whether the node sends it or forwards it from a pod,
// and reaches nothing; the same packet routed out of a link named like the
// WireGuard device (a veth here: the guard goes by name), to a pod of the
// node through its veth, or to the node's own tunnel address (loopback)
// passes. FORWARD's policy stays ACCEPT with nothing in it: the guard
// must hold there too. Without the rules (before, and once encryption is
// off) the leaking packets reach the underlay.
func TestEncryptionGuardTraffic(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) { testEncryptionGuardTraffic(t, backend) })
	}
}

func testEncryptionGuardTraffic(t *testing.T, backend string) {
	cfg := Config{WireGuard: true}
	f := newFixture(t, backend, ipset.IPv4, cfg, map[string][]string{ipset.Pools: {"10.244.0.0/16"}})
	node := f.n
	wire, peer, pod := newNS(t), newNS(t), newNS(t)

	// The underlay: the node's default route. A peer's pod address
	// (10.244.5.7) answers there, as whatever a plaintext packet would
	// reach; it routes the node's block back through the node.
	link(t, node, "eth0", "10.99.0.1/24", wire, "eth0", "10.99.0.2/24")
	sh(t, wire, "ip addr add 10.244.5.7/32 dev eth0")
	sh(t, wire, "ip route add 10.244.0.0/24 via 10.99.0.1 dev eth0")
	sh(t, node, "ip route add default via 10.99.0.2 dev eth0")
	// A link named like the WireGuard device, with the node's tunnel
	// address, and another peer's block routed into it.
	link(t, node, defaults.DeviceWireGuard, "10.244.0.1/32", peer, "eth0", "10.244.6.7/32")
	sh(t, node, "ip route add 10.244.6.0/24 dev "+defaults.DeviceWireGuard+" src 10.244.0.1")
	sh(t, peer, "ip route add default dev eth0")
	// A pod of this node behind its veth, wired as routelet wires it.
	link(t, node, "cali1234", "", pod, "eth0", "10.244.0.5/32")
	sysctl(t, node, "net/ipv4/conf/cali1234/proxy_arp", "1")
	sh(t, node, "ip route add 10.244.0.5/32 dev cali1234 src 10.244.0.1")
	sh(t, pod, "ip route add 169.254.1.1 dev eth0 scope link")
	sh(t, pod, "ip route add default via 169.254.1.1 dev eth0")
	sysctl(t, node, "net/ipv4/ip_forward", "1")

	leaked := listenUDP(t, wire, "0.0.0.0:9000")
	tunnelled := listenUDP(t, peer, "0.0.0.0:9000")
	toPod := listenUDP(t, pod, "0.0.0.0:9000")
	toTunnelAddr := listenUDP(t, node, "10.244.0.1:9000")

	// Control: without the rules the node's and the pod's packets to the
	// peer's pod leave on the underlay.
	mustDeliver(t, node, "10.244.5.7:9000", leaked, "control-node", "10.99.0.1", "node to a peer's pod over the underlay, no rules")
	mustDeliver(t, pod, "10.244.5.7:9000", leaked, "control-pod", "10.244.0.5", "pod to a peer's pod over the underlay, no rules")

	c := New(f.tab, ipset.IPv4, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.wantKernel(t, cfg, ipset.IPv4, false)
	const drop = 3 // the guard's drop rule

	// Sent by the node: refused in OUTPUT (the sender sees EPERM), counted.
	if err := netnstest.SendUDP(node, "10.244.5.7:9000", "leak-node"); err != nil && !errors.Is(err, syscall.EPERM) {
		t.Fatalf("node's packet to a peer's pod over the underlay: %v, want it sent or refused with EPERM", err)
	}
	waitPackets(t, f.tab, TableFilter, EncryptChain, drop, 1)
	mustNotReceive(t, leaked, "the node's packet to a peer's pod out of the underlay")
	// Forwarded from a pod: dropped in FORWARD, counted.
	sendUDP(t, pod, "10.244.5.7:9000", "leak-pod")
	waitPackets(t, f.tab, TableFilter, EncryptChain, drop, 2)
	mustNotReceive(t, leaked, "a pod's packet to a peer's pod out of the underlay")

	// Out of the WireGuard device, to a local pod, to the tunnel address:
	// passed, and not counted.
	mustDeliver(t, node, "10.244.6.7:9000", tunnelled, "wg-node", "10.244.0.1", "node to a peer's pod through the WireGuard device")
	mustDeliver(t, pod, "10.244.6.7:9000", tunnelled, "wg-pod", "10.244.0.5", "pod to a peer's pod through the WireGuard device")
	mustDeliver(t, node, "10.244.0.5:9000", toPod, "host-pod", "10.244.0.1", "node to its own pod through the pod's veth")
	mustDeliver(t, pod, "10.244.0.1:9000", toTunnelAddr, "pod-tunnel", "10.244.0.5", "pod to the node's tunnel address")
	mustDeliver(t, node, "10.244.0.1:9000", toTunnelAddr, "node-tunnel", "10.244.0.1", "node to its own tunnel address (loopback)")
	if p, err := f.tab.packets(TableFilter, EncryptChain); err != nil || p[drop] != 2 {
		t.Fatalf("guard's drop counted %v (%v) after traffic it must pass, want still 2", p, err)
	}

	// Encryption off: the rules go, and the packets leak again.
	if err := c.SetConfig(Config{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	f.wantKernel(t, Config{}, ipset.IPv4, false)
	f.wantNoChain(t, Chain{Table: TableFilter, Name: EncryptChain, Hook: "OUTPUT"})
	mustDeliver(t, node, "10.244.5.7:9000", leaked, "off-node", "10.99.0.1", "node to a peer's pod over the underlay, encryption off")
	mustDeliver(t, pod, "10.244.5.7:9000", leaked, "off-pod", "10.244.0.5", "pod to a peer's pod over the underlay, encryption off")

	// Cleanup with the guard in place: ROUTELET-FORWARD, which jumps to
	// it, goes first, so the kernel lets the guard go too.
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if err := Cleanup(f.tab, quiet); err != nil {
		t.Fatalf("Cleanup with the guard installed: %v", err)
	}
	if out := f.run(t, "-S"); strings.Contains(out, "ROUTELET") {
		t.Fatalf("after Cleanup the filter table still mentions routelet:\n%s", out)
	}
}

// mustNotReceive fails t when c receives anything within 300 ms; what
// names the packet.
func mustNotReceive(t *testing.T, c net.PacketConn, what string) {
	t.Helper()
	if p, from, ok := recv(t, c, 300*time.Millisecond); ok {
		t.Fatalf("%s: received %q from %s, want it dropped", what, p, from)
	}
}

// TestEncryptionGuardTraffic6 is TestEncryptionGuardTraffic over IPv6
// (ip6tables, routelet-pools-v6): leaking packets dropped and counted,
// the WireGuard device's, a pod veth's and loopback's passed.
func TestEncryptionGuardTraffic6(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) { testEncryptionGuardTraffic6(t, backend) })
	}
}

func testEncryptionGuardTraffic6(t *testing.T, backend string) {
	cfg := Config{WireGuard: true}
	f := newFixture(t, backend, ipset.IPv6, cfg, map[string][]string{ipset.Pools: {"fd00:244::/32"}})
	node := f.n
	wire, peer, pod := newNS(t), newNS(t), newNS(t)

	link(t, node, "eth0", "", wire, "eth0", "")
	sh(t, node, "ip addr add fd00:99::1/64 dev eth0 nodad")
	sh(t, wire, "ip addr add fd00:99::2/64 dev eth0 nodad")
	sh(t, wire, "ip addr add fd00:244:5::7/128 dev eth0 nodad")
	sh(t, wire, "ip route add fd00:244::/64 via fd00:99::1 dev eth0")
	sh(t, node, "ip route add default via fd00:99::2 dev eth0")
	link(t, node, defaults.DeviceWireGuard, "", peer, "eth0", "")
	sh(t, node, "ip addr add fd00:244::1/128 dev "+defaults.DeviceWireGuard+" nodad")
	sh(t, peer, "ip addr add fd00:244:6::7/128 dev eth0 nodad")
	sh(t, node, "ip route add fd00:244:6::/64 dev "+defaults.DeviceWireGuard+" src fd00:244::1")
	sh(t, peer, "ip route add default dev eth0")
	link(t, node, "cali1234", "", pod, "eth0", "")
	sh(t, node, "ip addr add fe80::1/64 dev cali1234 nodad")
	sh(t, pod, "ip addr add fd00:244::5/128 dev eth0 nodad")
	sh(t, node, "ip route add fd00:244::5/128 dev cali1234 src fd00:244::1")
	sh(t, pod, "ip route add default via fe80::1 dev eth0")
	sysctl(t, node, "net/ipv6/conf/all/forwarding", "1")

	leaked := listenUDP(t, wire, "[::]:9000")
	tunnelled := listenUDP(t, peer, "[::]:9000")
	toPod := listenUDP(t, pod, "[::]:9000")
	toTunnelAddr := listenUDP(t, node, "[fd00:244::1]:9000")

	mustDeliver(t, node, "[fd00:244:5::7]:9000", leaked, "control-node", "fd00:99::1", "node to a peer's pod over the underlay, no rules")
	mustDeliver(t, pod, "[fd00:244:5::7]:9000", leaked, "control-pod", "fd00:244::5", "pod to a peer's pod over the underlay, no rules")

	c := New(f.tab, ipset.IPv6, quiet)
	if err := c.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	const drop = 3
	if err := netnstest.SendUDP(node, "[fd00:244:5::7]:9000", "leak-node"); err != nil && !errors.Is(err, syscall.EPERM) {
		t.Fatalf("node's packet to a peer's pod over the underlay: %v, want it sent or refused with EPERM", err)
	}
	waitPackets(t, f.tab, TableFilter, EncryptChain, drop, 1)
	mustNotReceive(t, leaked, "the node's packet to a peer's pod out of the underlay")
	sendUDP(t, pod, "[fd00:244:5::7]:9000", "leak-pod")
	waitPackets(t, f.tab, TableFilter, EncryptChain, drop, 2)
	mustNotReceive(t, leaked, "a pod's packet to a peer's pod out of the underlay")

	mustDeliver(t, node, "[fd00:244:6::7]:9000", tunnelled, "wg-node", "fd00:244::1", "node to a peer's pod through the WireGuard device")
	mustDeliver(t, pod, "[fd00:244:6::7]:9000", tunnelled, "wg-pod", "fd00:244::5", "pod to a peer's pod through the WireGuard device")
	mustDeliver(t, node, "[fd00:244::5]:9000", toPod, "host-pod", "fd00:244::1", "node to its own pod through the pod's veth")
	mustDeliver(t, node, "[fd00:244::1]:9000", toTunnelAddr, "node-tunnel", "fd00:244::1", "node to its own tunnel address (loopback)")
	if p, err := f.tab.packets(TableFilter, EncryptChain); err != nil || p[drop] != 2 {
		t.Fatalf("guard's drop counted %v (%v) after traffic it must pass, want still 2", p, err)
	}

	if err := c.SetConfig(Config{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	mustDeliver(t, node, "[fd00:244:5::7]:9000", leaked, "off-node", "fd00:99::1", "node to a peer's pod over the underlay, encryption off")
	mustDeliver(t, pod, "[fd00:244:5::7]:9000", leaked, "off-pod", "fd00:244::5", "pod to a peer's pod over the underlay, encryption off")
}
