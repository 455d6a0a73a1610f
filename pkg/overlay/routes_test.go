package overlay_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

// render prints routes like `ip route` would, one line each, sorted, per
// interface in name order; interfaces with no routes show as "<iface>: -".
func render(byIface map[string][]routes.Target) string {
	var names []string
	for n := range byIface {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		ts := byIface[n]
		if len(ts) == 0 {
			fmt.Fprintf(&b, "%s: -\n", n)
			continue
		}
		var lines []string
		for _, t := range ts {
			if t.Type != routes.TypeGateway {
				lines = append(lines, fmt.Sprintf("%s type %d dev %s", t.CIDR, t.Type, n))
				continue
			}
			l := fmt.Sprintf("%s via %s dev %s", t.CIDR, t.Gateway, n)
			if t.OnLink {
				l += " onlink"
			}
			if t.MTU != 0 {
				l += fmt.Sprintf(" mtu %d", t.MTU)
			}
			lines = append(lines, l)
		}
		slices.Sort(lines)
		for _, l := range lines {
			fmt.Fprintf(&b, "%s\n", l)
		}
	}
	return b.String()
}

func TestRoutesPerMode(t *testing.T) {
	// Node a on 10.0.0.0/24 (eth0); b on the same subnet; c behind a router.
	base := overlay.RouteInput{
		IPVersion:     4,
		Parent:        "eth0",
		ParentSubnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
		LocalBlocks:   []netip.Prefix{netip.MustParsePrefix("10.244.1.0/26")},
		MTU:           1450,
		Peers:         []overlay.Peer{peerC, peerB},
	}
	tests := []struct {
		mode     overlay.Mode
		mtu      int
		want     string
		problems int
	}{
		{overlay.ModeVXLAN, 1450, `eth0: -
tunl0: -
10.244.2.0/26 via 10.244.2.0 dev vxlan.calico onlink mtu 1450
10.244.3.0/26 via 10.244.3.0 dev vxlan.calico onlink mtu 1450
10.244.4.0/26 via 10.244.3.0 dev vxlan.calico onlink mtu 1450
`, 0},
		{overlay.ModeVXLANCrossSubnet, 1450, `10.244.2.0/26 via 10.0.0.2 dev eth0
tunl0: -
10.244.3.0/26 via 10.244.3.0 dev vxlan.calico onlink mtu 1450
10.244.4.0/26 via 10.244.3.0 dev vxlan.calico onlink mtu 1450
`, 0},
		{overlay.ModeIPIP, 1480, `eth0: -
10.244.2.0/26 via 10.0.0.2 dev tunl0 onlink mtu 1480
10.244.3.0/26 via 10.1.0.3 dev tunl0 onlink mtu 1480
10.244.4.0/26 via 10.1.0.3 dev tunl0 onlink mtu 1480
vxlan.calico: -
`, 0},
		{overlay.ModeIPIPCrossSubnet, 1480, `10.244.2.0/26 via 10.0.0.2 dev eth0
10.244.3.0/26 via 10.1.0.3 dev tunl0 onlink mtu 1480
10.244.4.0/26 via 10.1.0.3 dev tunl0 onlink mtu 1480
vxlan.calico: -
`, 0},
		{overlay.ModeNone, 0, `10.244.2.0/26 via 10.0.0.2 dev eth0
tunl0: -
vxlan.calico: -
`, 1}, // c is not on our subnet: reported, not routed
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			in := base
			in.Mode, in.MTU = tc.mode, tc.mtu
			got, problems := overlay.Routes(in)
			if r := render(got); r != tc.want {
				t.Errorf("routes:\n%s\nwant:\n%s", r, tc.want)
			}
			if len(problems) != tc.problems {
				t.Errorf("problems %v, want %d", problems, tc.problems)
			}
			for _, p := range problems {
				if !strings.Contains(p.Error(), "peer c") {
					t.Errorf("problem %q does not name the peer", p)
				}
			}
			// Every owned interface is a key, so feeding the result to
			// SetRoutes clears the routes of the other modes.
			for _, name := range overlay.OwnedInterfaces(in) {
				if _, ok := got[name]; !ok {
					t.Errorf("owned interface %s missing from the result", name)
				}
			}
		})
	}
}

func TestRoutesIPv6(t *testing.T) {
	b6 := overlay.Peer{Name: "b", HostIP: netip.MustParseAddr("fd00::2"), VTEPMAC: macB, TunnelIP: netip.MustParseAddr("fd10:2::"),
		Blocks: []netip.Prefix{netip.MustParsePrefix("fd10:2::/122")}}
	c6 := overlay.Peer{Name: "c", HostIP: netip.MustParseAddr("fd01::3"), VTEPMAC: macC, TunnelIP: netip.MustParseAddr("fd10:3::"),
		Blocks: []netip.Prefix{netip.MustParsePrefix("fd10:3::/122"), netip.MustParsePrefix("10.244.3.0/26")}}
	in := overlay.RouteInput{Mode: overlay.ModeVXLANCrossSubnet, IPVersion: 6, Parent: "eth0", MTU: 1430,
		ParentSubnets: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}, Peers: []overlay.Peer{b6, c6}}
	got, problems := overlay.Routes(in)
	want := `fd10:2::/122 via fd00::2 dev eth0
fd10:3::/122 via fd10:3:: dev vxlan-v6.calico onlink mtu 1430
`
	if r := render(got); r != want || len(problems) != 0 {
		t.Fatalf("v6 routes:\n%s\nwant:\n%s(problems %v)", r, want, problems)
	}
	if names := overlay.OwnedInterfaces(in); !slices.Equal(names, []string{"vxlan-v6.calico", "eth0"}) {
		t.Fatalf("owned v6 interfaces %v", names)
	}

	// IPIP has no IPv6 tunnel: same-subnet peers still get direct routes,
	// the others are reported.
	in.Mode = overlay.ModeIPIPCrossSubnet
	got, problems = overlay.Routes(in)
	if r := render(got); r != "fd10:2::/122 via fd00::2 dev eth0\nvxlan-v6.calico: -\n" || len(problems) != 1 || !strings.Contains(problems[0].Error(), "IPv4 only") {
		t.Fatalf("v6 in ipip mode:\n%s problems %v", r, problems)
	}
}

func TestRoutesConflictsAndIncompletePeers(t *testing.T) {
	ours := overlay.Peer{Name: "evil", HostIP: netip.MustParseAddr("10.0.0.66"), VTEPMAC: macC, TunnelIP: netip.MustParseAddr("10.244.66.0"),
		Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.244.66.0/26")}}
	dup := overlay.Peer{Name: "zz", HostIP: netip.MustParseAddr("10.0.0.77"), VTEPMAC: macC, TunnelIP: netip.MustParseAddr("10.244.77.0"),
		Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/26")}}
	noVTEP := overlay.Peer{Name: "novtep", HostIP: netip.MustParseAddr("10.9.0.1"), Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.9.0/26")}}
	in := overlay.RouteInput{Mode: overlay.ModeVXLAN, IPVersion: 4, Parent: "eth0", ParentSubnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/26")}, Peers: []overlay.Peer{dup, noVTEP, ours, peerB}}
	got, problems := overlay.Routes(in)
	want := `eth0: -
tunl0: -
10.244.2.0/26 via 10.244.2.0 dev vxlan.calico onlink
10.244.66.0/26 via 10.244.66.0 dev vxlan.calico onlink
`
	if r := render(got); r != want {
		t.Fatalf("routes:\n%s\nwant:\n%s", r, want)
	}
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.Error())
	}
	joined := strings.Join(msgs, "\n")
	for _, w := range []string{"peer evil: block 10.244.1.0/24 overlaps", "peer zz: block 10.244.2.0/26", "peer novtep: no IPv4 VTEP"} {
		if !strings.Contains(joined, w) {
			t.Errorf("problems lack %q:\n%s", w, joined)
		}
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		encap string
		cross bool
		want  overlay.Mode
	}{
		{"vxlan", false, overlay.ModeVXLAN}, {"VXLAN", true, overlay.ModeVXLANCrossSubnet},
		{"ipip", false, overlay.ModeIPIP}, {"ipip", true, overlay.ModeIPIPCrossSubnet},
		{"none", false, overlay.ModeNone}, {"none", true, overlay.ModeNone},
	}
	for _, tc := range tests {
		if got, err := overlay.ParseMode(tc.encap, tc.cross); err != nil || got != tc.want {
			t.Errorf("ParseMode(%q, %v) = %q, %v; want %q", tc.encap, tc.cross, got, err, tc.want)
		}
	}
	if _, err := overlay.ParseMode("gre", false); err == nil || !strings.Contains(err.Error(), `"gre"`) {
		t.Errorf("ParseMode(gre): %v, want an error naming it", err)
	}
}

func TestPodMTU(t *testing.T) {
	tests := []struct {
		configured, parent int
		mode               overlay.Mode
		v6                 bool
		want               int
	}{
		{0, 1500, overlay.ModeVXLAN, false, 1450},
		{0, 1500, overlay.ModeVXLANCrossSubnet, true, 1430},
		{0, 1500, overlay.ModeIPIP, false, 1480},
		{0, 9001, overlay.ModeNone, false, 9001},
		{1400, 1500, overlay.ModeVXLAN, false, 1400},
	}
	for _, tc := range tests {
		got, err := overlay.PodMTU(tc.configured, tc.parent, tc.mode, tc.v6)
		if err != nil || got != tc.want {
			t.Errorf("PodMTU(%d, %d, %s, v6=%v) = %d, %v; want %d", tc.configured, tc.parent, tc.mode, tc.v6, got, err, tc.want)
		}
	}
	if _, err := overlay.PodMTU(0, 1300, overlay.ModeVXLAN, true); err == nil || !strings.Contains(err.Error(), "1300") {
		t.Errorf("PodMTU below the IPv6 minimum: %v, want an error naming 1300", err)
	}
}

// TestWireGuardPodMTU: with encryption on the pod MTU is the parent's
// minus 60 over IPv4 and 80 over an IPv6-only underlay, a configured MTU
// wins, and a parent too small for the minimum is an error naming it.
func TestWireGuardPodMTU(t *testing.T) {
	for _, tc := range []struct {
		configured, parent int
		v6                 bool
		want               int
	}{
		{0, 1500, false, 1440},
		{0, 1500, true, 1420},
		{0, 9001, false, 8941},
		{1380, 1500, false, 1380},
	} {
		got, err := overlay.WireGuardPodMTU(tc.configured, tc.parent, tc.v6)
		if err != nil || got != tc.want {
			t.Errorf("WireGuardPodMTU(%d, %d, v6=%v) = %d, %v; want %d", tc.configured, tc.parent, tc.v6, got, err, tc.want)
		}
	}
	if _, err := overlay.WireGuardPodMTU(0, 1350, true); err == nil || !strings.Contains(err.Error(), "1350") || !strings.Contains(err.Error(), "WireGuard") {
		t.Errorf("WireGuardPodMTU below the IPv6 minimum: %v, want an error naming 1350 and WireGuard", err)
	}
}

func TestVTEPMACAndTunnelAddress(t *testing.T) {
	a, b := overlay.VTEPMAC("node-a", 4), overlay.VTEPMAC("node-b", 4)
	if a.String() == b.String() {
		t.Fatal("two nodes derived the same MAC")
	}
	if a.String() != overlay.VTEPMAC("node-a", 4).String() {
		t.Fatal("MAC not stable for the same node")
	}
	for _, mac := range []string{a.String(), b.String(), overlay.VTEPMAC("node-a", 6).String()} {
		first := mac[:2]
		var v byte
		fmt.Sscanf(first, "%02x", &v)
		if v&1 != 0 || v&2 == 0 {
			t.Errorf("MAC %s is not locally administered unicast", mac)
		}
	}
	blocks := []netip.Prefix{netip.MustParsePrefix("fd10::/122"), netip.MustParsePrefix("10.244.1.0/26"), netip.MustParsePrefix("10.244.9.0/26")}
	if got, ok := overlay.TunnelAddress(blocks, 4); !ok || got != netip.MustParseAddr("10.244.1.0") {
		t.Errorf("v4 tunnel address %s %v", got, ok)
	}
	if got, ok := overlay.TunnelAddress(blocks, 6); !ok || got != netip.MustParseAddr("fd10::") {
		t.Errorf("v6 tunnel address %s %v", got, ok)
	}
	if _, ok := overlay.TunnelAddress(blocks[:1], 4); ok {
		t.Error("tunnel address without a v4 block")
	}
}

// TestRouteBuilderReuse: one RouteBuilder fed every mode of
// TestRoutesPerMode in turn, then IPv6, then overlapping blocks, returns
// each time what a fresh Routes returns (no route or interface of an
// earlier call left over).
func TestRouteBuilderReuse(t *testing.T) {
	base := overlay.RouteInput{
		IPVersion: 4, Parent: "eth0", ParentSubnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/26")}, MTU: 1450, Peers: []overlay.Peer{peerC, peerB},
	}
	overlap := peerB
	overlap.Name = "z"
	overlap.Blocks = []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}
	var inputs []overlay.RouteInput
	for _, mode := range []overlay.Mode{overlay.ModeVXLAN, overlay.ModeIPIPCrossSubnet, overlay.ModeNone, overlay.ModeVXLANCrossSubnet, overlay.ModeIPIP} {
		in := base
		in.Mode = mode
		inputs = append(inputs, in)
	}
	v6 := base
	v6.Mode, v6.IPVersion, v6.Parent, v6.LocalBlocks, v6.Peers = overlay.ModeVXLAN, 6, "eth0", nil, []overlay.Peer{peerB}
	withOverlap := base
	withOverlap.Mode, withOverlap.Peers = overlay.ModeVXLAN, []overlay.Peer{overlap, peerC, peerB}
	inputs = append(inputs, v6, withOverlap, inputs[0])
	var rb overlay.RouteBuilder
	for i, in := range inputs {
		got, gotProblems := rb.Routes(in)
		want, wantProblems := overlay.Routes(in)
		if render(got) != render(want) || fmt.Sprint(gotProblems) != fmt.Sprint(wantProblems) {
			t.Errorf("input %d (%s IPv%d): builder gave\n%s%v\nRoutes gives\n%s%v", i, in.Mode, in.IPVersion,
				render(got), gotProblems, render(want), wantProblems)
		}
	}
}

// TestRouteBuilderBlockChanges: 20 VXLAN peers whose blocks move one or
// two at a time among a small pool of /24s and /26s, so that overlaps
// with each other and with our block come and go: after every step one
// reused RouteBuilder returns what a fresh Routes returns.
func TestRouteBuilderBlockChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	block := func() netip.Prefix {
		if rng.IntN(4) == 0 {
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(rng.IntN(30)), 0}), 24)
		}
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(rng.IntN(30)), byte(64 * rng.IntN(4))}), 26)
	}
	in := overlay.RouteInput{Mode: overlay.ModeVXLAN, IPVersion: 4, Parent: "eth0", ParentSubnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/26")}, MTU: 1450}
	for i := range 20 {
		in.Peers = append(in.Peers, overlay.Peer{Name: fmt.Sprintf("p%02d", i), HostIP: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 2)}),
			VTEPMAC: macB, TunnelIP: netip.AddrFrom4([4]byte{10, 245, byte(i), 0}), Blocks: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 250, byte(i), 0}), 26)}})
	}
	var rb overlay.RouteBuilder
	for step := range 400 {
		for range 1 + rng.IntN(2) {
			p := &in.Peers[rng.IntN(len(in.Peers))]
			p.Blocks = []netip.Prefix{block()}
		}
		got, gotProblems := rb.Routes(in)
		want, wantProblems := overlay.Routes(in)
		if render(got) != render(want) || fmt.Sprint(gotProblems) != fmt.Sprint(wantProblems) {
			t.Fatalf("step %d: builder gave\n%s%v\nRoutes gives\n%s%v", step, render(got), gotProblems, render(want), wantProblems)
		}
	}
}
