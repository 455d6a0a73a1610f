package overlaymgr

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// kernelNode is a manager in VXLAN mode on a fresh namespace (eth0 with
// 10.0.0.1/16) with its real route tables and its netlink events wired as
// routeletd wires them: an event that matters sets woken, and the loop
// (pass) runs one more Apply for it.
type kernelNode struct {
	n     *netnstest.NS
	m     *Manager
	nl    *countingNetlink
	woken atomic.Bool
	// neighWakes counts the wakes neighbour and FDB events asked for.
	neighWakes atomic.Int32
}

// neighCounter is the manager's event handler, counting the wakes its
// neighbour events ask for.
type neighCounter struct {
	netwatch.Handler
	kn   *kernelNode
	wake func()
}

// OnNeigh implements netwatch.Handler.
func (c neighCounter) OnNeigh(ev netwatch.NeighEvent) {
	c.kn.m.Events(func() {
		c.kn.neighWakes.Add(1)
		c.wake()
	}).OnNeigh(ev)
}

// countingNetlink is the real kernel seam counting the neighbour and FDB
// table dumps.
type countingNetlink struct {
	*overlay.Kernel
	dumps atomic.Int32
}

// NeighList implements overlay.Netlink.
func (c *countingNetlink) NeighList(linkIndex, family int) ([]netlink.Neigh, error) {
	c.dumps.Add(1)
	return c.Kernel.NeighList(linkIndex, family)
}

// newKernelNode builds the node and programs ps (first OnNodes and Apply).
func newKernelNode(tb testing.TB, ps []peers.NodeInfo) *kernelNode {
	tb.Helper()
	n := netnstest.NewT(tb)
	h := n.Handle
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: "eth0p"}); err != nil {
		tb.Fatal(err)
	}
	for _, name := range []string{"eth0", "eth0p"} {
		l, err := h.LinkByName(name)
		if err != nil {
			tb.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			tb.Fatal(err)
		}
	}
	eth0, _ := h.LinkByName("eth0")
	addr, _ := netlink.ParseAddr("10.0.0.1/16")
	if err := h.AddrAdd(eth0, addr); err != nil {
		tb.Fatal(err)
	}
	kn := &kernelNode{n: n}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	err := n.Do(func() error {
		kern, err := overlay.NewKernel()
		if err != nil {
			return err
		}
		kn.nl = &countingNetlink{Kernel: kern}
		kn.m, err = New(kn.nl, Config{
			NodeName: "self", Mode: overlay.ModeVXLAN, HostIPv4: netip.MustParseAddr("10.0.0.1"),
			LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/26")}, Logger: quiet,
		}, func(v int, owned []string) (RouteTable, error) {
			return routes.New(routes.Config{IPVersion: v, InterfaceNames: owned, Logger: quiet})
		})
		if err != nil {
			return err
		}
		w := netwatch.New(quiet)
		wake := func() { kn.woken.Store(true) }
		w.Register("overlay", kn.m.Interest(), neighCounter{Handler: kn.m.Events(wake), kn: kn, wake: wake})
		return w.Start(ctx)
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { kn.m.Close() })
	kn.pass(tb, ps)
	return kn
}

// pass is one loop pass after a peer change: the apply an earlier event
// asked for (the loop runs it before it sees the next change), then
// OnNodes and Apply.
func (kn *kernelNode) pass(tb testing.TB, ps []peers.NodeInfo) {
	if kn.woken.Swap(false) {
		if err := kn.m.Apply(); err != nil {
			tb.Fatal(err)
		}
	}
	kn.m.OnNodes(ps)
	if err := kn.m.Apply(); err != nil {
		tb.Fatal(err)
	}
}

// kernelPeer is the i-th of the bench's peers: a host off our subnet, one
// /26 of 10.200.0.0/16 (10.201.0.0/16 once moved) whose first address is
// its tunnel address, a VTEP MAC whose fourth byte is mac.
func kernelPeer(i int, moved bool, mac byte) peers.NodeInfo {
	pool := byte(200)
	if moved {
		pool = 201
	}
	block := netip.AddrFrom4([4]byte{10, pool, byte(i / 4), byte(64 * (i % 4))})
	return peers.NodeInfo{
		Name: "peer-" + string(rune('a'+i/676)) + string(rune('a'+i/26%26)) + string(rune('a'+i%26)),
		IPv4: peers.Endpoint{
			HostIP:     netip.AddrFrom4([4]byte{10, 100, byte(i / 250), byte(1 + i%250)}),
			VTEPMAC:    net.HardwareAddr{0x02, 0, 0, mac, byte(i / 256), byte(i % 256)},
			TunnelAddr: block,
		},
		Blocks: []netip.Prefix{netip.PrefixFrom(block, 26)},
	}
}

// kernelPeers returns the bench's 1,000 peers, none moved.
func kernelPeers() []peers.NodeInfo {
	ps := make([]peers.NodeInfo, 1000)
	for i := range ps {
		ps[i] = kernelPeer(i, false, 0)
	}
	return ps
}

// BenchmarkKernelPeerMove1000: 1,000 VXLAN peers programmed in a real
// namespace; per op one peer's block (and with it its tunnel address)
// moves back or forth: OnNodes and Apply, and the extra Apply the loop runs
// when the manager's netlink events ask for one.
func BenchmarkKernelPeerMove1000(b *testing.B) {
	benchChanges(b, func(p, round int) peers.NodeInfo { return kernelPeer(p, round%2 == 0, 0) })
}

// BenchmarkKernelMACChange1000: as BenchmarkKernelPeerMove1000, but per op
// one peer's VTEP MAC changes (its ARP and FDB entries are rewritten).
func BenchmarkKernelMACChange1000(b *testing.B) {
	benchChanges(b, func(p, round int) peers.NodeInfo { return kernelPeer(p, false, byte(1+round%2)) })
}

// benchChanges programs the 1,000 peers, then per op replaces peer p (each
// in turn; round counts the turns) with changed(p, round) and runs a pass.
func benchChanges(b *testing.B, changed func(p, round int) peers.NodeInfo) {
	ps := kernelPeers()
	kn := newKernelNode(b, ps)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := i % len(ps)
		ps[p] = changed(p, i/len(ps))
		kn.pass(b, ps)
		i++
	}
}
