package overlay_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

// benchNode is a namespace with eth0 (10.0.0.1/16, one end of a veth) and
// a Kernel seam bound to it, plus 1,000 peers on 10.0.0.0/16 with one /26
// block each.
func benchNode(b *testing.B) (*netnsT, *overlay.Kernel, []overlay.Peer) {
	b.Helper()
	n := newNetns(b)
	if err := n.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: "eth0p"}); err != nil {
		b.Fatal(err)
	}
	n.up(n.link("eth0"))
	n.up(n.link("eth0p"))
	n.addr("eth0", "10.0.0.1/16")
	var k *overlay.Kernel
	if err := n.ns.Do(func(ns.NetNS) error {
		var err error
		k, err = overlay.NewKernel()
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { k.Close() })

	peers := make([]overlay.Peer, 1000)
	for i := range peers {
		block := netip.AddrFrom4([4]byte{10, byte(128 + i/4), byte(i % 4 * 64), 0})
		peers[i] = overlay.Peer{
			Name:     "node-" + netip.AddrFrom4([4]byte{0, 0, byte(i >> 8), byte(i)}).String(),
			HostIP:   netip.AddrFrom4([4]byte{10, 0, byte(1 + i/250), byte(2 + i%250)}),
			VTEPMAC:  net.HardwareAddr{0x02, 0xbe, 0, 0, byte(i >> 8), byte(i)},
			TunnelIP: block,
			Blocks:   []netip.Prefix{netip.PrefixFrom(block, 26)},
		}
	}
	return n, k, peers
}

// programRoutes installs the computed routes with netlink, standing in for
// the RouteTable.
func programRoutes(b *testing.B, n *netnsT, byIface map[string][]routes.Target) int {
	count := 0
	for iface, targets := range byIface {
		if len(targets) == 0 {
			continue
		}
		idx := n.link(iface).Attrs().Index
		for _, tg := range targets {
			r := &netlink.Route{LinkIndex: idx, Protocol: routes.DefaultProtocol, MTU: tg.MTU,
				Dst: &net.IPNet{IP: net.IP(tg.CIDR.Addr().AsSlice()), Mask: net.CIDRMask(tg.CIDR.Bits(), 32)},
				Gw:  net.IP(tg.Gateway.AsSlice())}
			if tg.OnLink {
				r.Flags = int(netlink.FLAG_ONLINK)
			}
			if err := n.h.RouteReplace(r); err != nil {
				b.Fatalf("route %s: %v", tg.CIDR, err)
			}
			count++
		}
	}
	return count
}

// BenchmarkVXLAN1000Peers measures, from a missing device: create the VXLAN
// device, program 1,000 peers' ARP and FDB entries and install the 1,000
// computed block routes. Target: ≤ 0.5 s per op.
func BenchmarkVXLAN1000Peers(b *testing.B) {
	n, k, peers := benchNode(b)
	in := overlay.RouteInput{Mode: overlay.ModeVXLAN, IPVersion: 4, Parent: "eth0", ParentSubnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}, MTU: 1450, Peers: peers}
	for b.Loop() {
		b.StopTimer()
		if err := overlay.RemoveVXLAN(k, overlay.DeviceVXLAN); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		benchVXLAN(b, k, peers)
		byIface, problems := overlay.Routes(in)
		if len(problems) != 0 {
			b.Fatal(problems)
		}
		if got := programRoutes(b, n, byIface); got != len(peers) {
			b.Fatalf("%d routes programmed, want %d", got, len(peers))
		}
	}
	b.StopTimer()
	checkBenchL2(b, n, len(peers))
}

// BenchmarkVXLANCheck1000Peers measures the periodic check of a correct
// device with 1,000 peers: re-read device, addresses, neighbours and FDB,
// change nothing.
func BenchmarkVXLANCheck1000Peers(b *testing.B) {
	n, k, peers := benchNode(b)
	m := benchVXLAN(b, k, peers)
	for b.Loop() {
		m.QueueCheck()
		if err := m.Apply(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	checkBenchL2(b, n, len(peers))
}

// checkBenchL2 fails unless the device holds exactly want permanent ARP
// entries and want unicast FDB entries.
func checkBenchL2(b *testing.B, n *netnsT, want int) {
	idx := n.link(overlay.DeviceVXLAN).Attrs().Index
	neighs, err := n.h.NeighList(idx, netlink.FAMILY_V4)
	if err != nil {
		b.Fatal(err)
	}
	arp := 0
	for _, nb := range neighs {
		if nb.State&netlink.NUD_PERMANENT != 0 {
			arp++
		}
	}
	fdb, err := n.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		b.Fatal(err)
	}
	if arp != want || len(fdb) != want {
		b.Fatalf("device holds %d ARP and %d FDB entries, want %d each", arp, len(fdb), want)
	}
}

// benchVXLAN creates the bench node's VXLAN device with peers programmed.
func benchVXLAN(b *testing.B, k *overlay.Kernel, peers []overlay.Peer) *overlay.VXLAN {
	b.Helper()
	m, err := overlay.NewVXLAN(k, overlay.VXLANConfig{HostIP: netip.MustParseAddr("10.0.0.1"), NodeName: "bench", TunnelAddr: netip.MustParseAddr("10.127.0.0"), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	m.SetPeers(peers)
	if err := m.Apply(); err != nil {
		b.Fatal(err)
	}
	return m
}
