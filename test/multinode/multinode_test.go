package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/state"
)

// Overlay MTUs on the 1500-byte underlay: VXLAN over IPv4 costs 50 bytes,
// over IPv6 70. A dual-stack node publishes the smaller as its pod MTU.
const (
	mtuV4  = 1450
	mtuV6  = 1430
	podMTU = mtuV6
)

// sameSubnet reports whether two nodes share an underlay subnet (a and b).
func sameSubnet(x, y *node) bool { return x.Spec.Gw4 == y.Spec.Gw4 }

// firstAddr is a block's first address: the node's tunnel address.
func firstAddr(block string) string { return netip.MustParsePrefix(block).Addr().String() }

func hostAddr(cidr string) string { return netip.MustParsePrefix(cidr).Addr().String() }

// expected is the dataplane node n must hold towards its peers in mode
// ("vxlan", "vxlan-cross-subnet" or "none"), given the peers it knows.
func expected(n *node, mode string, peers []*node) dataplane {
	var d dataplane
	vxlan := mode != "none"
	for _, p := range peers {
		direct := mode != "vxlan" && sameSubnet(n, p)
		switch {
		case direct:
			d.Routes4 = append(d.Routes4, fmt.Sprintf("%s via %s dev eth0", p.Spec.Block4, hostAddr(p.Spec.Host4)))
			d.Routes6 = append(d.Routes6, fmt.Sprintf("%s via %s dev eth0", p.Spec.Block6, hostAddr(p.Spec.Host6)))
		case vxlan:
			d.Routes4 = append(d.Routes4, fmt.Sprintf("%s via %s dev vxlan.calico onlink mtu %d", p.Spec.Block4, firstAddr(p.Spec.Block4), mtuV4))
			d.Routes6 = append(d.Routes6, fmt.Sprintf("%s via %s dev vxlan-v6.calico onlink mtu %d", p.Spec.Block6, firstAddr(p.Spec.Block6), mtuV6))
		}
		if vxlan {
			// Every peer's VTEP is programmed, also those reached directly.
			mac4, mac6 := overlay.VTEPMAC(p.Spec.Name, 4), overlay.VTEPMAC(p.Spec.Name, 6)
			d.Neigh4 = append(d.Neigh4, fmt.Sprintf("%s lladdr %s", firstAddr(p.Spec.Block4), mac4))
			d.FDB4 = append(d.FDB4, fmt.Sprintf("%s dst %s", mac4, hostAddr(p.Spec.Host4)))
			d.Neigh6 = append(d.Neigh6, fmt.Sprintf("%s lladdr %s", firstAddr(p.Spec.Block6), mac6))
			d.FDB6 = append(d.FDB6, fmt.Sprintf("%s dst %s", mac6, hostAddr(p.Spec.Host6)))
		}
	}
	for _, s := range []*[]string{&d.Routes4, &d.Routes6, &d.Neigh4, &d.FDB4, &d.Neigh6, &d.FDB6} {
		slices.Sort(*s)
	}
	return d
}

// peersOf returns every node but n.
func (c *testCluster) peersOf(n *node) []*node {
	var out []*node
	for _, p := range c.nodes {
		if p != n {
			out = append(out, p)
		}
	}
	return out
}

// checkAll waits until every node holds exactly the expected dataplane.
func (c *testCluster) checkAll(mode string) {
	c.t.Helper()
	for _, n := range c.nodes {
		c.waitDataplane(n, 10*time.Second, "after start", expected(n, mode, c.peersOf(n)))
	}
}

// TestVXLAN: three dual-stack nodes over VXLAN (vxlan.calico and, over the
// IPv6 underlay, vxlan-v6.calico). Every pod reaches every other pod over
// IPv4 and IPv6, also the node behind the router; each node holds exactly
// one route, one ARP/NDP and one FDB entry per peer and family. Then the
// repairs and changes an operator would cause.
func TestVXLAN(t *testing.T) {
	c := newCluster(t, "--encapsulation=vxlan")
	c.checkAll("vxlan")
	if bad := c.reachability(func(_, _ *node) bool { return true }); len(bad) > 0 {
		t.Fatalf("pods that should reach each other do not:\n%s", strings.Join(bad, "\n"))
	}
	a, b, cn := c.node("a"), c.node("b"), c.node("c")

	// Our own record publishes what peers need.
	self, err := a.Store.GetNode("a")
	if err != nil {
		t.Fatal(err)
	}
	if self.VTEPMAC != overlay.VTEPMAC("a", 4).String() || self.TunnelIPv4 != "10.244.1.0" ||
		self.VTEPMACv6 != overlay.VTEPMAC("a", 6).String() || self.TunnelIPv6 != "fd00:244:1::" {
		t.Errorf("node a's record = %+v, want its VTEP MACs and tunnel addresses", self)
	}

	t.Run("pod MTU and a 1400-byte DF payload", func(t *testing.T) {
		st, err := a.Store.ReadDaemonStatus()
		if err != nil || st.PodMTU != podMTU {
			t.Fatalf("daemon.json podMTU = %+v, %v; want %d (1500 - 70, the IPv6 underlay's VXLAN overhead)", st, err, podMTU)
		}
		from, to := a.Pods[0], cn.Pods[0]
		var mtu int
		from.NS.Do(func(ns.NetNS) error {
			l, err := netlink.LinkByName("eth0")
			if err == nil {
				mtu = l.Attrs().MTU
			}
			return err
		})
		if mtu != podMTU {
			t.Errorf("pod eth0 MTU = %d, want %d from daemon.json", mtu, podMTU)
		}
		// 1372 bytes of ICMP payload + 8 (ICMP) + 20 (IPv4) = a 1400-byte
		// packet, with DF set (-M do): it must cross a→router→c whole.
		if out, err := from.Ping(t.Context(), to.IPv4, "-M", "do", "-s", "1372"); err != nil {
			t.Errorf("1400-byte DF packet %s → %s lost:\n%s", from.Name, to.IPv4, out)
		}
		// The largest packet the pod may send (its MTU) fits the tunnel: the
		// outer packet is then exactly 1500 bytes on the underlay.
		if out, err := from.Ping(t.Context(), to.IPv4, "-M", "do", "-s", fmt.Sprint(podMTU-28)); err != nil {
			t.Errorf("%d-byte DF packet (the pod MTU) %s → %s lost:\n%s", podMTU, from.Name, to.IPv4, out)
		}
		if out, err := from.Ping(t.Context(), to.IPv6, "-M", "do", "-s", fmt.Sprint(podMTU-48)); err != nil {
			t.Errorf("%d-byte IPv6 packet (the pod MTU) %s → %s lost:\n%s", podMTU, from.Name, to.IPv6, out)
		}
	})

	t.Run("vxlan device deleted is back within 1s with its routes", func(t *testing.T) {
		l, err := a.nl.LinkByName("vxlan.calico")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.nl.LinkDel(l); err != nil {
			t.Fatal(err)
		}
		c.waitDataplane(a, time.Second, "after ip link del vxlan.calico", expected(a, "vxlan", c.peersOf(a)))
		if out, err := a.Pods[0].Ping(t.Context(), cn.Pods[1].IPv4); err != nil {
			t.Errorf("pod a → pod c after the device came back:\n%s", out)
		}
	})

	t.Run("route, ARP and FDB entries deleted by hand are back within 1s", func(t *testing.T) {
		want := expected(a, "vxlan", c.peersOf(a))
		l, err := a.nl.LinkByName("vxlan.calico")
		if err != nil {
			t.Fatal(err)
		}
		idx := l.Attrs().Index
		dst := netip.MustParsePrefix(cn.Spec.Block4)
		if err := a.nl.RouteDel(&netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)}}); err != nil {
			t.Fatalf("ip route del %s: %v", dst, err)
		}
		c.waitDataplane(a, time.Second, "after ip route del "+dst.String(), want)
		if err := a.nl.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, IP: net.ParseIP(firstAddr(cn.Spec.Block4))}); err != nil {
			t.Fatalf("ip neigh del: %v", err)
		}
		c.waitDataplane(a, time.Second, "after ip neigh del", want)
		mac := overlay.VTEPMAC("c", 4)
		if err := a.nl.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			HardwareAddr: mac, IP: net.ParseIP(hostAddr(cn.Spec.Host4))}); err != nil {
			t.Fatalf("bridge fdb del: %v", err)
		}
		c.waitDataplane(a, time.Second, "after bridge fdb del", want)
	})

	t.Run("MTU changed by hand is corrected", func(t *testing.T) {
		l, err := a.nl.LinkByName("vxlan.calico")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.nl.LinkSetMTU(l, 1300); err != nil {
			t.Fatal(err)
		}
		netnstest.Eventually(t, time.Second, "vxlan.calico MTU back to 1450", func() bool {
			l, err := a.nl.LinkByName("vxlan.calico")
			return err == nil && l.Attrs().MTU == mtuV4
		})
	})

	t.Run("peer VTEP MAC changed in its record", func(t *testing.T) {
		path := filepath.Join(a.Store.NodesDir(), "b.json")
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var rec state.Node
		if err := json.Unmarshal(orig, &rec); err != nil {
			t.Fatal(err)
		}
		rec.VTEPMAC = "02:aa:bb:cc:dd:ee"
		changed, _ := json.Marshal(&rec)
		if err := os.WriteFile(path, changed, 0o600); err != nil {
			t.Fatal(err)
		}
		want := expected(a, "vxlan", c.peersOf(a))
		mac := overlay.VTEPMAC("b", 4).String()
		for i, s := range want.Neigh4 {
			want.Neigh4[i] = strings.ReplaceAll(s, mac, "02:aa:bb:cc:dd:ee")
		}
		for i, s := range want.FDB4 {
			want.FDB4[i] = strings.ReplaceAll(s, mac, "02:aa:bb:cc:dd:ee")
		}
		slices.Sort(want.FDB4)
		c.waitDataplane(a, 5*time.Second, "after b's VTEP MAC changed", want)
		// b's device still has its real MAC, so a's pods cannot reach b's
		// over IPv4 now; restoring the record restores them.
		if _, err := a.Pods[0].Ping(t.Context(), b.Pods[0].IPv4); err == nil {
			t.Errorf("pod a → pod b reachable through a wrong VTEP MAC")
		}
		if err := os.WriteFile(path, orig, 0o600); err != nil {
			t.Fatal(err)
		}
		c.waitDataplane(a, 5*time.Second, "after b's record was restored", expected(a, "vxlan", c.peersOf(a)))
		if out, err := a.Pods[0].Ping(t.Context(), b.Pods[0].IPv4); err != nil {
			t.Errorf("pod a → pod b after the record was restored:\n%s", out)
		}
	})

	t.Run("peer record removed", func(t *testing.T) {
		if err := os.Remove(filepath.Join(a.Store.NodesDir(), "c.json")); err != nil {
			t.Fatal(err)
		}
		c.waitDataplane(a, 5*time.Second, "after c's record was removed", expected(a, "vxlan", []*node{b}))
		if _, err := a.Pods[0].Ping(t.Context(), cn.Pods[0].IPv4); err == nil {
			t.Errorf("pod a → pod c still reachable after c's record was removed from a")
		}
		// The remaining peer is untouched.
		if out, err := a.Pods[0].Ping(t.Context(), b.Pods[1].IPv4); err != nil {
			t.Errorf("pod a → pod b after c's record was removed:\n%s", out)
		}
	})

	t.Run("routeletd cleanup removes the vxlan devices", func(t *testing.T) {
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
		// The dataplane outlives the daemon.
		if _, err := a.nl.LinkByName("vxlan.calico"); err != nil {
			t.Fatalf("vxlan.calico gone after SIGTERM: %v", err)
		}
		out, err := exec.Command("ip", "netns", "exec", netnstest.Name(a.CNI.NS), filepath.Join(binDir, "routeletd"),
			"cleanup", "--state-dir="+a.StateDir).CombinedOutput()
		if err != nil {
			t.Fatalf("routeletd cleanup: %v\n%s", err, out)
		}
		for _, dev := range []string{"vxlan.calico", "vxlan-v6.calico"} {
			if _, err := a.nl.LinkByName(dev); err == nil {
				t.Errorf("%s still present after cleanup", dev)
			}
		}
		if d, err := a.read(); err != nil || len(d.Routes4)+len(d.Routes6) != 0 {
			t.Errorf("overlay routes after cleanup: %v %v", d, err)
		}
	})
}

// TestVXLANCrossSubnet: a and b share a subnet and route each other's blocks
// directly over eth0, unencapsulated; c is reached (and reaches them)
// through VXLAN. Every pod reaches every other pod.
func TestVXLANCrossSubnet(t *testing.T) {
	c := newCluster(t, "--encapsulation=vxlan", "--cross-subnet")
	c.checkAll("vxlan-cross-subnet")
	if bad := c.reachability(func(_, _ *node) bool { return true }); len(bad) > 0 {
		t.Fatalf("pods that should reach each other do not:\n%s", strings.Join(bad, "\n"))
	}

	t.Run("mode switched at restart: the old mode's routes and devices go", func(t *testing.T) {
		a, b := c.node("a"), c.node("b")
		restart := func(mode ...string) {
			t.Helper()
			if err := c.c.Restart(context.Background(), a.Node, append(slices.Clone(baseArgs), mode...)...); err != nil {
				t.Fatal(err)
			}
		}
		// cross-subnet → vxlan: the direct route to b over eth0 is replaced
		// by one through vxlan.calico.
		restart("--encapsulation=vxlan")
		c.waitDataplane(a, 5*time.Second, "after a restart in vxlan mode", expected(a, "vxlan", c.peersOf(a)))
		if out, err := a.Pods[0].Ping(t.Context(), b.Pods[0].IPv4); err != nil {
			t.Errorf("pod a → pod b after the switch to vxlan:\n%s", out)
		}
		// vxlan → none: both VXLAN devices and every encapsulated route go;
		// b is routed directly again, c not at all.
		restart("--encapsulation=none")
		c.waitDataplane(a, 5*time.Second, "after a restart in none mode", expected(a, "none", c.peersOf(a)))
		for _, dev := range []string{"vxlan.calico", "vxlan-v6.calico"} {
			if _, err := a.nl.LinkByName(dev); err == nil {
				t.Errorf("%s still present after the switch to none", dev)
			}
		}
		if out, err := a.Pods[0].Ping(t.Context(), b.Pods[0].IPv6); err != nil {
			t.Errorf("pod a → pod b after the switch to none:\n%s", out)
		}
	})
}

// TestNoEncapsulation (host-gw): a and b route each other's blocks directly
// and their pods talk; c is behind a router that knows no pod routes, so
// host-gw cannot reach it — no node programs a route for it (a route via a
// gateway that is not on-link would not work) and pings between c's pods and
// the others fail, as a user of host-gw mode must expect. No VXLAN device
// exists on any node.
func TestNoEncapsulation(t *testing.T) {
	c := newCluster(t, "--encapsulation=none")
	c.checkAll("none")
	for _, n := range c.nodes {
		for _, dev := range []string{"vxlan.calico", "vxlan-v6.calico"} {
			if _, err := n.nl.LinkByName(dev); err == nil {
				t.Errorf("node %s has %s in encapsulation none", n.Spec.Name, dev)
			}
		}
		st, err := n.Store.ReadDaemonStatus()
		if err != nil || st.PodMTU != 1500 {
			t.Errorf("node %s daemon.json podMTU = %+v, %v; want 1500 (no encapsulation overhead)", n.Spec.Name, st, err)
		}
	}
	if bad := c.reachability(func(from, to *node) bool { return from == to || sameSubnet(from, to) }); len(bad) > 0 {
		t.Fatalf("reachability differs from host-gw's:\n%s", strings.Join(bad, "\n"))
	}
}

// TestIPIP runs the IPIP mode where the kernel can: a and b and c reach
// each other's pods over tunl0 (IPv4 only), and each node's tunl0 counts
// at least one packet out and one in per echo request or reply its pods
// exchanged with other nodes'. Where the ipip module was not loaded yet,
// routeletd asking for tunl0 is what loads it; once loaded, every node
// namespace has the kernel's fallback tunl0, which routeletd adopts.
func TestIPIP(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	netnstest.SkipUnlessIPIP(t)
	loaded, err := netnstest.IPIPLoaded()
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "--encapsulation=ipip")
	if !loaded {
		t.Log("ipip was not loaded before the daemons started: routeletd's tunl0 loaded it")
	}
	for _, n := range c.nodes {
		var want []string
		for _, p := range c.peersOf(n) {
			want = append(want, fmt.Sprintf("%s via %s dev tunl0 onlink mtu 1480", p.Spec.Block4, hostAddr(p.Spec.Host4)))
		}
		slices.Sort(want)
		netnstest.Eventually(t, 10*time.Second, "ipip routes on "+n.Spec.Name, func() bool {
			got, err := n.overlayRoutes(netlink.FAMILY_V4)
			return err == nil && slices.Equal(got, want)
		})
	}
	before := make(map[*node]netlink.LinkStatistics)
	for _, n := range c.nodes {
		before[n] = n.tunnelStats(t)
	}
	// crossing[n] counts the pings between a pod of n and a pod of another
	// node: each is one packet out and one in on n's tunl0.
	crossing := make(map[*node]uint64)
	pods := c.allPods()
	for _, from := range pods {
		for _, to := range pods {
			if from.p == to.p {
				continue
			}
			if out, err := from.p.Ping(t.Context(), to.p.IPv4); err != nil {
				t.Errorf("%s → %s over IPIP:\n%s", from.p.Name, to.p.IPv4, out)
			}
			if from.n != to.n {
				crossing[from.n]++
				crossing[to.n]++
			}
		}
	}
	for _, n := range c.nodes {
		after := n.tunnelStats(t)
		tx, rx := after.TxPackets-before[n].TxPackets, after.RxPackets-before[n].RxPackets
		t.Logf("node %s tunl0: %d packets out, %d in during %d cross-node pings", n.Spec.Name, tx, rx, crossing[n])
		if tx < crossing[n] || rx < crossing[n] {
			t.Errorf("node %s: tunl0 counted %d packets out and %d in; want at least %d each: pod traffic did not cross tunl0",
				n.Spec.Name, tx, rx, crossing[n])
		}
	}
}

// tunnelStats returns the packet counters of n's tunl0.
func (n *node) tunnelStats(t *testing.T) netlink.LinkStatistics {
	t.Helper()
	l, err := n.nl.LinkByName("tunl0")
	if err != nil {
		t.Fatalf("node %s: tunl0: %v", n.Spec.Name, err)
	}
	if l.Attrs().Statistics == nil {
		t.Fatalf("node %s: tunl0 without statistics", n.Spec.Name)
	}
	return *l.Attrs().Statistics
}
