package firewall

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routelet/routelet/pkg/ipset"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current rendering")

// dump renders chains as an operator reads them: per chain the table, the
// jump (and when it is kept) and the `iptables -S` lines.
func dump(chains []Chain) string {
	var b strings.Builder
	for _, ch := range chains {
		when := ""
		if ch.OnlyWhileHookCanDrop {
			when = ", only while " + ch.Hook + " can drop"
		}
		b.WriteString("# -t " + ch.Table + " (jumped to from " + ch.Hook + ": " + ch.JumpLine() + when + ")\n")
		for _, l := range ch.Lines() {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		family ipset.Family
	}{
		{"none-v4", Config{}, ipset.IPv4},
		{"vxlan-v4", Config{VXLAN: true}, ipset.IPv4},
		{"vxlan-nat-v6", Config{VXLAN: true, NATOutgoing: true}, ipset.IPv6},
		{"ipip-nat-v4", Config{IPIP: true, NATOutgoing: true}, ipset.IPv4},
		{"ipip-v6", Config{IPIP: true, NATOutgoing: true}, ipset.IPv6},
		{"both-nat-v4", Config{VXLAN: true, IPIP: true, NATOutgoing: true}, ipset.IPv4},
		{"custom-v4", Config{VXLAN: true, VXLANPort: 8472, VXLANDevice: "flannel.1", InterfacePrefix: "veth", NATOutgoing: true}, ipset.IPv4},
		{"wireguard-v4", Config{WireGuard: true}, ipset.IPv4},
		{"wireguard-ipip-nat-v6", Config{WireGuard: true, IPIP: true, NATOutgoing: true}, ipset.IPv6},
		{"wireguard-vxlan-ipip-v4", Config{WireGuard: true, WireGuardPort: 51000, VXLAN: true, IPIP: true}, ipset.IPv4},
		{"wireguard-custom-v6", Config{WireGuard: true, WireGuardDevice: "wg0", InterfacePrefix: "veth"}, ipset.IPv6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dump(Render(tc.cfg, tc.family))
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestRenderGolden -update to create it)", err)
			}
			if got != string(want) {
				t.Fatalf("Render(%+v, %s) =\n%s\nwant (%s):\n%s", tc.cfg, tc.family, got, path, want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		inErr string
	}{
		{Config{VXLANPort: 70000}, "VXLAN port 70000"},
		{Config{VXLANPort: -1}, "VXLAN port -1"},
		{Config{VXLANDevice: "a-very-long-device-name"}, `"a-very-long-device-name"`},
		{Config{InterfacePrefix: "cali+"}, `interface prefix "cali+"`},
		{Config{IPIPDevice: "tun 0"}, `"tun 0"`},
		{Config{WireGuardPort: 65536}, "WireGuard port 65536"},
		{Config{WireGuardPort: -5}, "WireGuard port -5"},
		{Config{WireGuardDevice: "wireguard.cali.0"}, `WireGuard device "wireguard.cali.0"`},
		{Config{WireGuard: true, WireGuardDevice: "wg+"}, `WireGuard device "wg+"`},
		{Config{WireGuard: true, VXLAN: true, WireGuardPort: 4789}, "WireGuard port 4789 is the VXLAN port"},
		{Config{WireGuard: true, VXLAN: true, VXLANPort: 51820}, "WireGuard port 51820 is the VXLAN port"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.inErr) {
			t.Errorf("Validate(%+v) = %v, want it to mention %s", tc.cfg, err, tc.inErr)
		}
	}
	if err := (Config{VXLAN: true, IPIP: true, WireGuard: true, NATOutgoing: true}).Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	// Without VXLAN rules its port is no WireGuard port's rival.
	if err := (Config{WireGuard: true, WireGuardPort: 4789}).Validate(); err != nil {
		t.Fatalf("WireGuard on the VXLAN port without VXLAN rejected: %v", err)
	}
}

func TestSetsUsed(t *testing.T) {
	got := strings.Join(Sets(Config{VXLAN: true, IPIP: true, NATOutgoing: true}, ipset.IPv6), ",")
	if got != "routelet-vxlan-peers,routelet-pools,routelet-nat-pools" {
		t.Fatalf("Sets(v6) = %s, want vxlan peers, pools and NAT pools (no IPIP in IPv6)", got)
	}
	for _, f := range []ipset.Family{ipset.IPv4, ipset.IPv6} {
		if got := strings.Join(Sets(Config{WireGuard: true}, f), ","); got != "routelet-wireguard-peers,routelet-pools" {
			t.Errorf("Sets(WireGuard, %s) = %s, want the WireGuard peers and the pools (the encryption guard)", f, got)
		}
	}
	if got := strings.Join(PeerSets(), ","); got != "routelet-vxlan-peers,routelet-ipip-peers,routelet-wireguard-peers" {
		t.Errorf("PeerSets() = %s, want VXLAN, IPIP and WireGuard peers", got)
	}
}
