package overlay_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

// Privileged tests: each builds its own namespaces — node namespaces joined
// through a router namespace (bridge br0 for the 10.0.0.0/24 + fd00::/64
// underlay, a routed link to 10.1.0.0/24 + fd01::/64) — and removes them in
// t.Cleanup. Nothing touches the test process's own namespace.

// netnsT is one namespace with a netlink handle for setup and checks.
type netnsT struct {
	t  testing.TB
	ns ns.NetNS
	h  *netlink.Handle
}

func newNetns(t testing.TB) *netnsT {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces, veths, VXLAN devices, neighbour and FDB entries")
	n := netnstest.NewT(t)
	e := &netnsT{t: t, ns: n.NetNS, h: n.Handle}
	// No duplicate address detection: links created from now on have
	// usable link-local addresses at once, so neighbour discovery works
	// from the first packet.
	e.sysctl("net/ipv6/conf/default/accept_dad", "0")
	e.sysctl("net/ipv6/conf/all/accept_dad", "0")
	return e
}

func (e *netnsT) name() string { return filepath.Base(e.ns.Path()) }

func (e *netnsT) link(name string) netlink.Link {
	e.t.Helper()
	l, err := e.h.LinkByName(name)
	if err != nil {
		e.t.Fatalf("netns %s: link %s: %v", e.name(), name, err)
	}
	return l
}

func (e *netnsT) up(l netlink.Link) {
	e.t.Helper()
	if err := e.h.LinkSetUp(l); err != nil {
		e.t.Fatalf("netns %s: %s up: %v", e.name(), l.Attrs().Name, err)
	}
}

// addr adds prefix (keeping host bits) to the link, without DAD for IPv6.
func (e *netnsT) addr(ifname string, prefix string) {
	e.t.Helper()
	p := netip.MustParsePrefix(prefix)
	a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := e.h.AddrAdd(e.link(ifname), a); err != nil {
		e.t.Fatalf("netns %s: add %s to %s: %v", e.name(), prefix, ifname, err)
	}
}

func (e *netnsT) sysctl(key, value string) {
	e.t.Helper()
	err := e.ns.Do(func(ns.NetNS) error {
		return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644)
	})
	if err != nil {
		e.t.Fatalf("netns %s: sysctl %s=%s: %v", e.name(), key, value, err)
	}
}

// run executes a command inside the namespace and returns its output.
func (e *netnsT) run(name string, args ...string) (string, error) {
	var out []byte
	err := e.ns.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	return string(out), err
}

// mustIP runs `ip` once per argument list, in order, inside the namespace,
// failing t at the first error.
func (e *netnsT) mustIP(t *testing.T, cmds ...[]string) {
	t.Helper()
	for _, args := range cmds {
		if out, err := e.run("ip", args...); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
}

// defaultVia adds a default route via gw.
func (e *netnsT) defaultVia(gw string) {
	e.t.Helper()
	g := net.ParseIP(gw)
	if err := e.h.RouteAdd(&netlink.Route{Gw: g}); err != nil {
		e.t.Fatalf("netns %s: default via %s: %v", e.name(), gw, err)
	}
}

// testNode is a simulated node: a namespace with eth0 on the underlay, a
// "pod" address of its block on lo, and its overlay managers.
type testNode struct {
	*netnsT
	nodeName        string
	host, host6     netip.Addr
	block, block6   netip.Prefix
	pod, pod6       netip.Addr
	subnet, subnet6 netip.Prefix
	k               *overlay.Kernel
	vx, vx6         *overlay.VXLAN
}

// underlay is three bare node namespaces: a and b on 10.0.0.0/24, c on
// 10.1.0.0/24 behind the router r (which also bridges a and b). No
// routeletd and no plugin run (unlike internal/cluster's): each node holds
// a Kernel seam, and the tests drive the overlay managers themselves.
type underlay struct {
	r     *netnsT
	nodes []*testNode
}

func newUnderlay(t testing.TB) *underlay {
	t.Helper()
	r := newNetns(t)
	noSnooping := false // flood neighbour solicitations instead of waiting for MLD reports
	if err := r.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}, MulticastSnooping: &noSnooping}); err != nil {
		t.Fatalf("bridge: %v", err)
	}
	r.up(r.link("br0"))
	r.addr("br0", "10.0.0.254/24")
	r.addr("br0", "fd00::fe/64")
	r.sysctl("net/ipv4/conf/all/forwarding", "1")
	r.sysctl("net/ipv6/conf/all/forwarding", "1")

	c := &underlay{r: r}
	specs := []struct {
		name, host, host6, block, block6, rif string
	}{
		{"a", "10.0.0.1/24", "fd00::1/64", "10.244.1.0/26", "fd10:1::/122", ""},
		{"b", "10.0.0.2/24", "fd00::2/64", "10.244.2.0/26", "fd10:2::/122", ""},
		{"c", "10.1.0.3/24", "fd01::3/64", "10.244.3.0/26", "fd10:3::/122", "c-r"},
	}
	for _, s := range specs {
		n := &testNode{netnsT: newNetns(t), nodeName: s.name}
		hp, hp6 := netip.MustParsePrefix(s.host), netip.MustParsePrefix(s.host6)
		n.host, n.host6, n.subnet, n.subnet6 = hp.Addr(), hp6.Addr(), hp.Masked(), hp6.Masked()
		n.block, n.block6 = netip.MustParsePrefix(s.block), netip.MustParsePrefix(s.block6)
		n.pod, n.pod6 = n.block.Addr().Next().Next().Next().Next().Next(), n.block6.Addr().Next().Next().Next().Next().Next()

		// eth0 in the node, its peer in the router: on br0 for a and b,
		// a routed interface for c.
		peer := s.name + "-r"
		rfd, err := netns.GetFromPath(r.ns.Path())
		if err != nil {
			t.Fatal(err)
		}
		err = n.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: peer, PeerNamespace: netlink.NsFd(int(rfd))})
		rfd.Close()
		if err != nil {
			t.Fatalf("veth for %s: %v", s.name, err)
		}
		n.up(n.link("eth0"))
		n.addr("eth0", s.host)
		n.addr("eth0", s.host6)
		n.addr("lo", n.pod.String()+"/32")
		n.addr("lo", n.pod6.String()+"/128")
		if s.rif == "" {
			if err := r.h.LinkSetMaster(r.link(peer), r.link("br0").(*netlink.Bridge)); err != nil {
				t.Fatalf("enslave %s: %v", peer, err)
			}
			n.defaultVia("10.0.0.254")
			n.defaultVia("fd00::fe")
		} else {
			r.addr(peer, "10.1.0.254/24")
			r.addr(peer, "fd01::fe/64")
			n.defaultVia("10.1.0.254")
			n.defaultVia("fd01::fe")
		}
		r.up(r.link(peer))

		err = n.ns.Do(func(ns.NetNS) error {
			var err error
			n.k, err = overlay.NewKernel()
			return err
		})
		if err != nil {
			t.Fatalf("kernel seam in %s: %v", s.name, err)
		}
		t.Cleanup(func() { n.k.Close() })
		c.nodes = append(c.nodes, n)
	}
	return c
}

// startVXLAN creates the node's VXLAN managers (v4 and v6) and applies them
// once with no peers.
func (n *testNode) startVXLAN(t testing.TB) {
	t.Helper()
	var err error
	n.vx, err = overlay.NewVXLAN(n.k, overlay.VXLANConfig{HostIP: n.host, NodeName: n.nodeName, TunnelAddr: n.block.Addr(), TXChecksum: overlay.TXChecksumOff, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	n.vx6, err = overlay.NewVXLAN(n.k, overlay.VXLANConfig{IPVersion: 6, HostIP: n.host6, NodeName: n.nodeName, TunnelAddr: n.block6.Addr(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*overlay.VXLAN{n.vx, n.vx6} {
		if err := m.Apply(); err != nil {
			t.Fatalf("node %s: %v", n.nodeName, err)
		}
	}
}

// peer returns n as its peers see it, for one family.
func (n *testNode) peer(ipVersion int) overlay.Peer {
	if ipVersion == 6 {
		return overlay.Peer{Name: n.nodeName, HostIP: n.host6, VTEPMAC: overlay.VTEPMAC(n.nodeName, 6), TunnelIP: n.block6.Addr(), Blocks: []netip.Prefix{n.block6}}
	}
	return overlay.Peer{Name: n.nodeName, HostIP: n.host, VTEPMAC: overlay.VTEPMAC(n.nodeName, 4), TunnelIP: n.block.Addr(), Blocks: []netip.Prefix{n.block}}
}

// peersOf returns every other node as a peer.
func (c *underlay) peersOf(self *testNode, ipVersion int) []overlay.Peer {
	var ps []overlay.Peer
	for _, o := range c.nodes {
		if o != self {
			ps = append(ps, o.peer(ipVersion))
		}
	}
	return ps
}

// program computes n's overlay routes for mode and installs them directly
// with netlink (standing in for the RouteTable), replacing what it
// installed before. It returns the computed routes.
func (c *underlay) program(t testing.TB, n *testNode, mode overlay.Mode, ipVersion int) map[string][]routes.Target {
	t.Helper()
	in := overlay.RouteInput{Mode: mode, IPVersion: ipVersion, Parent: "eth0", Peers: c.peersOf(n, ipVersion)}
	if ipVersion == 4 {
		in.ParentSubnets, in.LocalBlocks, in.MTU = []netip.Prefix{n.subnet}, []netip.Prefix{n.block}, 1450
	} else {
		in.ParentSubnets, in.LocalBlocks, in.MTU = []netip.Prefix{n.subnet6}, []netip.Prefix{n.block6}, 1430
	}
	byIface, _ := overlay.Routes(in)
	for iface, targets := range byIface {
		if len(targets) == 0 {
			continue
		}
		link := n.link(iface)
		for _, tg := range targets {
			r := &netlink.Route{
				LinkIndex: link.Attrs().Index,
				Dst:       &net.IPNet{IP: net.IP(tg.CIDR.Addr().AsSlice()), Mask: net.CIDRMask(tg.CIDR.Bits(), tg.CIDR.Addr().BitLen())},
				Gw:        net.IP(tg.Gateway.AsSlice()),
				Protocol:  routes.DefaultProtocol,
				MTU:       tg.MTU,
			}
			if tg.OnLink {
				r.Flags = int(netlink.FLAG_ONLINK)
			}
			if err := n.h.RouteReplace(r); err != nil {
				t.Fatalf("node %s: route %s via %s dev %s: %v", n.nodeName, tg.CIDR, tg.Gateway, iface, err)
			}
		}
	}
	return byIface
}

// ping pings dst from src inside n; extra are more ping flags.
func (n *testNode) ping(src, dst netip.Addr, extra ...string) error {
	return n.pingWait("3", src, dst, extra...)
}

// pingWait is ping with a reply timeout of wait seconds.
func (n *testNode) pingWait(wait string, src, dst netip.Addr, extra ...string) error {
	args := append([]string{"-n", "-c", "1", "-W", wait, "-I", src.String()}, extra...)
	args = append(args, dst.String())
	out, err := n.run("ping", args...)
	if err != nil {
		return fmt.Errorf("node %s: ping %s from %s: %w\n%s", n.nodeName, dst, src, err, out)
	}
	return nil
}

// l2 renders the permanent neighbour entries and the unicast FDB entries
// on the device, sorted — what `ip neigh show dev` and `bridge fdb show dev`
// list of routelet's.
func (n *testNode) l2(t testing.TB, device string, ipVersion int) string {
	t.Helper()
	link := n.link(device)
	var lines []string
	neighs, err := n.h.NeighList(link.Attrs().Index, overlay.NLFamily(ipVersion))
	if err != nil {
		t.Fatal(err)
	}
	for _, nb := range neighs {
		if nb.State&netlink.NUD_PERMANENT != 0 {
			lines = append(lines, fmt.Sprintf("neigh %s lladdr %s", nb.IP, nb.HardwareAddr))
		}
	}
	fdb, err := n.h.NeighList(link.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatal(err)
	}
	for _, nb := range fdb {
		if nb.HardwareAddr[0]&1 == 0 {
			lines = append(lines, fmt.Sprintf("fdb %s dst %s", nb.HardwareAddr, nb.IP))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// wantL2 is what l2 should show on n for the given peers.
func wantL2(peers []overlay.Peer) string {
	var lines []string
	for _, p := range peers {
		lines = append(lines, fmt.Sprintf("neigh %s lladdr %s", p.TunnelIP, p.VTEPMAC), fmt.Sprintf("fdb %s dst %s", p.VTEPMAC, p.HostIP))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestKernelOverlayModes builds three nodes per mode and checks that every
// pod reaches every pod it should (IPv4 and IPv6), over the path the mode
// promises, with exactly the expected ARP/NDP and FDB entries.
func TestKernelOverlayModes(t *testing.T) {
	for _, mode := range []overlay.Mode{overlay.ModeVXLAN, overlay.ModeVXLANCrossSubnet, overlay.ModeNone} {
		t.Run(string(mode), func(t *testing.T) {
			c := newUnderlay(t)
			for _, n := range c.nodes {
				if mode.VXLAN() {
					n.startVXLAN(t)
					n.vx.SetPeers(c.peersOf(n, 4))
					n.vx6.SetPeers(c.peersOf(n, 6))
					mustApply(t, n.vx)
					mustApply(t, n.vx6)
				}
				c.program(t, n, mode, 4)
				c.program(t, n, mode, 6)
			}
			for _, n := range c.nodes {
				if mode.VXLAN() {
					for _, fam := range []int{4, 6} {
						dev, m := overlay.DeviceVXLAN, n.vx
						if fam == 6 {
							dev, m = overlay.DeviceVXLANv6, n.vx6
						}
						if got, want := n.l2(t, dev, fam), wantL2(c.peersOf(n, fam)); got != want {
							t.Errorf("node %s %s entries:\n%s\nwant:\n%s", n.nodeName, dev, got, want)
						}
						d := m.Device()
						if d.MTU != 1500-overlay.Overhead(mode, fam == 6) {
							t.Errorf("node %s %s MTU %d", n.nodeName, dev, d.MTU)
						}
					}
					if on, err := n.k.TXChecksum(overlay.DeviceVXLAN); err != nil || on {
						t.Errorf("node %s: TX checksum offload on=%v (%v), want off", n.nodeName, on, err)
					}
				}
				for _, o := range c.nodes {
					if o == n {
						continue
					}
					reachable := mode != overlay.ModeNone || n.subnet == o.subnet
					if !reachable {
						// Mode none across the router: no route is computed, so
						// the packet follows the default route to a router
						// that knows no pod blocks. One ping shows it (each
						// failing ping costs its timeout).
						if n == c.nodes[0] {
							if err := n.pingWait("1", n.pod, o.pod); err == nil {
								t.Errorf("node %s reached %s in mode none across the router", n.nodeName, o.pod)
							}
						}
						continue
					}
					for _, pair := range [][2]netip.Addr{{n.pod, o.pod}, {n.pod6, o.pod6}} {
						if err := n.ping(pair[0], pair[1]); err != nil {
							t.Error(err)
						}
					}
					// The path: direct on the parent for same-subnet peers in
					// cross-subnet modes, else the VXLAN device.
					for _, dst := range []netip.Addr{o.pod, o.pod6} {
						rs, err := n.h.RouteGet(net.IP(dst.AsSlice()))
						if err != nil || len(rs) == 0 {
							t.Fatalf("route get %s: %v", dst, err)
						}
						l, _ := n.h.LinkByIndex(rs[0].LinkIndex)
						want := "eth0"
						if mode == overlay.ModeVXLAN || mode == overlay.ModeVXLANCrossSubnet && n.subnet != o.subnet {
							want = overlay.DeviceVXLAN
							if dst.Is6() {
								want = overlay.DeviceVXLANv6
							}
						}
						if l.Attrs().Name != want {
							t.Errorf("node %s: %s leaves by %s, want %s", n.nodeName, dst, l.Attrs().Name, want)
						}
					}
				}
			}
		})
	}
}

// TestKernelVXLANRepairAndPeers checks the upkeep on a real device: deletion,
// hand-made MTU and attribute changes, a peer's MAC change and removal, and
// that a 1,400-byte DF ping crosses while a too-large one does not.
func TestKernelVXLANRepairAndPeers(t *testing.T) {
	c := newUnderlay(t)
	a, b := c.nodes[0], c.nodes[2] // across the router
	for _, n := range []*testNode{a, b} {
		n.startVXLAN(t)
	}
	a.vx.SetPeers([]overlay.Peer{b.peer(4)})
	b.vx.SetPeers([]overlay.Peer{a.peer(4)})
	mustApply(t, a.vx)
	mustApply(t, b.vx)
	c.program(t, a, overlay.ModeVXLAN, 4)
	c.program(t, b, overlay.ModeVXLAN, 4)
	if err := a.ping(a.pod, b.pod); err != nil {
		t.Fatal(err)
	}

	t.Run("df ping at pod MTU", func(t *testing.T) {
		// 1400 bytes of payload + 28 of headers = 1428 ≤ 1450: crosses
		// unfragmented. 1423 + 28 = 1451 > 1450: refused by the sender.
		if err := a.ping(a.pod, b.pod, "-M", "do", "-s", "1400"); err != nil {
			t.Fatal(err)
		}
		if err := a.ping(a.pod, b.pod, "-M", "do", "-s", "1423"); err == nil {
			t.Fatal("a 1451-byte DF packet crossed a 1450-byte device")
		}
	})

	t.Run("device deleted", func(t *testing.T) {
		if err := a.h.LinkDel(a.link(overlay.DeviceVXLAN)); err != nil {
			t.Fatal(err)
		}
		if !a.vx.OnLinkUpdate(overlay.DeviceVXLAN) {
			t.Fatal("event for the device ignored")
		}
		mustApply(t, a.vx)
		if a.vx.Device().Created != 2 {
			t.Fatalf("Created = %d, want 2", a.vx.Device().Created)
		}
		if got, want := a.l2(t, overlay.DeviceVXLAN, 4), wantL2([]overlay.Peer{b.peer(4)}); got != want {
			t.Fatalf("entries after recreate:\n%s\nwant:\n%s", got, want)
		}
		c.program(t, a, overlay.ModeVXLAN, 4) // the kernel dropped the device's routes
		if err := a.ping(a.pod, b.pod); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("mtu changed by hand", func(t *testing.T) {
		a.mustIP(t, []string{"link", "set", overlay.DeviceVXLAN, "mtu", "1300"})
		a.vx.OnLinkUpdate(overlay.DeviceVXLAN)
		mustApply(t, a.vx)
		if mtu := a.link(overlay.DeviceVXLAN).Attrs().MTU; mtu != 1450 {
			t.Fatalf("MTU %d after repair, want 1450", mtu)
		}
		if a.vx.Device().Created != 2 {
			t.Fatal("MTU repaired by recreating the device")
		}
	})

	t.Run("enslaved to a bridge", func(t *testing.T) {
		a.mustIP(t, []string{"link", "add", "br0", "type", "bridge"}, []string{"link", "set", overlay.DeviceVXLAN, "master", "br0"})
		if a.link(overlay.DeviceVXLAN).Attrs().MasterIndex == 0 {
			t.Fatal("setup: device not enslaved")
		}
		a.vx.OnLinkUpdate(overlay.DeviceVXLAN)
		mustApply(t, a.vx)
		if m := a.link(overlay.DeviceVXLAN).Attrs().MasterIndex; m != 0 {
			t.Fatalf("device still enslaved (master index %d)", m)
		}
		if a.vx.Device().Created != 2 {
			t.Fatal("taken out of the bridge by recreating the device")
		}
		if err := a.ping(a.pod, b.pod); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("down, extra address, foreign entries", func(t *testing.T) {
		a.mustIP(t,
			[]string{"link", "set", overlay.DeviceVXLAN, "down"},
			[]string{"addr", "add", "192.168.77.1/24", "dev", overlay.DeviceVXLAN},
			[]string{"neigh", "add", "10.244.77.0", "lladdr", "02:77:77:77:77:77", "dev", overlay.DeviceVXLAN, "nud", "permanent"})
		if out, err := a.run("bridge", "fdb", "append", "00:00:00:00:00:00", "dev", overlay.DeviceVXLAN, "dst", "10.1.0.99"); err != nil {
			t.Logf("bridge fdb append (skipped): %v: %s", err, out)
		}
		a.vx.QueueCheck()
		mustApply(t, a.vx)
		l := a.link(overlay.DeviceVXLAN)
		if l.Attrs().Flags&net.FlagUp == 0 {
			t.Fatal("device left down")
		}
		addrs, _ := a.h.AddrList(l, netlink.FAMILY_V4)
		if len(addrs) != 1 || !addrs[0].IP.Equal(net.IP(a.block.Addr().AsSlice())) {
			t.Fatalf("addresses %v, want only %s", addrs, a.block.Addr())
		}
		if got, want := a.l2(t, overlay.DeviceVXLAN, 4), wantL2([]overlay.Peer{b.peer(4)}); got != want {
			t.Fatalf("entries:\n%s\nwant:\n%s", got, want)
		}
		c.program(t, a, overlay.ModeVXLAN, 4) // down dropped the routes
		if err := a.ping(a.pod, b.pod); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("recreated on immutable attribute", func(t *testing.T) {
		// Someone rebuilt the device with learning on and another VNI.
		if err := a.h.LinkDel(a.link(overlay.DeviceVXLAN)); err != nil {
			t.Fatal(err)
		}
		a.mustIP(t, []string{"link", "add", overlay.DeviceVXLAN, "type", "vxlan", "id", "7", "dstport", "4789", "dev", "eth0", "learning"})
		a.vx.OnLinkUpdate(overlay.DeviceVXLAN)
		mustApply(t, a.vx)
		v, ok := a.link(overlay.DeviceVXLAN).(*netlink.Vxlan)
		if !ok || v.VxlanId != overlay.DefaultVNI || v.Learning || !v.SrcAddr.Equal(net.IP(a.host.AsSlice())) || v.Port != overlay.DefaultPort ||
			v.VtepDevIndex != a.link("eth0").Attrs().Index || v.HardwareAddr.String() != overlay.VTEPMAC("a", 4).String() {
			t.Fatalf("device not rebuilt as configured: %+v", a.link(overlay.DeviceVXLAN))
		}
		c.program(t, a, overlay.ModeVXLAN, 4)
		if err := a.ping(a.pod, b.pod); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("peer MAC changed", func(t *testing.T) {
		newMAC := net.HardwareAddr{0x02, 0xcc, 0, 0, 0, 0x01}
		if err := b.vx.SetConfig(overlay.VXLANConfig{HostIP: b.host, MAC: newMAC, TunnelAddr: b.block.Addr(), Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		mustApply(t, b.vx)
		pb := b.peer(4)
		pb.VTEPMAC = newMAC
		a.vx.SetPeers([]overlay.Peer{pb})
		mustApply(t, a.vx)
		if got, want := a.l2(t, overlay.DeviceVXLAN, 4), wantL2([]overlay.Peer{pb}); got != want {
			t.Fatalf("entries after MAC change:\n%s\nwant:\n%s", got, want)
		}
		if err := a.ping(a.pod, b.pod); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ipv6 underlay", func(t *testing.T) {
		a.vx6.SetPeers([]overlay.Peer{b.peer(6)})
		b.vx6.SetPeers([]overlay.Peer{a.peer(6)})
		mustApply(t, a.vx6)
		mustApply(t, b.vx6)
		c.program(t, a, overlay.ModeVXLAN, 6)
		c.program(t, b, overlay.ModeVXLAN, 6)
		// 1382 + 8 (ICMPv6) + 40 (IPv6) = 1430, the device MTU (1500 - 70).
		if err := a.ping(a.pod6, b.pod6, "-M", "do", "-s", "1382"); err != nil {
			t.Fatal(err)
		}
		if err := a.h.LinkDel(a.link(overlay.DeviceVXLANv6)); err != nil {
			t.Fatal(err)
		}
		a.vx6.OnLinkUpdate(overlay.DeviceVXLANv6)
		mustApply(t, a.vx6)
		if got, want := a.l2(t, overlay.DeviceVXLANv6, 6), wantL2([]overlay.Peer{b.peer(6)}); got != want {
			t.Fatalf("v6 entries after recreate:\n%s\nwant:\n%s", got, want)
		}
		c.program(t, a, overlay.ModeVXLAN, 6)
		if err := a.ping(a.pod6, b.pod6); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("peer removed", func(t *testing.T) {
		a.vx.SetPeers(nil)
		mustApply(t, a.vx)
		if got := a.l2(t, overlay.DeviceVXLAN, 4); got != "" {
			t.Fatalf("entries left after the peer went:\n%s", got)
		}
	})
}

// TestKernelIPIP runs the IPIP manager on a real tunl0 between two nodes
// across the router; it skips on kernels without IPIP.
func TestKernelIPIP(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces and ipip devices")
	netnstest.SkipUnlessIPIP(t)
	c := newUnderlay(t)
	a, b := c.nodes[0], c.nodes[2]
	for _, n := range []*testNode{a, b} {
		m, err := overlay.NewIPIP(n.k, overlay.IPIPConfig{HostIP: n.host, TunnelAddr: n.block.Addr(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, m)
		l := n.link(overlay.DeviceIPIP)
		if l.Attrs().MTU != 1480 || l.Attrs().Flags&net.FlagUp == 0 {
			t.Fatalf("node %s tunl0: mtu %d flags %v", n.nodeName, l.Attrs().MTU, l.Attrs().Flags)
		}
		n.sysctl("net/ipv4/conf/all/rp_filter", "0")
		n.sysctl("net/ipv4/conf/tunl0/rp_filter", "0")
		var ps []overlay.Peer
		for _, o := range []*testNode{a, b} {
			if o != n {
				ps = append(ps, o.peer(4))
			}
		}
		in := overlay.RouteInput{Mode: overlay.ModeIPIP, IPVersion: 4, Parent: "eth0", ParentSubnets: []netip.Prefix{n.subnet}, MTU: 1480, Peers: ps}
		byIface, _ := overlay.Routes(in)
		for _, tg := range byIface[overlay.DeviceIPIP] {
			r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IP(tg.CIDR.Addr().AsSlice()), Mask: net.CIDRMask(tg.CIDR.Bits(), 32)},
				Gw: net.IP(tg.Gateway.AsSlice()), Flags: int(netlink.FLAG_ONLINK), MTU: tg.MTU, Protocol: routes.DefaultProtocol}
			if err := n.h.RouteReplace(r); err != nil {
				t.Fatalf("node %s: %v", n.nodeName, err)
			}
		}
	}
	if err := a.ping(a.pod, b.pod); err != nil {
		t.Fatal(err)
	}
}
