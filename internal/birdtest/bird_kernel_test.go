package birdtest

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// rtprotBird is the kernel route protocol BIRD stamps on what it exports
// (RTPROT_BIRD).
const rtprotBird = 12

// pair is two namespaces joined by a veth: a (10.9.0.1, fd09::1 on va)
// and b (10.9.0.2, fd09::2 on vb).
func pair(t *testing.T) (a, b *netnstest.NS) {
	t.Helper()
	SkipUnlessInstalled(t)
	a, b = netnstest.NewT(t), netnstest.NewT(t)
	bfd, err := netns.GetFromPath(b.NetNS.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer bfd.Close()
	if err := a.Handle.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "va"}, PeerName: "vb", PeerNamespace: netlink.NsFd(bfd)}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		n    *netnstest.NS
		link string
		addr []string
	}{{a, "va", []string{"10.9.0.1/24", "fd09::1/64"}}, {b, "vb", []string{"10.9.0.2/24", "fd09::2/64"}}} {
		l, err := e.n.Handle.LinkByName(e.link)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range e.addr {
			ad, _ := netlink.ParseAddr(s)
			ad.Flags = unix.IFA_F_NODAD
			if err := e.n.Handle.AddrAdd(l, ad); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.n.Handle.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// kernelRoutes returns the routes BIRD exported into n's main table, as
// "<dst> via <gw>".
func kernelRoutes(n *netnstest.NS) ([]string, error) {
	var out []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := n.Handle.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: rtprotBird},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s via %s", r.Dst, r.Gw))
		}
	}
	slices.Sort(out)
	return out, nil
}

// TestTwoBirds: a BIRD announcing static routes over IPv4 and IPv6
// sessions to another one, which learns them (birdc shows them, with next
// hop and protocol) and exports them into its namespace's kernel table;
// an import filter keeps out what it does not list; a disabled protocol
// withdraws, a reconfiguration adds a route, a killed announcer's routes
// are kept by graceful restart; Stop leaves no process.
func TestTwoBirds(t *testing.T) {
	a, b := pair(t)
	ctx := t.Context()
	static := []netip.Prefix{netip.MustParsePrefix("10.100.0.0/24"), netip.MustParsePrefix("10.100.1.0/24"), netip.MustParsePrefix("fd00:100::/64")}
	acfg := Config{RouterID: netip.MustParseAddr("10.9.0.1"), NoKernel: true, Static: static, Neighbors: []Neighbor{
		{Address: netip.MustParseAddr("10.9.0.2"), ASN: 65002, LocalASN: 65001, GracefulRestart: true, Password: "pw"},
		{Address: netip.MustParseAddr("fd09::2"), ASN: 65002, LocalASN: 65001, GracefulRestart: true},
	}}
	bcfg := Config{RouterID: netip.MustParseAddr("10.9.0.2"), Direct: true, Neighbors: []Neighbor{
		{Address: netip.MustParseAddr("10.9.0.1"), ASN: 65001, LocalASN: 65002, GracefulRestart: true, Password: "pw",
			Accept: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/24"), netip.MustParsePrefix("10.100.2.0/24")}},
		{Address: netip.MustParseAddr("fd09::1"), ASN: 65001, LocalASN: 65002, GracefulRestart: true},
	}}
	ba := StartT(t, a.NetNS, acfg)
	bb := StartT(t, b.NetNS, bcfg)
	peer4, peer6 := ProtocolName(netip.MustParseAddr("10.9.0.1")), ProtocolName(netip.MustParseAddr("fd09::1"))

	netnstest.WaitFor(t, 10*time.Second, "both sessions established", func() error {
		for _, name := range []string{peer4, peer6} {
			p, err := bb.Protocol(ctx, name)
			if err != nil {
				return err
			}
			if !p.Established() {
				return fmt.Errorf("%s: %s %s", name, p.State, p.Info)
			}
		}
		return nil
	})
	want := []string{"10.100.0.0/24 via 10.9.0.1", "fd00:100::/64 via fd09::1"}
	netnstest.WaitFor(t, 10*time.Second, "the accepted routes in b's kernel table", func() error {
		got, err := kernelRoutes(b)
		if err != nil || !slices.Equal(got, want) {
			return fmt.Errorf("kernel routes %v, %v; want %v", got, err, want)
		}
		return nil
	})
	rs, err := bb.ProtocolRoutes(ctx, peer4)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Prefix != static[0] || rs[0].NextHop != netip.MustParseAddr("10.9.0.1") || rs[0].Iface != "vb" ||
		!rs[0].Primary || rs[0].Table != "master4" || rs[0].ASPath != "AS65001i" {
		t.Errorf("routes from %s: %v; want only %s via 10.9.0.1 on vb (10.100.1.0/24 is not in the import filter)", peer4, rs, static[0])
	}
	rs, err = bb.Routes(ctx, "table", "master6")
	if err != nil {
		t.Fatal(err)
	}
	var got6 []string
	for _, r := range rs {
		got6 = append(got6, r.String())
	}
	if !slices.Contains(got6, "fd00:100::/64 unicast [peer_fd09__1] via fd09::1 on vb") || !slices.Contains(got6, "fd09::/64 unicast [direct1] on vb") {
		t.Errorf("b's master6: %v", got6)
	}
	if ps, err := bb.BGPPrefixes(ctx); err != nil || len(ps) != 2 {
		t.Errorf("b's BGP prefixes %v, %v; want two", ps, err)
	}

	// A disabled protocol withdraws what it learned, from birdc and the
	// kernel.
	if err := bb.Disable(ctx, peer6); err != nil {
		t.Fatal(err)
	}
	netnstest.WaitFor(t, 10*time.Second, "the IPv6 route withdrawn", func() error {
		got, err := kernelRoutes(b)
		if err != nil || !slices.Equal(got, want[:1]) {
			return fmt.Errorf("kernel routes %v, %v; want %v", got, err, want[:1])
		}
		return nil
	})
	if p, err := bb.Protocol(ctx, peer6); err != nil || p.State != "down" {
		t.Errorf("disabled %s: %+v, %v; want down", peer6, p, err)
	}
	if err := bb.Enable(ctx, peer6); err != nil {
		t.Fatal(err)
	}
	if err := bb.Disable(ctx, "no_such_protocol"); err == nil {
		t.Error("disabling a protocol BIRD does not have succeeded")
	}
	if _, err := bb.Routes(ctx, "protocol", "no_such_protocol"); err == nil {
		t.Error("the routes of a protocol BIRD does not have: no error")
	}

	// A reconfigured announcer adds a prefix the filter takes.
	acfg.Static = append(acfg.Static, netip.MustParsePrefix("10.100.2.0/24"))
	if err := ba.Reconfigure(ctx, acfg); err != nil {
		t.Fatal(err)
	}
	want = []string{"10.100.0.0/24 via 10.9.0.1", "10.100.2.0/24 via 10.9.0.1", "fd00:100::/64 via fd09::1"}
	netnstest.WaitFor(t, 10*time.Second, "the new route and the IPv6 one back", func() error {
		got, err := kernelRoutes(b)
		if err != nil || !slices.Equal(got, want) {
			return fmt.Errorf("kernel routes %v, %v; want %v", got, err, want)
		}
		return nil
	})

	// A killed announcer: graceful restart keeps its routes.
	ba.Kill()
	netnstest.WaitFor(t, 10*time.Second, "b sees a's restart", func() error {
		d, err := bb.Detail(ctx, peer4)
		if err != nil {
			return err
		}
		if !d.GracefulRestart || d.Established() {
			return fmt.Errorf("%s: %+v", peer4, d)
		}
		return nil
	})
	if got, err := kernelRoutes(b); err != nil || !slices.Equal(got, want) {
		t.Errorf("kernel routes while a restarts: %v, %v; want %v (kept)", got, err, want)
	}
	if ps, err := bb.BGPPrefixes(ctx); err != nil || len(ps) != 3 {
		t.Errorf("b's BGP prefixes while a restarts: %v, %v; want three", ps, err)
	}

	pid := bb.PID()
	if err := bb.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("bird %d still there after Stop", pid)
	}
	if _, err := os.Stat(bb.Socket); err == nil {
		t.Logf("control socket %s left after SIGTERM", bb.Socket)
	}
}

// TestManyPrefixes: 1000 IPv4 prefixes announced by one BIRD (what a
// bench needs) all reach the other's kernel table.
func TestManyPrefixes(t *testing.T) {
	a, b := pair(t)
	static, err := Subnets(netip.MustParsePrefix("10.128.0.0/9"), 24, 1000)
	if err != nil {
		t.Fatal(err)
	}
	StartT(t, a.NetNS, Config{RouterID: netip.MustParseAddr("10.9.0.1"), NoKernel: true, Static: static, Neighbors: []Neighbor{
		{Address: netip.MustParseAddr("10.9.0.2"), ASN: 65002, LocalASN: 65001}}})
	start := time.Now()
	StartT(t, b.NetNS, Config{RouterID: netip.MustParseAddr("10.9.0.2"), Neighbors: []Neighbor{
		{Address: netip.MustParseAddr("10.9.0.1"), ASN: 65001, LocalASN: 65002}}})
	took := netnstest.WaitFor(t, 30*time.Second, "1000 routes in b's kernel table", func() error {
		got, err := kernelRoutes(b)
		if err != nil || len(got) != len(static) {
			return fmt.Errorf("%d routes, %v; want %d", len(got), err, len(static))
		}
		return nil
	})
	t.Logf("1000 prefixes in the kernel %s after BIRD started (%s waited)", time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
}
