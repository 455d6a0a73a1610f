package allowsetup

import (
	"io"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
)

// load parses args as routeletd does, with no environment and no file.
func load(t *testing.T, args ...string) *config.Config {
	t.Helper()
	c, err := config.Load(append([]string{"--node-name=n1"}, args...), func(string) (string, bool) { return "", false },
		func(string) ([]byte, error) { return nil, io.EOF }, io.Discard)
	if err != nil {
		t.Fatalf("Load(%q): %v", args, err)
	}
	return c
}

// inputRules renders ROUTELET-INPUT of family for the rules cfg asks for.
func inputRules(t *testing.T, cfg *config.Config, family ipset.Family) string {
	t.Helper()
	r := Rules(cfg)
	if err := r.Validate(); err != nil {
		t.Fatalf("Rules(%+v) do not validate: %v", r, err)
	}
	for _, ch := range firewall.Render(r, family) {
		if ch.Name == firewall.InputChain {
			return strings.Join(ch.Rules, "\n")
		}
	}
	t.Fatalf("no %s rendered", firewall.InputChain)
	return ""
}

// TestRulesEncryption: the WireGuard port is guarded in both families only
// with encryption wireguard, at the configured port.
func TestRulesEncryption(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		want     string // in ROUTELET-INPUT of both families; "" none
		wantNone string // in neither
	}{
		{nil, "", "routelet-wireguard-peers"},
		{[]string{"--encryption=none"}, "", "routelet-wireguard-peers"},
		{[]string{"--encryption=wireguard"}, "--dport 51820 -m pkttype --pkt-type unicast -m set --match-set routelet-wireguard-peers", ""},
		{[]string{"--encryption=wireguard", "--wireguard-port=51000", "--encapsulation=none"}, "-p udp -m udp --dport 51000 -j DROP", "51820"},
	} {
		cfg := load(t, tc.args...)
		for _, f := range []ipset.Family{ipset.IPv4, ipset.IPv6} {
			in := inputRules(t, cfg, f)
			if tc.want != "" && !strings.Contains(in, tc.want) {
				t.Errorf("%q, %s: %s =\n%s\nwant it to hold %q", tc.args, f, firewall.InputChain, in, tc.want)
			}
			if tc.wantNone != "" && strings.Contains(in, tc.wantNone) {
				t.Errorf("%q, %s: %s =\n%s\nwant no %q", tc.args, f, firewall.InputChain, in, tc.wantNone)
			}
		}
	}
}
