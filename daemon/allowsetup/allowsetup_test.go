package allowsetup

import (
	"io"
	"slices"
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

// TestRulesEncryptionGuard: with encryption wireguard both families get
// ROUTELET-ENCRYPT, passing the configured WireGuard device and the pod
// veth prefix and dropping the rest to the pools, and ROUTELET-FORWARD
// jumps to it first and is kept whatever FORWARD holds; without
// encryption there is no guard and ROUTELET-FORWARD is kept only while
// FORWARD can drop.
func TestRulesEncryptionGuard(t *testing.T) {
	chain := func(chains []firewall.Chain, name string) (firewall.Chain, bool) {
		for _, ch := range chains {
			if ch.Name == name {
				return ch, true
			}
		}
		return firewall.Chain{}, false
	}
	on := load(t, "--encryption=wireguard", "--wireguard-device=wg7", "--interface-prefix=lxc")
	for _, f := range []ipset.Family{ipset.IPv4, ipset.IPv6} {
		chains := firewall.Render(Rules(on), f)
		enc, ok := chain(chains, firewall.EncryptChain)
		if !ok {
			t.Fatalf("encryption wireguard, %s: no %s rendered", f, firewall.EncryptChain)
		}
		want := []string{"-o lxc+ -j RETURN", "-o wg7 -j RETURN", "-o lo -j RETURN",
			"-m set --match-set " + ipset.Name(ipset.Pools, f) + " dst -j DROP"}
		if enc.Hook != "OUTPUT" || strings.Join(enc.Rules, "\n") != strings.Join(want, "\n") {
			t.Errorf("encryption wireguard, %s: %s from %s =\n%s\nwant from OUTPUT\n%s", f, enc.Name, enc.Hook,
				strings.Join(enc.Rules, "\n"), strings.Join(want, "\n"))
		}
		fwd, _ := chain(chains, firewall.ForwardChain)
		if len(fwd.Rules) == 0 || fwd.Rules[0] != "-j "+firewall.EncryptChain || fwd.OnlyWhileHookCanDrop {
			t.Errorf("encryption wireguard, %s: %s = %q (only while FORWARD can drop: %v), want the guard's jump first, always kept",
				f, firewall.ForwardChain, fwd.Rules, fwd.OnlyWhileHookCanDrop)
		}
		if got := strings.Join(firewall.Sets(Rules(on), f), ","); !strings.Contains(got, ipset.Pools) {
			t.Errorf("encryption wireguard, %s: sets %s, want the pools the guard matches", f, got)
		}
	}
	off := load(t, "--encryption=none")
	for _, f := range []ipset.Family{ipset.IPv4, ipset.IPv6} {
		chains := firewall.Render(Rules(off), f)
		if _, ok := chain(chains, firewall.EncryptChain); ok {
			t.Errorf("encryption none, %s: %s rendered", f, firewall.EncryptChain)
		}
		if fwd, _ := chain(chains, firewall.ForwardChain); !fwd.OnlyWhileHookCanDrop || slices.Contains(fwd.Rules, "-j "+firewall.EncryptChain) {
			t.Errorf("encryption none, %s: %s = %q (only while FORWARD can drop: %v), want no guard's jump, kept only while FORWARD can drop",
				f, firewall.ForwardChain, fwd.Rules, fwd.OnlyWhileHookCanDrop)
		}
	}
}
