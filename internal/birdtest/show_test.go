package birdtest

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Output as BIRD 2.0.12 prints it, with the timeformat Config writes.
const protocolsOut = `Name       Proto      Table      State  Since         Info
device1    Device     ---        up     1796217871    
kernel_ipv4 Kernel     master4    up     1796217871    
peer_10_9_0_1 BGP        ---        up     1796217875    Established   
bogus      BGP        ---        start  1796217871    Active        Socket: No route to host
`

func TestParseProtocols(t *testing.T) {
	ps, err := ParseProtocols(protocolsOut)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 4 {
		t.Fatalf("%d protocols, want 4: %+v", len(ps), ps)
	}
	if p := ps[2]; p.Name != "peer_10_9_0_1" || p.Proto != "BGP" || !p.Established() || !p.Since.Equal(time.Unix(1796217875, 0)) {
		t.Errorf("peer line parsed as %+v", p)
	}
	if p := ps[3]; p.Established() || p.BGPState() != "Active" || p.Info != "Active Socket: No route to host" {
		t.Errorf("bogus line parsed as %+v (state %q)", p, p.BGPState())
	}
	if p := ps[1]; p.Table != "master4" || p.State != "up" || p.Info != "" {
		t.Errorf("kernel line parsed as %+v", p)
	}
	if _, err := ParseProtocols("syntax error, unexpected CF_SYM_UNDEFINED\n"); err == nil {
		t.Error("an error reply parsed as protocols")
	}
}

func TestParseDetail(t *testing.T) {
	d, err := ParseDetail(`Name       Proto      Table      State  Since         Info
peer_10_9_0_1 BGP        ---        start  1796217882    Active        Socket: Connection closed
  BGP state:          Active
    Neighbor address: 10.9.0.1
    Neighbor graceful restart active
    Restart timer:    117.991/-
    Last error:       Socket: Connection closed
  Channel ipv4
    State:          UP
    Routes:         2 imported, 0 exported, 2 preferred
`)
	if err != nil {
		t.Fatal(err)
	}
	if d.BGPState != "Active" || d.LastError != "Socket: Connection closed" || !d.GracefulRestart ||
		len(d.Routes) != 1 || !strings.HasPrefix(d.Routes[0], "2 imported") || d.Name != "peer_10_9_0_1" {
		t.Errorf("parsed as %+v", d)
	}
}

func TestParseRoutes(t *testing.T) {
	rs, err := ParseRoutes(`Table master4:
10.9.0.0/24          unicast [direct1 1796217871] * (240)
	dev vb
10.100.0.0/24        unicast [peer_a 1796217875] * (100) [AS65001i]
	via 10.9.0.1 on vb
                     unicast [peer_b 1796217876 from 10.9.0.7] (100s) [AS65003 65001i]
	via 10.9.0.3 on vb
	Type: BGP univ
	BGP.origin: IGP
10.100.9.0/24        blackhole [static_ipv4 1796217871] * (200)

Table master6:
fd00:100::/64        unicast [peer_fd09__1 1796217875] * (100) [AS65001i]
	via fd09::1 on vb
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{
		{Table: "master4", Prefix: netip.MustParsePrefix("10.9.0.0/24"), Type: "unicast", Protocol: "direct1", Primary: true, Iface: "vb", Pref: 240},
		{Table: "master4", Prefix: netip.MustParsePrefix("10.100.0.0/24"), Type: "unicast", Protocol: "peer_a", Primary: true,
			NextHop: netip.MustParseAddr("10.9.0.1"), Iface: "vb", Pref: 100, ASPath: "AS65001i"},
		{Table: "master4", Prefix: netip.MustParsePrefix("10.100.0.0/24"), Type: "unicast", Protocol: "peer_b", From: netip.MustParseAddr("10.9.0.7"),
			NextHop: netip.MustParseAddr("10.9.0.3"), Iface: "vb", Pref: 100, Stale: true, ASPath: "AS65003 65001i"},
		{Table: "master4", Prefix: netip.MustParsePrefix("10.100.9.0/24"), Type: "blackhole", Protocol: "static_ipv4", Primary: true, Pref: 200},
		{Table: "master6", Prefix: netip.MustParsePrefix("fd00:100::/64"), Type: "unicast", Protocol: "peer_fd09__1", Primary: true,
			NextHop: netip.MustParseAddr("fd09::1"), Iface: "vb", Pref: 100, ASPath: "AS65001i"},
	}
	if len(rs) != len(want) {
		t.Fatalf("%d routes, want %d: %v", len(rs), len(want), rs)
	}
	for i := range want {
		w := want[i]
		w.Since = rs[i].Since
		if rs[i] != w {
			t.Errorf("route %d: %+v, want %+v", i, rs[i], w)
		}
	}
	if _, err := ParseRoutes("\tvia 10.0.0.1 on x\n"); err == nil {
		t.Error("a next hop before any route parsed")
	}
}

func TestRender(t *testing.T) {
	cfg := Config{RouterID: netip.MustParseAddr("10.0.1.1"), Direct: true,
		Static: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/24"), netip.MustParsePrefix("fd00:100::/64")},
		Neighbors: []Neighbor{
			{Address: netip.MustParseAddr("10.0.1.10"), ASN: 64512, LocalASN: 65000, Password: "s3cret", GracefulRestart: true,
				RestartTime: 30 * time.Second, Accept: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:1::/120")}},
			{Name: "rr_b", Address: netip.MustParseAddr("fd00:1::11"), ASN: 64512, LocalASN: 64512, RouteReflectorClient: true, Port: 1790},
		}}
	text, err := cfg.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"router id 10.0.1.1;", "protocol direct", "protocol kernel kernel_ipv6", "route fd00:100::/64 blackhole;",
		"protocol bgp peer_10_0_1_10 {", "neighbor 10.0.1.10 as 64512;", `password "s3cret";`, "graceful restart time 30;",
		"import where net ~ [ 10.244.1.0/24 ];", "export where source = RTS_STATIC;",
		"protocol bgp rr_b {", "neighbor fd00:1::11 port 1790 as 64512;", "rr client;", "ipv6 {", "export where source ~ [ RTS_STATIC, RTS_BGP ];",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("config lacks %q:\n%s", want, text)
		}
	}
	for _, bad := range []Config{
		{},
		{RouterID: netip.MustParseAddr("fd00::1")},
		{RouterID: cfg.RouterID, Neighbors: []Neighbor{{Address: netip.MustParseAddr("10.0.0.1"), ASN: 1}}},
		{RouterID: cfg.RouterID, Neighbors: []Neighbor{{Address: netip.MustParseAddr("10.0.0.1"), ASN: 1, LocalASN: 2, Password: `a"b`}}},
		{RouterID: cfg.RouterID, Neighbors: []Neighbor{{Name: "a-b", Address: netip.MustParseAddr("10.0.0.1"), ASN: 1, LocalASN: 2}}},
		{RouterID: cfg.RouterID, Neighbors: []Neighbor{{Address: netip.MustParseAddr("10.0.0.1"), ASN: 1, LocalASN: 2},
			{Address: netip.MustParseAddr("10.0.0.1"), ASN: 1, LocalASN: 2}}},
		{RouterID: cfg.RouterID, Static: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}},
	} {
		if _, err := bad.Render(); err == nil {
			t.Errorf("Render(%+v) succeeded", bad)
		}
	}
	if err := Installed(); err == nil {
		// BIRD itself accepts it (parse only: -p starts nothing).
		if _, err := parseCheck(t.Context(), text, t.TempDir()); err != nil {
			t.Error(err)
		}
	}
}

func TestSubnets(t *testing.T) {
	got, err := Subnets(netip.MustParsePrefix("10.128.0.0/9"), 24, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 || got[0].String() != "10.128.0.0/24" || got[255].String() != "10.128.255.0/24" ||
		got[256].String() != "10.129.0.0/24" || got[999].String() != "10.131.231.0/24" {
		t.Errorf("Subnets(10.128.0.0/9, 24, 1000) = %v … %v", got[:2], got[len(got)-2:])
	}
	got, err = Subnets(netip.MustParsePrefix("fd00:200::/48"), 64, 3)
	if err != nil || len(got) != 3 || got[2].String() != "fd00:200:0:2::/64" {
		t.Errorf("Subnets(fd00:200::/48, 64, 3) = %v, %v", got, err)
	}
	for _, bad := range []struct {
		pool    string
		bits, n int
	}{{"10.0.0.0/24", 23, 1}, {"10.0.0.0/24", 33, 1}, {"10.0.0.0/24", 26, 5}, {"10.0.0.0/24", 25, -1}} {
		if got, err := Subnets(netip.MustParsePrefix(bad.pool), bad.bits, bad.n); err == nil {
			t.Errorf("Subnets(%s, %d, %d) = %v, want an error", bad.pool, bad.bits, bad.n, got)
		}
	}
}

// TestStartRefusedConfig: a configuration BIRD refuses is reported in
// BIRD's words, with the file numbered, before anything starts.
func TestStartRefusedConfig(t *testing.T) {
	SkipUnlessInstalled(t)
	_, err := Start(t.Context(), nil, t.TempDir(), Config{RouterID: netip.MustParseAddr("10.0.0.1"), Extra: "protocol nonsense {}"})
	if err == nil || !strings.Contains(err.Error(), "bird refuses") || !strings.Contains(err.Error(), "protocol nonsense") {
		t.Errorf("Start with a bad Extra: %v; want BIRD's refusal and the numbered file", err)
	}
}
