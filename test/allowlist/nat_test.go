package allowlist

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
)

// natTables returns the nat tables of the node's namespace on the test's
// backend, read without creating any: for nft the nf_tables ruleset's
// tables (`nft list tables`: "ip nat", "ip6 nat"), for legacy the x_tables
// the kernel instantiated in the namespace (/proc/net/ip_tables_names and
// ip6_tables_names: "ip nat", "ip6 nat").
func (c *lan) natTables(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	if c.backend == firewall.BackendNFT {
		list := sh(t, c.node.NS, "nft list tables")
		for _, l := range strings.Split(list, "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "table" && f[2] == "nat" {
				out = append(out, f[1]+" nat")
			}
		}
		return out
	}
	for fam, file := range map[string]string{"ip": "/proc/net/ip_tables_names", "ip6": "/proc/net/ip6_tables_names"} {
		names, err := netnstest.Exec(ctx, c.node.NS, "cat", file)
		if err != nil {
			continue // no x_tables of that family at all
		}
		for _, n := range strings.Fields(names) {
			if n == "nat" {
				out = append(out, fam+" nat")
			}
		}
	}
	return out
}

// conntrackCount returns how many connections the node's conntrack table
// holds ("" when the kernel has no conntrack).
func (c *lan) conntrackCount(t *testing.T) string {
	t.Helper()
	out, err := netnstest.Exec(context.Background(), c.node.NS, "cat", "/proc/sys/net/netfilter/nf_conntrack_count")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// TestNATOutgoingOff: with --nat-outgoing=false routeletd leaves the node
// without a nat table (nft: none in the ruleset; legacy: none instantiated
// in the namespace), so no NAT hook and no conntrack run for it — a pod's
// traffic to the outside, with the pod's own address, leaves the
// conntrack table empty — and neither iptables nor ip6tables shows a
// ROUTELET-POSTROUTING chain or a jump to it. Switched off across a restart
// after a run with NAT, the chain and its jump are removed, and with nft
// the nat tables routelet had made are gone too.
func TestNATOutgoingOff(t *testing.T) { eachBackend(t, testNATOutgoingOff) }

func testNATOutgoingOff(t *testing.T, backend string) {
	c := newLAN(t, backend)
	if backend == firewall.BackendNFT {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skipf("nft not installed (Debian package nftables): %v", err)
		}
	}
	if got := c.natTables(t); len(got) != 0 {
		t.Fatalf("fresh node namespace already has nat tables %v: the test proves nothing", got)
	}
	c.writeNode("node-b", peerIP, peerBlock)
	d := c.startDaemon("--encapsulation=vxlan", "--nat-outgoing=false")
	pod, podIP := c.addPod(t, "nonat")
	out := listenUDP(t, c.outside, "9000")
	sendUDP(t, pod, outsideIP+":9000", "no-nat")
	if src := sourceOf(t, out, "no-nat"); src != podIP {
		t.Fatalf("with --nat-outgoing=false the outside saw %q, want the pod's %s", src, podIP)
	}
	if got := c.natTables(t); len(got) != 0 {
		t.Fatalf("with --nat-outgoing=false the node has nat tables %v; want none", got)
	}
	if n := c.conntrackCount(t); n != "" && n != "0" {
		t.Fatalf("with --nat-outgoing=false the node tracks %s connections after pod traffic; want none (no conntrack hooks)", n)
	}
	noChain := func(when string) {
		t.Helper()
		for _, v6 := range []bool{false, true} {
			s, err := c.iptables(v6, "-t", "nat", "-S")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(s, firewall.PostroutingChain) {
				t.Fatalf("%s: nat table (v6 %v) still has routelet's chain or jump:\n%s", when, v6, s)
			}
		}
	}

	// On, then off again across restarts.
	if err := d.stop(); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	d = c.startDaemon("--encapsulation=vxlan")
	netnstest.Eventually(t, 5*time.Second, "ROUTELET-POSTROUTING with NAT on", func() bool {
		return strings.Contains(c.chain("nat", "POSTROUTING"), "-j "+firewall.PostroutingChain)
	})
	if err := d.stop(); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	c.startDaemon("--encapsulation=vxlan", "--nat-outgoing=false")
	if backend == firewall.BackendNFT {
		netnstest.Eventually(t, 5*time.Second, "nat tables routelet made gone after NAT was switched off", func() bool {
			return len(c.natTables(t)) == 0
		})
	}
	noChain("NAT switched off")
	sendUDP(t, pod, outsideIP+":9000", "off-again")
	if src := sourceOf(t, out, "off-again"); src != podIP {
		t.Fatalf("after NAT was switched off the outside saw %q, want the pod's %s", src, podIP)
	}
}

// TestNATOutgoingPerPool: with --nat-outgoing-pool naming one of the node's
// two pod CIDRs, a pod of that pool reaches the outside with the node's
// address and a pod of the other with its own; naming the other pool
// instead (after a restart) swaps that.
func TestNATOutgoingPerPool(t *testing.T) { eachBackend(t, testNATOutgoingPerPool) }

func testNATOutgoingPerPool(t *testing.T, backend string) {
	const otherBlock = "10.244.3.0/24"
	c := newLAN(t, backend)
	d := c.startDaemon("--encapsulation=vxlan", "--pod-cidr="+otherBlock, "--nat-outgoing-pool="+nodeBlock)
	pod1, ips1 := c.addPodIn(t, "pool1", nodeBlock)
	pod2, ips2 := c.addPodIn(t, "pool2", otherBlock)
	out := listenUDP(t, c.outside, "9000")
	expect := func(when string, wantSrc1, wantSrc2 string) {
		t.Helper()
		for i, p := range []struct {
			pod  ns.NetNS
			want string
		}{{pod1, wantSrc1}, {pod2, wantSrc2}} {
			payload := fmt.Sprintf("%s-%d", when, i+1)
			sendUDP(t, p.pod, outsideIP+":9000", payload)
			if src := sourceOf(t, out, payload); src != p.want {
				t.Fatalf("%s: pod%d's traffic reached the outside from %q, want %s", when, i+1, src, p.want)
			}
		}
	}
	expect("pool1-nat", nodeIP, ips2[0])
	if err := d.stop(); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	c.startDaemon("--encapsulation=vxlan", "--pod-cidr="+otherBlock, "--nat-outgoing-pool="+otherBlock)
	expect("pool2-nat", ips1[0], nodeIP)
}
