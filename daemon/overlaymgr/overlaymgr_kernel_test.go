package overlaymgr

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/peers"
)

// l2Dump returns the permanent ARP entries ("neigh IP MAC") and unicast
// FDB entries ("fdb MAC IP") on vxlan.calico, sorted.
func (kn *kernelNode) l2Dump(t *testing.T) []string {
	t.Helper()
	l, err := kn.n.Handle.LinkByName("vxlan.calico")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	arp, err := kn.n.Handle.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range arp {
		if e.State&netlink.NUD_PERMANENT != 0 {
			out = append(out, fmt.Sprintf("neigh %s %s", e.IP, e.HardwareAddr))
		}
	}
	fdb, err := kn.n.Handle.NeighList(l.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fdb {
		if len(e.HardwareAddr) == 6 && e.HardwareAddr[0]&1 == 0 {
			out = append(out, fmt.Sprintf("fdb %s %s", e.HardwareAddr, e.IP))
		}
	}
	slices.Sort(out)
	return out
}

// wantL2 is what l2Dump shows for ps.
func wantL2(ps []peers.NodeInfo) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("neigh %s %s", p.IPv4.TunnelAddr, p.IPv4.VTEPMAC),
			fmt.Sprintf("fdb %s %s", p.IPv4.VTEPMAC, p.IPv4.HostIP))
	}
	slices.Sort(out)
	return out
}

// TestPeerChangeIncrementalKernel: with 20 VXLAN peers programmed, one
// peer's VTEP MAC changing and another's block (and tunnel address)
// moving are written without re-reading the neighbour or FDB tables, and
// the echo of those writes does not make the loop run again; an ARP or
// FDB entry of ours deleted behind the manager's back is reported by its
// event, and the Apply that event asks for re-reads and restores it,
// without the periodic device check.
func TestPeerChangeIncrementalKernel(t *testing.T) {
	ps := make([]peers.NodeInfo, 20)
	for i := range ps {
		ps[i] = kernelPeer(i, false, 0)
	}
	kn := newKernelNode(t, ps)
	if got, want := kn.l2Dump(t), wantL2(ps); !slices.Equal(got, want) {
		t.Fatalf("after the first Apply:\n%q\nwant\n%q", got, want)
	}
	var drift []string
	kn.m.cfg.OnDrift = func(object, detail string) { drift = append(drift, object+" "+detail) }

	kn.neighWakes.Store(0)
	dumps := kn.nl.dumps.Load()
	ps[3] = kernelPeer(3, false, 7)
	ps[5] = kernelPeer(5, true, 0)
	kn.pass(t, ps)
	if got, want := kn.l2Dump(t), wantL2(ps); !slices.Equal(got, want) {
		t.Fatalf("after peer 3's MAC changed and peer 5 moved:\n%q\nwant\n%q", got, want)
	}
	if n := kn.nl.dumps.Load() - dumps; n != 0 {
		t.Errorf("the change re-read the neighbour and FDB tables %d times, want 0", n)
	}

	// An FDB entry of ours deleted behind our back. Events arrive in
	// order, so once its wake is seen the echoes of the writes above were
	// judged too: this one wake is the only one.
	link, err := kn.n.Handle.LinkByName("vxlan.calico")
	if err != nil {
		t.Fatal(err)
	}
	victim := ps[8].IPv4
	if err := kn.n.Handle.NeighDel(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		IP: net.IP(victim.HostIP.AsSlice()), HardwareAddr: victim.VTEPMAC}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 10*time.Second, "a wake for the deleted FDB entry", func() bool { return kn.neighWakes.Load() > 0 })
	if n := kn.neighWakes.Load(); n != 1 {
		t.Errorf("%d wakes after the change and one deleted FDB entry, want 1 (the echo of our writes is no drift)", n)
	}
	if err := kn.m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got, want := kn.l2Dump(t), wantL2(ps); !slices.Equal(got, want) {
		t.Fatalf("after the FDB entry's event:\n%q\nwant\n%q", got, want)
	}

	// An ARP entry of ours deleted: the same.
	kn.neighWakes.Store(0)
	victim = ps[9].IPv4
	if err := kn.n.Handle.NeighDel(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4,
		IP: net.IP(victim.TunnelAddr.AsSlice())}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 10*time.Second, "a wake for the deleted ARP entry", func() bool { return kn.neighWakes.Load() > 0 })
	if err := kn.m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got, want := kn.l2Dump(t), wantL2(ps); !slices.Equal(got, want) {
		t.Fatalf("after the ARP entry's event:\n%q\nwant\n%q", got, want)
	}
	wantDrift := []string{
		fmt.Sprintf("fdb %s dev vxlan.calico", ps[8].IPv4.HostIP),
		fmt.Sprintf("neigh %s dev vxlan.calico", ps[9].IPv4.TunnelAddr),
	}
	if !slices.Equal(drift, wantDrift) {
		t.Errorf("drift reported %q, want %q", drift, wantDrift)
	}
}
