package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/birdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// probePort is where listen accepts TCP connections (ping need not be
// installed for these tests).
const probePort = "7777"

// listen accepts (and closes) TCP connections on probePort over IPv4 and
// IPv6 inside n until t ends.
func listen(t *testing.T, n ns.NetNS) {
	t.Helper()
	for _, network := range []string{"tcp4", "tcp6"} {
		netnstest.ServeTCP(t, n, network, ":"+probePort, func(net.Conn) {})
	}
}

// dial connects from inside n to addr's probePort within 2 s.
func dial(n ns.NetNS, addr string) error {
	return n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, probePort), 2*time.Second)
		if err != nil {
			return fmt.Errorf("from netns %s: %w", netnstest.Name(n), err)
		}
		return c.Close()
	})
}

// TestSubnetsAndRouterBird: nodes on two bridged subnets and a routed
// one reach each other's host addresses through the router; a prefix
// behind a host on the second subnet is reachable from the first only
// once the router's BIRD has learned it over BGP from the host's BIRD
// (and exported it into the router's kernel table); Close stops both
// BIRDs.
func TestSubnetsAndRouterBird(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces and runs BIRD in them")
	birdtest.SkipUnlessInstalled(t)
	// A crashed run's BIRD directory goes with RemoveStale; ours stay.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-test", birdDirPrefix, gone.Process.Pid))
	live := filepath.Join(os.TempDir(), netnstest.OwnedPrefix(birdDirPrefix)+"test")
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	if _, err := RemoveStale("routelet-cltest-"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("RemoveStale left %s, of a process that is gone", stale)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("RemoveStale removed %s, of this process: %v", live, err)
	}
	c, err := New(Options{Prefix: netnstest.OwnedPrefix("routelet-cltest-"), PluginDir: t.TempDir(), WorkDir: t.TempDir(),
		Nodes: []NodeSpec{
			{Name: "a", Host4: "10.0.1.10/24", Host6: "fd00:1::10/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1"},
			{Name: "b", Host4: "10.0.2.10/24", Host6: "fd00:2::10/64", Gw4: "10.0.2.1", Gw6: "fd00:2::1", Bridge: "br1"},
			{Name: "c", Host4: "10.0.2.11/24", Host6: "fd00:2::11/64", Gw4: "10.0.2.1", Gw6: "fd00:2::1", Bridge: "br1"},
			{Name: "d", Host4: "10.0.3.10/24", Host6: "fd00:3::10/64", Gw4: "10.0.3.1", Gw6: "fd00:3::1", Routed: true},
		}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			c.Close()
		}
	})
	ctx := t.Context()
	a := c.Nodes[0]
	for _, n := range c.Nodes[1:] {
		listen(t, n.CNI.NS)
	}
	for _, to := range []string{"10.0.2.10", "fd00:2::11", "10.0.3.10", "fd00:3::10"} {
		if err := dial(a.CNI.NS, to); err != nil {
			t.Error(err)
		}
	}
	if err := dial(c.Nodes[1].CNI.NS, "10.0.2.11"); err != nil {
		t.Error(err)
	}
	rnl := netnstest.HandleFor(t, c.Router)
	for _, br := range []string{"br0", "br1"} {
		l, err := rnl.LinkByName(br)
		if err != nil {
			t.Fatalf("router %s: %v", br, err)
		}
		ports := 0
		links, _ := rnl.LinkList()
		for _, p := range links {
			if p.Attrs().MasterIndex == l.Attrs().Index {
				ports++
			}
		}
		if want := map[string]int{"br0": 1, "br1": 2}[br]; ports != want {
			t.Errorf("router %s has %d ports, want %d", br, ports, want)
		}
	}

	x, err := c.AddHost(NodeSpec{Name: "x", Host4: "10.0.2.20/24", Host6: "fd00:2::20/64", Gw4: "10.0.2.1", Gw6: "fd00:2::1", Bridge: "br1"})
	if err != nil {
		t.Fatal(err)
	}
	xnl := netnstest.HandleFor(t, x.CNI.NS)
	lo, err := xnl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"10.77.0.1/32", "fd00:77::1/128"} {
		ad, _ := netlink.ParseAddr(s)
		if err := xnl.AddrAdd(lo, ad); err != nil {
			t.Fatal(err)
		}
	}
	listen(t, x.CNI.NS)
	if err := dial(a.CNI.NS, "10.77.0.1"); err == nil {
		t.Fatal("10.77.0.1 answers a before the router has a route to it")
	}
	xb, err := c.StartBird(ctx, x.CNI.NS, birdtest.Config{RouterID: netip.MustParseAddr("10.0.2.20"), NoKernel: true,
		Static: []netip.Prefix{netip.MustParsePrefix("10.77.0.0/24"), netip.MustParsePrefix("fd00:77::/64")},
		Neighbors: []birdtest.Neighbor{
			{Address: netip.MustParseAddr("10.0.2.1"), ASN: 65000, LocalASN: 65077},
			{Address: netip.MustParseAddr("fd00:2::1"), ASN: 65000, LocalASN: 65077},
		}})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := c.StartRouterBird(ctx, birdtest.Config{RouterID: netip.MustParseAddr("10.0.1.1"), Neighbors: []birdtest.Neighbor{
		{Address: netip.MustParseAddr("10.0.2.20"), ASN: 65077, LocalASN: 65000},
		{Address: netip.MustParseAddr("fd00:2::20"), ASN: 65077, LocalASN: 65000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 10*time.Second, "the router's kernel routes to x's prefixes", func() error {
		var got []string
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			rs, err := rnl.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: 12}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
			if err != nil {
				return err
			}
			for _, r := range rs {
				got = append(got, fmt.Sprintf("%s via %s", r.Dst, r.Gw))
			}
		}
		if len(got) != 2 || got[0] != "10.77.0.0/24 via 10.0.2.20" || got[1] != "fd00:77::/64 via fd00:2::20" {
			return fmt.Errorf("router's bird routes %v", got)
		}
		return nil
	})
	if ps, err := rb.BGPPrefixes(ctx); err != nil || len(ps) != 2 {
		t.Errorf("router's BGP prefixes %v, %v; want x's two", ps, err)
	}
	for _, to := range []string{"10.77.0.1", "fd00:77::1"} {
		if err := dial(a.CNI.NS, to); err != nil {
			t.Error(err)
		}
	}

	pids := []int{xb.PID(), rb.PID()}
	dirs := []string{xb.Dir, rb.Dir}
	closed = true
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil && alive(pid) {
			t.Errorf("bird %d still running after Close", pid)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("bird directory %s left after Close", d)
		}
	}
}
