package overlay_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/overlay/overlaytest"
)

var (
	hostA   = netip.MustParseAddr("10.0.0.1")
	hostB   = netip.MustParseAddr("10.0.0.2")
	hostC   = netip.MustParseAddr("10.1.0.3") // behind a router
	tunA    = netip.MustParseAddr("10.244.1.0")
	macB    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	macC    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0c}
	peerB   = overlay.Peer{Name: "b", HostIP: hostB, VTEPMAC: macB, TunnelIP: netip.MustParseAddr("10.244.2.0"), Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/26")}}
	peerC   = overlay.Peer{Name: "c", HostIP: hostC, VTEPMAC: macC, TunnelIP: netip.MustParseAddr("10.244.3.0"), Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/26"), netip.MustParsePrefix("10.244.4.0/26")}}
	errBoom = errors.New("boom")
	quiet   = slog.New(slog.DiscardHandler)
)

// newFakeVXLAN returns a fake with eth0 (10.0.0.1/24, MTU 1500) and a VXLAN
// manager for node "a" on it.
func newFakeVXLAN(t *testing.T) (*overlaytest.FakeNetlink, *overlay.VXLAN) {
	t.Helper()
	f := overlaytest.NewFakeNetlink()
	f.AddUnderlay("eth0", 1500, netip.MustParsePrefix("10.0.0.1/24"))
	m, err := overlay.NewVXLAN(f, overlay.VXLANConfig{HostIP: hostA, NodeName: "a", TunnelAddr: tunA, TXChecksum: overlay.TXChecksumOff, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}

// dump renders the fake's view of one device and its entries as lines, the
// way `ip -d link`, `ip addr`, `ip neigh` and `bridge fdb` would show them.
func dump(f *overlaytest.FakeNetlink, name string) string {
	l := f.Link(name)
	if l == nil {
		return "no " + name
	}
	var b strings.Builder
	at := l.Attrs()
	up := "down"
	if at.Flags&net.FlagUp != 0 {
		up = "up"
	}
	if v, ok := l.(*netlink.Vxlan); ok {
		fmt.Fprintf(&b, "vxlan %s id %d dstport %d dev %d local %s learning %v mac %s mtu %d %s txcsum %v\n",
			at.Name, v.VxlanId, v.Port, v.VtepDevIndex, v.SrcAddr, v.Learning, at.HardwareAddr, at.MTU, up, f.TXChecksumOn(name))
	} else {
		fmt.Fprintf(&b, "%s %s mtu %d %s\n", l.Type(), at.Name, at.MTU, up)
	}
	for _, a := range f.Addrs(name) {
		fmt.Fprintf(&b, "addr %s\n", a)
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, _ := f.NeighList(at.Index, fam)
		for _, n := range ns {
			fmt.Fprintf(&b, "neigh %s lladdr %s state %#x\n", n.IP, n.HardwareAddr, n.State)
		}
	}
	fdb, _ := f.NeighList(at.Index, unix.AF_BRIDGE)
	var lines []string
	for _, n := range fdb {
		lines = append(lines, fmt.Sprintf("fdb %s dst %s\n", n.HardwareAddr, n.IP))
	}
	slices.Sort(lines)
	b.WriteString(strings.Join(lines, ""))
	return b.String()
}

func mustApply(t *testing.T, a interface{ Apply() error }) {
	t.Helper()
	if err := a.Apply(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func TestVXLANCreatesDevice(t *testing.T) {
	f, m := newFakeVXLAN(t)
	mustApply(t, m)
	want := fmt.Sprintf("vxlan vxlan.calico id 4096 dstport 4789 dev 1 local 10.0.0.1 learning false mac %s mtu 1450 up txcsum false\n"+
		"addr 10.244.1.0/32\n", overlay.VTEPMAC("a", 4))
	if got := dump(f, "vxlan.calico"); got != want {
		t.Fatalf("device after first Apply:\n%s\nwant:\n%s", got, want)
	}
	d := m.Device()
	if d.Index == 0 || d.MTU != 1450 || d.Parent.Name != "eth0" || d.Parent.Subnet() != netip.MustParsePrefix("10.0.0.0/24") || d.Created != 1 {
		t.Fatalf("Device() = %+v", d)
	}
	if m.Dirty() {
		t.Fatal("still dirty after a successful Apply")
	}

	// Steady state: a periodic check that finds nothing wrong writes nothing.
	writes := f.Writes()
	m.QueueCheck()
	mustApply(t, m)
	if f.Writes() != writes {
		t.Fatalf("periodic check of a correct device made %d writes", f.Writes()-writes)
	}
}

func TestVXLANv6Device(t *testing.T) {
	f := overlaytest.NewFakeNetlink()
	f.AddUnderlay("eth0", 9000, netip.MustParsePrefix("10.0.0.1/24"), netip.MustParsePrefix("fd00::1/64"))
	m, err := overlay.NewVXLAN(f, overlay.VXLANConfig{IPVersion: 6, HostIP: netip.MustParseAddr("fd00::1"), NodeName: "a",
		TunnelAddr: netip.MustParseAddr("fd10:1::"), TXChecksum: overlay.TXChecksumKeep, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, m)
	want := fmt.Sprintf("vxlan vxlan-v6.calico id 4096 dstport 4789 dev 1 local fd00::1 learning false mac %s mtu 8930 up txcsum true\n"+
		"addr fd10:1::/128\n", overlay.VTEPMAC("a", 6))
	if got := dump(f, "vxlan-v6.calico"); got != want {
		t.Fatalf("v6 device:\n%s\nwant:\n%s", got, want)
	}
	if overlay.VTEPMAC("a", 6).String() == overlay.VTEPMAC("a", 4).String() {
		t.Fatal("v4 and v6 devices share a MAC")
	}
}

func TestVXLANRecreatesOnImmutableChange(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(v *netlink.Vxlan)
	}{
		{"vni", func(v *netlink.Vxlan) { v.VxlanId = 1 }},
		{"port", func(v *netlink.Vxlan) { v.Port = 8472 }},
		{"parent index", func(v *netlink.Vxlan) { v.VtepDevIndex = 99 }},
		{"source address", func(v *netlink.Vxlan) { v.SrcAddr = net.ParseIP("10.0.0.9").To4() }},
		{"learning", func(v *netlink.Vxlan) { v.Learning = true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, m := newFakeVXLAN(t)
			m.SetPeers([]overlay.Peer{peerB})
			mustApply(t, m)
			want := dump(f, "vxlan.calico")

			v := f.Link("vxlan.calico").(*netlink.Vxlan)
			tc.tamper(v)
			f.ReplaceLink(v)
			if !m.OnLinkUpdate("vxlan.calico") {
				t.Fatal("OnLinkUpdate ignored the device's own event")
			}
			mustApply(t, m)
			if f.Calls("LinkDel") != 1 {
				t.Fatalf("LinkDel called %d times, want 1 (recreate)", f.Calls("LinkDel"))
			}
			if got := dump(f, "vxlan.calico"); got != want {
				t.Fatalf("after recreate:\n%s\nwant (entries restored too):\n%s", got, want)
			}
			if m.Device().Created != 2 {
				t.Fatalf("Created = %d, want 2", m.Device().Created)
			}
		})
	}

	t.Run("foreign link type", func(t *testing.T) {
		f, m := newFakeVXLAN(t)
		f.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "vxlan.calico"}})
		mustApply(t, m)
		if _, ok := f.Link("vxlan.calico").(*netlink.Vxlan); !ok {
			t.Fatalf("dummy named vxlan.calico not replaced: %s", dump(f, "vxlan.calico"))
		}
	})
}

func TestVXLANReassertsInPlace(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(f *overlaytest.FakeNetlink)
	}{
		{"mtu", func(f *overlaytest.FakeNetlink) { f.SetLinkMTU("vxlan.calico", 1300) }},
		{"mac", func(f *overlaytest.FakeNetlink) { f.SetLinkMAC("vxlan.calico", net.HardwareAddr{2, 9, 9, 9, 9, 9}) }},
		{"down", func(f *overlaytest.FakeNetlink) { f.SetLinkDown("vxlan.calico") }},
		{"extra address", func(f *overlaytest.FakeNetlink) { f.AddAddr("vxlan.calico", netip.MustParsePrefix("192.168.9.9/24")) }},
		{"address gone", func(f *overlaytest.FakeNetlink) {
			l := f.Link("vxlan.calico")
			f.AddrDel(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.244.1.0"), Mask: net.CIDRMask(32, 32)}})
		}},
		{"tx checksum on", func(f *overlaytest.FakeNetlink) { f.SetTXChecksum("vxlan.calico", true) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, m := newFakeVXLAN(t)
			mustApply(t, m)
			want := dump(f, "vxlan.calico")
			tc.tamper(f)
			if dump(f, "vxlan.calico") == want {
				t.Fatal("tampering changed nothing")
			}
			m.QueueCheck()
			mustApply(t, m)
			if got := dump(f, "vxlan.calico"); got != want {
				t.Fatalf("not repaired:\n%s\nwant:\n%s", got, want)
			}
			if f.Calls("LinkDel") != 0 {
				t.Fatal("repaired by recreating, want in place")
			}
		})
	}
}

func TestVXLANFollowsConfigAndParent(t *testing.T) {
	f, m := newFakeVXLAN(t)
	mustApply(t, m)

	// Tunnel address changes: the new one replaces the old.
	if err := m.SetConfig(overlay.VXLANConfig{HostIP: hostA, NodeName: "a", TunnelAddr: netip.MustParseAddr("10.244.9.0"), TXChecksum: overlay.TXChecksumOff, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, m)
	if got := f.Addrs("vxlan.calico"); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.244.9.0/32")}) {
		t.Fatalf("addresses %v, want only 10.244.9.0/32", got)
	}

	// Parent MTU change: an event for the parent re-derives the MTU.
	f.SetLinkMTU("eth0", 9000)
	if !m.OnLinkUpdate("eth0") {
		t.Fatal("OnLinkUpdate ignored the parent's event")
	}
	if m.OnLinkUpdate("cali123") {
		t.Fatal("OnLinkUpdate took an unrelated interface's event")
	}
	mustApply(t, m)
	if mtu := f.Link("vxlan.calico").Attrs().MTU; mtu != 8950 {
		t.Fatalf("MTU %d after parent went to 9000, want 8950", mtu)
	}

	// Configured MTU wins.
	if err := m.SetConfig(overlay.VXLANConfig{HostIP: hostA, NodeName: "a", MTU: 1400, TXChecksum: overlay.TXChecksumOff, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, m)
	if mtu := f.Link("vxlan.calico").Attrs().MTU; mtu != 1400 {
		t.Fatalf("MTU %d, want configured 1400", mtu)
	}
	if got := f.Addrs("vxlan.calico"); len(got) != 0 {
		t.Fatalf("addresses %v with no tunnel address configured, want none", got)
	}
}

func TestVXLANConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  overlay.VXLANConfig
		want string
	}{
		{"no host ip", overlay.VXLANConfig{NodeName: "a"}, "host IP"},
		{"family mismatch", overlay.VXLANConfig{IPVersion: 6, HostIP: hostA, NodeName: "a"}, "10.0.0.1"},
		{"bad vni", overlay.VXLANConfig{HostIP: hostA, NodeName: "a", VNI: 1 << 24}, "16777216"},
		{"bad port", overlay.VXLANConfig{HostIP: hostA, NodeName: "a", Port: 70000}, "70000"},
		{"no mac source", overlay.VXLANConfig{HostIP: hostA}, "node name"},
		{"multicast mac", overlay.VXLANConfig{HostIP: hostA, MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}}, "01:00:00:00:00:01"},
		{"long name", overlay.VXLANConfig{HostIP: hostA, NodeName: "a", Device: "a-very-long-device-name"}, "a-very-long-device-name"},
		{"tunnel family", overlay.VXLANConfig{HostIP: hostA, NodeName: "a", TunnelAddr: netip.MustParseAddr("fd00::1")}, "fd00::1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := overlay.NewVXLAN(overlaytest.NewFakeNetlink(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}

	t.Run("no parent", func(t *testing.T) {
		f := overlaytest.NewFakeNetlink()
		m, err := overlay.NewVXLAN(f, overlay.VXLANConfig{HostIP: hostA, NodeName: "a"})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Apply()
		if err == nil || !strings.Contains(err.Error(), "10.0.0.1") {
			t.Fatalf("Apply without a parent: %v, want an error naming the host IP", err)
		}
		if !m.Dirty() {
			t.Fatal("failed Apply left the manager clean")
		}
	})
}

func TestVXLANL2Entries(t *testing.T) {
	f, m := newFakeVXLAN(t)
	m.SetPeers([]overlay.Peer{peerB, peerC})
	mustApply(t, m)
	base := dump(f, "vxlan.calico")
	want := base[:strings.Index(base, "addr")] + "addr 10.244.1.0/32\n" +
		"neigh 10.244.2.0 lladdr 02:00:00:00:00:0b state 0x80\n" +
		"neigh 10.244.3.0 lladdr 02:00:00:00:00:0c state 0x80\n" +
		"fdb 02:00:00:00:00:0b dst 10.0.0.2\n" +
		"fdb 02:00:00:00:00:0c dst 10.1.0.3\n"
	if base != want {
		t.Fatalf("entries:\n%s\nwant:\n%s", base, want)
	}

	// Peer B's VTEP MAC changes: its ARP entry points at the new MAC, the
	// FDB holds the new MAC and not the old one.
	b2 := peerB
	b2.VTEPMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xbb}
	m.SetPeers([]overlay.Peer{b2, peerC})
	mustApply(t, m)
	got := dump(f, "vxlan.calico")
	if !strings.Contains(got, "neigh 10.244.2.0 lladdr 02:00:00:00:00:bb") || !strings.Contains(got, "fdb 02:00:00:00:00:bb dst 10.0.0.2") ||
		strings.Contains(got, "02:00:00:00:00:0b") {
		t.Fatalf("after MAC change:\n%s", got)
	}

	// Peer C moves to another host IP: the FDB entry follows.
	c2 := peerC
	c2.HostIP = netip.MustParseAddr("10.1.0.33")
	m.SetPeers([]overlay.Peer{b2, c2})
	mustApply(t, m)
	if got := dump(f, "vxlan.calico"); !strings.Contains(got, "fdb 02:00:00:00:00:0c dst 10.1.0.33\n") || strings.Contains(got, "10.1.0.3\n") {
		t.Fatalf("after host IP change:\n%s", got)
	}

	// Peer B removed: its entries go, C's stay.
	m.SetPeers([]overlay.Peer{c2})
	mustApply(t, m)
	if got := dump(f, "vxlan.calico"); strings.Contains(got, "10.244.2.0") || strings.Contains(got, ":bb") || !strings.Contains(got, "10.244.3.0") {
		t.Fatalf("after removing peer b:\n%s", got)
	}

	// Entries someone else left on our device: a permanent neighbour and an
	// FDB entry are ours and go; a dynamic neighbour is the kernel's and stays.
	idx := m.Device().Index
	f.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: net.ParseIP("10.244.7.0"), HardwareAddr: macB})
	f.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_REACHABLE, IP: net.ParseIP("10.244.8.0"), HardwareAddr: macB})
	f.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT, IP: net.ParseIP("10.0.0.77"), HardwareAddr: net.HardwareAddr{0, 0, 0, 0, 0, 0}})
	m.QueueCheck()
	mustApply(t, m)
	got = dump(f, "vxlan.calico")
	if strings.Contains(got, "10.244.7.0") || strings.Contains(got, "10.0.0.77") || !strings.Contains(got, "10.244.8.0") {
		t.Fatalf("foreign entries not handled as owned/kernel's:\n%s", got)
	}
}

func TestVXLANL2SkipsIncompletePeersAndDuplicates(t *testing.T) {
	f, m := newFakeVXLAN(t)
	noMAC := overlay.Peer{Name: "d", HostIP: netip.MustParseAddr("10.0.0.4"), TunnelIP: netip.MustParseAddr("10.244.5.0")}
	v6 := overlay.Peer{Name: "e", HostIP: netip.MustParseAddr("fd00::5"), VTEPMAC: macC, TunnelIP: netip.MustParseAddr("fd10::")}
	dupMAC := peerC
	dupMAC.Name = "z" // claims C's MAC; C wins by name order
	dupMAC.HostIP = netip.MustParseAddr("10.0.0.99")
	dupMAC.TunnelIP = netip.MustParseAddr("10.244.99.0")
	m.SetPeers([]overlay.Peer{dupMAC, noMAC, v6, peerC})
	mustApply(t, m)
	got := dump(f, "vxlan.calico")
	if strings.Count(got, "neigh ") != 1 || strings.Count(got, "fdb ") != 1 || !strings.Contains(got, "fdb 02:00:00:00:00:0c dst 10.1.0.3") {
		t.Fatalf("entries:\n%s\nwant only peer c's", got)
	}
}

// TestVXLANFailureConverges fails each kernel call once (and, separately,
// twice in a row) and checks that Apply reports it, stays dirty and reaches
// exactly the failure-free state within 3 calls.
func TestVXLANFailureConverges(t *testing.T) {
	golden := func() string {
		f, m := newFakeVXLAN(t)
		m.SetPeers([]overlay.Peer{peerB, peerC})
		mustApply(t, m)
		return dump(f, "vxlan.calico")
	}()
	methods := []string{"LinkByName", "LinkByIndex", "LinkAdd", "LinkSetMTU", "LinkSetUp", "LinkSetHardwareAddr",
		"AddrList", "AddrReplace", "NeighList", "NeighSet", "TXChecksum", "SetTXChecksum"}
	for _, method := range methods {
		for _, times := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s x%d", method, times), func(t *testing.T) {
				f, m := newFakeVXLAN(t)
				m.SetPeers([]overlay.Peer{peerB, peerC})
				switch method {
				case "LinkSetHardwareAddr", "LinkSetMTU":
					// Only called when the MAC or MTU differs: start
					// from a device with a wrong one.
					mustApply(t, m)
					f.SetLinkMAC("vxlan.calico", net.HardwareAddr{2, 1, 1, 1, 1, 1})
					f.SetLinkMTU("vxlan.calico", 1234)
					m.QueueCheck()
				}
				for range times {
					f.Fail(method, errBoom)
				}
				err := m.Apply()
				if err == nil || !errors.Is(err, errBoom) {
					t.Fatalf("first Apply: %v, want the injected error", err)
				}
				if !m.Dirty() {
					t.Fatal("clean after a failed Apply")
				}
				var n int
				for n = 1; n < 3 && m.Apply() != nil; n++ {
				}
				if err := m.Apply(); err != nil {
					t.Fatalf("not converged after %d Apply calls: %v", n+1, err)
				}
				if got := dump(f, "vxlan.calico"); got != golden {
					t.Fatalf("converged to:\n%s\nwant:\n%s", got, golden)
				}
			})
		}
	}

	t.Run("stale deletes", func(t *testing.T) {
		for _, method := range []string{"NeighDel", "AddrDel", "LinkDel"} {
			f, m := newFakeVXLAN(t)
			m.SetPeers([]overlay.Peer{peerB, peerC})
			mustApply(t, m)
			m.SetPeers([]overlay.Peer{peerB})
			f.AddAddr("vxlan.calico", netip.MustParsePrefix("192.168.1.1/24"))
			if method == "LinkDel" {
				v := f.Link("vxlan.calico").(*netlink.Vxlan)
				v.VxlanId = 7
				f.ReplaceLink(v)
			}
			m.QueueCheck()
			f.Fail(method, errBoom)
			if err := m.Apply(); !errors.Is(err, errBoom) {
				t.Fatalf("%s: first Apply %v, want the injected error", method, err)
			}
			for range 2 {
				m.Apply()
			}
			if err := m.Apply(); err != nil {
				t.Fatalf("%s: not converged: %v", method, err)
			}
			got := dump(f, "vxlan.calico")
			if strings.Contains(got, "10.244.3.0") || strings.Contains(got, "192.168.1.1") || !strings.Contains(got, "id 4096") {
				t.Fatalf("%s: stale state left:\n%s", method, got)
			}
		}
	})
}

func TestRemoveVXLAN(t *testing.T) {
	f, m := newFakeVXLAN(t)
	mustApply(t, m)
	if err := overlay.RemoveVXLAN(f, "vxlan.calico"); err != nil {
		t.Fatal(err)
	}
	if f.Link("vxlan.calico") != nil {
		t.Fatal("device still there")
	}
	if err := overlay.RemoveVXLAN(f, "vxlan.calico"); err != nil {
		t.Fatalf("removing an absent device: %v", err)
	}
	f.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "vxlan.calico"}})
	if err := overlay.RemoveVXLAN(f, "vxlan.calico"); err == nil || f.Link("vxlan.calico") == nil {
		t.Fatalf("a dummy named vxlan.calico was deleted or not reported (err %v)", err)
	}
}

// TestVXLANLeavesBridge: a device someone enslaved to a bridge is taken out
// of it by the next Apply, and the repair is reported.
func TestVXLANLeavesBridge(t *testing.T) {
	f := overlaytest.NewFakeNetlink()
	f.AddUnderlay("eth0", 1500, netip.MustParsePrefix("10.0.0.1/24"))
	br := f.AddUnderlay("br0", 1500)
	var repairs []string
	m, err := overlay.NewVXLAN(f, overlay.VXLANConfig{HostIP: hostA, NodeName: "a", TunnelAddr: tunA, TXChecksum: overlay.TXChecksumOff, Logger: quiet,
		OnRepair: func(o string) { repairs = append(repairs, o) }})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, m)
	if err := f.SetMaster(overlay.DeviceVXLAN, br); err != nil {
		t.Fatal(err)
	}
	m.OnLinkUpdate(overlay.DeviceVXLAN)
	mustApply(t, m)
	if got := f.Link(overlay.DeviceVXLAN).Attrs().MasterIndex; got != 0 {
		t.Fatalf("master index %d after Apply, want none", got)
	}
	if !slices.Equal(repairs, []string{"master"}) {
		t.Fatalf("repairs reported %v, want [master]", repairs)
	}
	m.QueueCheck()
	mustApply(t, m)
	if len(repairs) != 1 {
		t.Fatalf("a device outside any bridge reported as repaired: %v", repairs)
	}
}
