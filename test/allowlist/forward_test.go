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

	"github.com/routelet/routelet/internal/netnstest"
)

// addPod attaches a fresh pod namespace to the node with the real plugin
// through libcni and returns it with its IPv4 address. It is detached and
// removed when the test ends.
func (c *cluster) addPod(t *testing.T, name string) (ns.NetNS, string) {
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
func (c *cluster) addPodIn(t *testing.T, name string, blocks ...string) (ns.NetNS, []string) {
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
	c := newCluster(t, backend)
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
