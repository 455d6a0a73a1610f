package instance

import (
	"encoding/json"
	"io"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/routelet/routelet/daemon/config"
)

// load is config.Load of flags alone.
func load(t *testing.T, args ...string) *config.Config {
	t.Helper()
	cfg, err := config.Load(args, func(string) (string, bool) { return "", false }, os.ReadFile, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestIdentityRoundTrip: a daemon's settings, sent as JSON and loaded
// back, make a configuration with the same settings, for defaults and for
// every setting key changed; the keys outside the settings keep their
// defaults.
func TestIdentityRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		{"--node-name=node-a"},
		{"--node-name=node-z", "--state-dir=/srv/routelet", "--pod-cidr=10.244.7.0/24", "--pod-cidr=fd00:7::/64", "--node-ip=cidr:192.0.2.0/24",
			"--encapsulation=ipip", "--cross-subnet", "--vxlan-vni=77", "--vxlan-port=4790", "--vxlan-device=vx.rl", "--mtu=1400",
			"--nat-outgoing=false", "--nat-outgoing-pool=10.244.0.0/16", "--external-node-cidr=198.51.100.0/24",
			"--iptables-backend=legacy", "--route-protocol=81", "--interface-prefix=rlt", "--log-level=debug"},
		{"--node-name=node-e", "--datastore=etcd", "--etcd-endpoints=https://etcd-1:2379", "--etcd-endpoints=https://etcd-2:2379",
			"--etcd-ca-file=/etc/etcd/ca.pem", "--etcd-cert-file=/etc/etcd/c.pem", "--etcd-key-file=/etc/etcd/k.pem", "--etcd-prefix=/rl"},
		{"--node-name=node-w", "--encryption=wireguard", "--wireguard-port=51900", "--wireguard-device=wg-pods", "--wireguard-implementation=userspace"},
	} {
		cfg := load(t, args...)
		data, err := json.Marshal(Describe(cfg, "v1.2.3"))
		if err != nil {
			t.Fatal(err)
		}
		var id Identity
		if err := json.Unmarshal(data, &id); err != nil {
			t.Fatal(err)
		}
		if id.PID != os.Getpid() || id.Version != "v1.2.3" {
			t.Errorf("identity %+v, want this process and its version", id)
		}
		got, err := id.Config()
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		want, have := Settings(cfg), Settings(got)
		if !maps.EqualFunc(want, have, slices.Equal[[]string]) {
			t.Errorf("%q: settings loaded back %v, want %v", args, have, want)
		}
		if len(want) != len(SettingKeys) {
			t.Errorf("Settings renders %d keys, SettingKeys has %d", len(want), len(SettingKeys))
		}
		if got.LogLevel != load(t).LogLevel {
			t.Errorf("%q: log-level %q loaded back, want the default: it is not a setting", args, got.LogLevel)
		}
	}
	if SettingKeys["cross-subnet"] != true || SettingKeys["node-name"] != false {
		t.Error("SettingKeys: cross-subnet is boolean, node-name is not")
	}
	for k := range SettingKeys {
		if !slices.Contains(config.KeyNames(), k) {
			t.Errorf("setting %q is not a configuration key", k)
		}
	}
}
