package allowlist

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
)

// addPod attaches a fresh pod namespace to the node with the real plugin
// through libcni and returns it with its IPv4 address. It is detached and
// removed when the test ends.
func (c *lan) addPod(t *testing.T, name string) (ns.NetNS, string) {
	t.Helper()
	p, ips := c.addPodIn(t, name, nodeBlock)
	for _, ip := range ips {
		if !strings.Contains(ip, ":") {
			return p, ip
		}
	}
	t.Fatalf("ADD %s: no IPv4 address in %v", name, ips)
	return nil, ""
}

// addPodIn attaches a pod with addresses from blocks (the conflist's
// ipam.blocks) and returns it with its addresses, IPv4 first.
func (c *lan) addPodIn(t *testing.T, name string, blocks ...string) (ns.NetNS, []string) {
	t.Helper()
	list, err := netnstest.RouteletConf{Name: "allow", CNIVersion: "1.1.0", StateDir: c.stateDir, Blocks: blocks}.ConfList()
	if err != nil {
		t.Fatal(err)
	}
	p := newNS(t, name+"-"+randHex())
	rt := &libcni.RuntimeConf{ContainerID: "ctr-" + netnstest.Name(p), NetNS: p.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "allow"}, {"K8S_POD_NAME", name}}}
	raw, err := c.node.Add(context.Background(), list, rt)
	if err != nil {
		t.Fatalf("ADD %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := c.node.Del(context.Background(), list, rt); err != nil {
			t.Errorf("DEL %s: %v", name, err)
		}
	})
	res, err := types100.NewResultFromResult(raw)
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range res.IPs {
		ips = append(ips, ip.Address.IP.String())
	}
	slices.SortFunc(ips, func(a, b string) int { return strings.Count(a, ":") - strings.Count(b, ":") })
	return p, ips
}

// listenUDP opens a UDP socket on port inside n.
func listenUDP(t *testing.T, n ns.NetNS, port string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	err := n.Do(func(ns.NetNS) error {
		var err error
		c, err = net.ListenPacket("udp4", ":"+port)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendUDP sends one datagram from inside n to dst.
func sendUDP(t *testing.T, n ns.NetNS, dst, payload string) {
	t.Helper()
	if err := netnstest.SendUDP(n, dst, payload); err != nil {
		t.Fatal(err)
	}
}

// sourceOf waits up to 5 s for payload on l and returns the source
// address it came from ("" when it never arrived).
func sourceOf(t *testing.T, l net.PacketConn, payload string) string {
	t.Helper()
	return arrival(t, l, payload, 5*time.Second)
}

// TestForwardAndNATOutgoing: with the node's FORWARD policy DROP (as Docker
// sets it) two pods attached by the plugin cannot talk until routeletd
// runs, then can; a pod reaches a host outside the cluster, which sees the
// node's address (NAT outgoing, on by default), while pod-to-pod traffic
// keeps the pod's address; with --nat-outgoing=false the outside sees the
// pod's own address.
func TestForwardAndNATOutgoing(t *testing.T) { eachBackend(t, testForwardAndNAT) }

func testForwardAndNAT(t *testing.T, backend string) {
	c := newLAN(t, backend)
	ctx := context.Background()
	c.mustIptables("-P", "FORWARD", "DROP")
	pod1, ip1 := c.addPod(t, "pod1")
	pod2, ip2 := c.addPod(t, "pod2")

	// Control: the plugin's routes alone do not get through the policy.
	if _, err := netnstest.Exec(ctx, pod1, "ping", "-n", "-c", "1", "-W", "1", ip2); err == nil {
		t.Fatal("pods reached each other through FORWARD policy DROP before routeletd ran: the test proves nothing")
	}

	d := c.startDaemon("--encapsulation=vxlan")
	if !strings.Contains(c.mustIptables("-S", "FORWARD"), "-P FORWARD DROP") {
		t.Fatal("routeletd changed the FORWARD policy; it must only add its own chain")
	}
	if out, err := netnstest.Ping(ctx, pod1, ip2, 2); err != nil {
		t.Fatalf("pod1 → pod2 with FORWARD policy DROP: %v\n%s", err, out)
	}

	// NAT outgoing (the default): the outside sees the node.
	out := listenUDP(t, c.outside, "9000")
	sendUDP(t, pod1, outsideIP+":9000", "to-outside")
	if src := sourceOf(t, out, "to-outside"); src != nodeIP {
		t.Fatalf("outside host saw pod traffic from %q, want the node's %s", src, nodeIP)
	}
	if out, err := netnstest.Ping(ctx, pod1, outsideIP, 2); err != nil {
		t.Fatalf("pod1 → outside (replies come back through the masquerade): %v\n%s", err, out)
	}
	// Pod to pod keeps the pod's address.
	in := listenUDP(t, pod2, "9001")
	sendUDP(t, pod1, ip2+":9001", "to-pod")
	if src := sourceOf(t, in, "to-pod"); src != ip1 {
		t.Fatalf("pod2 saw pod1's traffic from %q, want pod1's own %s", src, ip1)
	}

	// NAT outgoing off: the pod's own address leaves the node.
	if err := d.stop(); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	c.startDaemon("--encapsulation=vxlan", "--nat-outgoing=false")
	sendUDP(t, pod1, outsideIP+":9000", "no-nat")
	if src := sourceOf(t, out, "no-nat"); src != ip1 {
		t.Fatalf("with --nat-outgoing=false the outside saw %q, want pod1's %s", src, ip1)
	}
}

// forwardState is what a user would look at to see whether routeletd
// keeps its FORWARD accepts, per family: `iptables -S FORWARD` and
// `iptables -S ROUTELET-FORWARD`, and with iptables-nft whether nf_tables
// holds a FORWARD base chain (its hook costs every forwarded packet).
func (c *lan) forwardState(v6 bool) (jump, chain, baseChain bool) {
	c.t.Helper()
	hook, err := c.iptables(v6, "-S", "FORWARD")
	if err != nil {
		c.t.Fatal(err)
	}
	_, err = c.iptables(v6, "-S", firewall.ForwardChain)
	if c.backend != firewall.BackendNFT {
		return strings.Contains(hook, "-j "+firewall.ForwardChain), err == nil, true
	}
	conn, cerr := nftables.New(nftables.WithNetNSFd(int(c.node.NS.Fd())))
	if cerr != nil {
		c.t.Fatal(cerr)
	}
	family := nftables.TableFamilyIPv4
	if v6 {
		family = nftables.TableFamilyIPv6
	}
	chains, cerr := conn.ListChainsOfTableFamily(family)
	if cerr != nil {
		c.t.Fatal(cerr)
	}
	for _, ch := range chains {
		if ch.Table.Name == "filter" && ch.Name == "FORWARD" {
			baseChain = true
		}
	}
	return strings.Contains(hook, "-j "+firewall.ForwardChain), err == nil, baseChain
}

// TestForwardChainOnlyWhereItCanDrop: with the node's FORWARD policy ACCEPT
// and nothing in FORWARD, two pods attached by the plugin talk (IPv4 and
// IPv6) while routeletd keeps no ROUTELET-FORWARD and no jump to it (and,
// with iptables-nft, no FORWARD base chain), through two allowlist
// checks; after `iptables -P FORWARD DROP` and `ip6tables -P FORWARD DROP`
// (as Docker sets it) the pods talk again within a few seconds and the
// chains are back; with the policy ACCEPT again they go again.
func TestForwardChainOnlyWhereItCanDrop(t *testing.T) {
	eachBackend(t, testForwardChainOnlyWhereItCanDrop)
}

func testForwardChainOnlyWhereItCanDrop(t *testing.T, backend string) {
	c := newLAN(t, backend)
	ctx := context.Background()
	pod1, _ := c.addPodIn(t, "pod1", nodeBlock, nodeBlock6)
	_, ips2 := c.addPodIn(t, "pod2", nodeBlock, nodeBlock6)
	if len(ips2) != 2 {
		t.Fatalf("pod2 got %v, want an IPv4 and an IPv6 address", ips2)
	}
	c.startDaemon("--encapsulation=vxlan")
	talk := func(what string) {
		t.Helper()
		for _, ip := range ips2 {
			netnstest.Eventually(t, 20*time.Second, what+": pod1 → pod2 "+ip, func() bool {
				_, err := netnstest.Ping(ctx, pod1, ip, 1)
				return err == nil
			})
		}
	}
	// forwardIs waits until each family's state is installed (jump,
	// chain and base chain) or gone (none of them; legacy's built-in
	// chain always exists).
	forwardIs := func(what string, installed bool) {
		t.Helper()
		netnstest.Eventually(t, 20*time.Second, what, func() bool {
			for _, v6 := range []bool{false, true} {
				jump, chain, base := c.forwardState(v6)
				if jump != installed || chain != installed || base != (installed || backend != firewall.BackendNFT) {
					return false
				}
			}
			return true
		})
	}
	// twoChecks waits for two more allowlist checks.
	twoChecks := func() {
		t.Helper()
		checks := c.metric("routelet_allowlist_check_duration_seconds_count")
		netnstest.Eventually(t, 10*time.Second, "two allowlist checks", func() bool {
			return c.metric("routelet_allowlist_check_duration_seconds_count") >= checks+2
		})
	}

	talk("policy ACCEPT")
	forwardIs("policy ACCEPT: no ROUTELET-FORWARD, no jump, no nf_tables FORWARD base chain", false)
	twoChecks()
	forwardIs("policy ACCEPT, two checks later: still none", false)
	if r := c.metric("routelet_allowlist_repairs_total"); r != 0 {
		t.Fatalf("routelet_allowlist_repairs_total = %v with FORWARD never changed", r)
	}

	c.mustIptables("-P", "FORWARD", "DROP")
	if _, err := c.iptables(true, "-P", "FORWARD", "DROP"); err != nil {
		t.Fatal(err)
	}
	talk("policy DROP")
	forwardIs("policy DROP: ROUTELET-FORWARD and its jump back", true)
	for _, v6 := range []bool{false, true} {
		if hook, _ := c.iptables(v6, "-S", "FORWARD"); !strings.Contains(hook, "-P FORWARD DROP") {
			t.Fatalf("routeletd changed the FORWARD policy (v6 %v):\n%s", v6, hook)
		}
	}

	c.mustIptables("-P", "FORWARD", "ACCEPT")
	if _, err := c.iptables(true, "-P", "FORWARD", "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	forwardIs("policy ACCEPT again: ROUTELET-FORWARD and its jump gone", false)
	talk("policy ACCEPT again")
}
