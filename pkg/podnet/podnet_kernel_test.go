package podnet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/routes"
)

// whyRoot is what these tests need root for.
const whyRoot = "creates network namespaces, veths and routes"

// newNS creates a fresh network namespace removed when the test ends.
func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	return netnstest.NewT(t).NetNS
}

// inNS runs f on a thread locked in n, failing the test on error.
func inNS(t *testing.T, n ns.NetNS, f func() error) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

func attach(t *testing.T, node, pod ns.NetNS, host string, addrs ...string) *Attached {
	t.Helper()
	spec := Spec{HostIface: host, ContIface: "eth0", Netns: pod.Path(), MTU: 1450}
	for _, a := range addrs {
		spec.Addrs = append(spec.Addrs, netip.MustParseAddr(a))
	}
	var att *Attached
	inNS(t, node, func() error {
		var err error
		if att, err = Setup(spec); err != nil {
			return err
		}
		if err := EnableForwarding(att.HasIPv6); err != nil {
			return err
		}
		return AddHostRoutes(host, spec.Addrs, routes.DefaultProtocol)
	})
	return att
}

func TestSetupConfiguresBothSides(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	// Everything checked below starts off: a new namespace takes its IPv4
	// all/default settings from the host's, which a container host has on
	// (ip_forward), and a setting already on proves nothing about Setup.
	for _, key := range []string{
		"net/ipv4/ip_forward", "net/ipv4/conf/default/forwarding", "net/ipv4/conf/default/proxy_arp",
		"net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding", "net/ipv6/conf/default/proxy_ndp",
	} {
		if _, err := netnstest.Sysctl(node, key, "0"); err != nil {
			t.Fatal(err)
		}
	}
	att := attach(t, node, pod, "calitest00001", "10.77.0.5", "fd77::5")

	if att.HostMAC.String() != "ee:ee:ee:ee:ee:ee" {
		t.Errorf("host MAC = %s, want ee:ee:ee:ee:ee:ee", att.HostMAC)
	}
	inNS(t, node, func() error {
		hv, err := InspectHost("calitest00001")
		if err != nil {
			return err
		}
		if !hv.Exists || hv.Type != "veth" || !hv.Up {
			t.Errorf("host veth: exists=%v type=%q up=%v, want an up veth", hv.Exists, hv.Type, hv.Up)
		}
		for _, want := range []string{"10.77.0.5/32", "fd77::5/128"} {
			found := false
			for _, r := range hv.Routes {
				if r.Dst.String() == want && r.Protocol == routes.DefaultProtocol {
					found = true
				}
			}
			if !found {
				t.Errorf("host route %s proto 80 missing; routes: %+v", want, hv.Routes)
			}
		}
		for key, want := range map[string]string{
			"net/ipv4/conf/calitest00001/proxy_arp":    "1",
			"net/ipv4/neigh/calitest00001/proxy_delay": "0",
			"net/ipv4/conf/calitest00001/forwarding":   "1",
			"net/ipv6/conf/calitest00001/accept_ra":    "0",
			"net/ipv6/conf/calitest00001/proxy_ndp":    "1",
			"net/ipv6/conf/calitest00001/forwarding":   "1",
			"net/ipv4/ip_forward":                      "1",
			"net/ipv6/conf/all/forwarding":             "1",
		} {
			got, err := ReadSysctl(key)
			if err != nil {
				return err
			}
			if got != want {
				t.Errorf("sysctl %s = %s, want %s", key, got, want)
			}
		}
		return nil
	})

	pv, err := InspectPod(pod.Path(), "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if !pv.Exists || !pv.Up || pv.MAC != att.ContMAC.String() {
		t.Errorf("pod eth0: exists=%v up=%v mac=%s, want up with MAC %s", pv.Exists, pv.Up, pv.MAC, att.ContMAC)
	}
	for _, want := range []string{"10.77.0.5/32", "fd77::5/128"} {
		if !slices.Contains(pv.Addrs, netip.MustParsePrefix(want)) {
			t.Errorf("pod address %s missing; have %v", want, pv.Addrs)
		}
	}
	for _, want := range []struct{ dst, gw string }{
		{"0.0.0.0/0", "169.254.1.1"},
		{"::/0", "fe80::ecee:eeff:feee:eeee"},
		{"169.254.1.1/32", ""},
	} {
		var gw netip.Addr
		if want.gw != "" {
			gw = netip.MustParseAddr(want.gw)
		}
		if !HasRoute(pv.Routes, netip.MustParsePrefix(want.dst), gw) {
			t.Errorf("pod route %s via %q missing; routes: %+v", want.dst, want.gw, pv.Routes)
		}
	}
	inNS(t, pod, func() error {
		neighs, err := netlink.NeighList(att.ContIndex, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			if n.IP.String() == "169.254.1.1" && n.HardwareAddr.String() == "ee:ee:ee:ee:ee:ee" && n.State == netlink.NUD_PERMANENT {
				return nil
			}
		}
		t.Errorf("pod has no permanent neighbour 169.254.1.1 -> ee:ee:ee:ee:ee:ee: %+v", neighs)
		return nil
	})

	// The node reaches each pod address without ARP/NDP: a permanent
	// neighbour on the host veth points at the pod's MAC.
	inNS(t, node, func() error {
		neighs, err := netlink.NeighList(att.HostIndex, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, want := range []string{"10.77.0.5", "fd77::5"} {
			found := false
			for _, n := range neighs {
				if n.IP.String() == want && n.HardwareAddr.String() == att.ContMAC.String() && n.State == netlink.NUD_PERMANENT {
					found = true
				}
			}
			if !found {
				t.Errorf("host veth has no permanent neighbour %s -> %s: %+v", want, att.ContMAC, neighs)
			}
		}
		return nil
	})

	// Teardown removes the pair and the host routes; repeating it is fine.
	inNS(t, node, func() error {
		if err := Teardown("calitest00001"); err != nil {
			return err
		}
		if err := Teardown("calitest00001"); err != nil {
			t.Errorf("second Teardown: %v, want nil", err)
		}
		return wantHostVethGone(t, "calitest00001", "Teardown")
	})
	if pv, err := InspectPod(pod.Path(), "eth0"); err != nil || pv.Exists {
		t.Errorf("pod eth0 after Teardown: exists=%v err=%v, want gone", pv != nil && pv.Exists, err)
	}
}

// TestAddHostRoutesProtocol: the host routes carry the protocol the caller
// passes, and adding them again with another protocol replaces them (the
// protocol is no part of a route's key) rather than leaving both.
func TestAddHostRoutesProtocol(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	attach(t, node, pod, "calitest00081", "10.77.0.81", "fd77::81")
	addrs := []netip.Addr{netip.MustParseAddr("10.77.0.81"), netip.MustParseAddr("fd77::81")}
	inNS(t, node, func() error {
		if err := AddHostRoutes("calitest00081", addrs, 81); err != nil {
			return err
		}
		hv, err := InspectHost("calitest00081")
		if err != nil {
			return err
		}
		for _, want := range []string{"10.77.0.81/32", "fd77::81/128"} {
			var protos []int
			for _, r := range hv.Routes {
				if r.Dst.String() == want {
					protos = append(protos, r.Protocol)
				}
			}
			if !slices.Equal(protos, []int{81}) {
				t.Errorf("host route %s: protocols %v, want just 81; routes %+v", want, protos, hv.Routes)
			}
		}
		return nil
	})
}

func TestTwoPodsPingV4AndV6(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, podA, podB := newNS(t), newNS(t), newNS(t)
	attach(t, node, podA, "calitestpinga", "10.78.0.2", "fd78::2")
	attach(t, node, podB, "calitestpingb", "10.78.0.3", "fd78::3")
	netnstest.CheckPing(t, podA, "10.78.0.3")
	netnstest.CheckPing(t, podB, "10.78.0.2")
	netnstest.CheckPing(t, podA, "fd78::3")
	netnstest.CheckPing(t, podB, "fd78::2")
}

func TestSetupRollsBackWhenPodIfaceTaken(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	inNS(t, pod, func() error {
		return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}})
	})
	inNS(t, node, func() error {
		_, err := Setup(Spec{HostIface: "calitestroll01", ContIface: "eth0", Netns: pod.Path(), MTU: 1500,
			Addrs: []netip.Addr{netip.MustParseAddr("10.79.0.2")}})
		if err == nil || !strings.Contains(err.Error(), "eth0") {
			t.Errorf("Setup with eth0 taken: err = %v, want an error naming eth0", err)
		}
		return wantHostVethGone(t, "calitestroll01", "a failed Setup")
	})
}

// wantHostVethGone reports a test error when the host veth name exists in
// the calling thread's namespace; after says after what it should be gone.
func wantHostVethGone(t *testing.T, name, after string) error {
	t.Helper()
	hv, err := InspectHost(name)
	if err != nil {
		return err
	}
	if hv.Exists {
		t.Errorf("host veth %s still exists after %s", name, after)
	}
	return nil
}

func TestSetupReplacesStaleVethButNotForeignLink(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod1, pod2 := newNS(t), newNS(t), newNS(t)
	attach(t, node, pod1, "calitestst0001", "10.80.0.2")
	// Same host name again (a new sandbox of the same pod): the old pair goes.
	att := attach(t, node, pod2, "calitestst0001", "10.80.0.3")
	if !att.ReplacedOld {
		t.Errorf("ReplacedOld = false, want true")
	}
	if pv, err := InspectPod(pod1.Path(), "eth0"); err != nil || pv.Exists {
		t.Errorf("old pod's eth0 still exists (err %v)", err)
	}
	// A link routelet did not create is never deleted.
	inNS(t, node, func() error {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "calitestdummy"}}); err != nil {
			return err
		}
		_, err := Setup(Spec{HostIface: "calitestdummy", ContIface: "eth0", Netns: pod1.Path(), MTU: 1500,
			Addrs: []netip.Addr{netip.MustParseAddr("10.80.0.4")}})
		if err == nil || !strings.Contains(err.Error(), "calitestdummy") {
			t.Errorf("Setup over a bridge: err = %v, want an error naming calitestdummy", err)
		}
		if err := Teardown("calitestdummy"); err == nil {
			t.Errorf("Teardown of a bridge succeeded, want refusal")
		}
		if _, err := netlink.LinkByName("calitestdummy"); err != nil {
			t.Errorf("bridge was removed: %v", err)
		}
		return nil
	})
}

func TestSetupRefusesOwnNamespace(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	inNS(t, node, func() error {
		if same, err := IsCurrentNetns(node.Path()); err != nil || !same {
			t.Errorf("IsCurrentNetns(node) = %v, %v; want true", same, err)
		}
		if same, err := IsCurrentNetns(pod.Path()); err != nil || same {
			t.Errorf("IsCurrentNetns(pod) = %v, %v; want false", same, err)
		}
		_, err := Setup(Spec{HostIface: "calitestown001", ContIface: "eth0", Netns: node.Path(), MTU: 1500,
			Addrs: []netip.Addr{netip.MustParseAddr("10.81.0.2")}})
		if err == nil || !strings.Contains(err.Error(), node.Path()) {
			t.Errorf("Setup into the node's own netns: err = %v, want refusal naming it", err)
		}
		return nil
	})
}

// TestHostRoutesAsTheTableWritesThem: the host routes AddHostRoutes adds
// read back from the kernel as the daemon's route table wants them
// (routes.Spec.Mismatch finds nothing), under the key it writes them at
// (main table, its metric), so the table leaves them alone.
func TestHostRoutesAsTheTableWritesThem(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	node, pod := newNS(t), newNS(t)
	attach(t, node, pod, "calitest00082", "10.77.0.82", "fd77::82")
	addrs := []netip.Addr{netip.MustParseAddr("10.77.0.82"), netip.MustParseAddr("fd77::82")}
	inNS(t, node, func() error {
		if err := AddHostRoutes("calitest00082", addrs, routes.DefaultProtocol); err != nil {
			return err
		}
		l, err := netlink.LinkByName("calitest00082")
		if err != nil {
			return err
		}
		for _, a := range addrs {
			spec := routes.Spec{IPVersion: 4, Protocol: routes.DefaultProtocol}
			if a.Is6() {
				spec.IPVersion = 6
			}
			want := HostRoute(a, l.Attrs().Index, routes.DefaultProtocol)
			rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Dst: want.Dst, Table: unix.RT_TABLE_MAIN},
				netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
			if err != nil {
				return err
			}
			if len(rs) != 1 {
				t.Errorf("host route %s: %d routes %+v, want one", a, len(rs), rs)
				continue
			}
			r := rs[0]
			if m := spec.Mismatch(&r, routes.Target{CIDR: netip.PrefixFrom(a, a.BitLen()), Type: routes.TypeLink}); m != "" {
				t.Errorf("host route %s: the route table would rewrite it: kernel has %s (%+v)", a, m, r)
			}
			if r.LinkIndex != want.LinkIndex || r.Priority != want.Priority || r.Tos != 0 {
				t.Errorf("host route %s: dev %d metric %d tos %d, want dev %d metric %d tos 0", a, r.LinkIndex, r.Priority, r.Tos, want.LinkIndex, want.Priority)
			}
		}
		return nil
	})
}
