package config

import (
	"errors"
	"strings"
	"testing"
)

// wireguardKeyCases are TestEveryKey's cases for the encryption keys.
var wireguardKeyCases = []struct {
	key  string
	good string
	ok   check
	bad  string
}{
	{"encryption", "wireguard", func(c *Config) bool { return c.Encryption == EncryptionWireGuard && c.Encrypted() }, "ipsec"},
	{"encryption", "none", func(c *Config) bool { return c.Encryption == EncryptionNone && !c.Encrypted() }, ""},
	{"wireguard-port", "51821", func(c *Config) bool { return c.WireGuard.Port == 51821 }, "65536"},
	{"wireguard-port", "1", func(c *Config) bool { return c.WireGuard.Port == 1 }, "0"},
	{"wireguard-device", "wg0", func(c *Config) bool { return c.WireGuard.Device == "wg0" }, "wireguard.calico"},
	{"wireguard-implementation", "userspace", func(c *Config) bool { return c.WireGuard.Implementation == WireGuardUserspace }, "ebpf"},
	{"wireguard-implementation", "Kernel", func(c *Config) bool { return c.WireGuard.Implementation == WireGuardKernel }, ""},
}

// TestWireGuardDeviceNotRouteletsOther: with encryption on, a WireGuard
// device named as an overlay device (the configured VXLAN one included) or
// starting with the pod veth prefix is refused, naming the key, the layer
// and the value; with encryption off the name is not checked against them.
func TestWireGuardDeviceNotRouteletsOther(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		env    map[string]string
		where  string
		reason string
	}{
		{[]string{"--wireguard-device=vxlan.calico"}, nil, "flag --wireguard-device", "overlay device"},
		{[]string{"--wireguard-device=tunl0"}, nil, "flag --wireguard-device", "overlay device"},
		{[]string{"--wireguard-device=vxlan-v6.calico"}, nil, "flag --wireguard-device", "overlay device"},
		{[]string{"--vxlan-device=vx0"}, map[string]string{"ROUTELET_WIREGUARD_DEVICE": "vx0"}, "env ROUTELET_WIREGUARD_DEVICE", "overlay device"},
		{[]string{"--wireguard-device=caliwg"}, nil, "flag --wireguard-device", "pod veth prefix"},
		{[]string{"--interface-prefix=wire"}, nil, "default", "pod veth prefix"},
	} {
		args := append([]string{"--node-name=n1", "--encryption=wireguard"}, tc.args...)
		_, err := load(t, args, tc.env, nil)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != "wireguard-device" || !strings.Contains(err.Error(), tc.where) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%v %v: err = %v, want a wireguard-device error from %s naming %q", tc.args, tc.env, err, tc.where, tc.reason)
		}
		if _, err := load(t, append([]string{"--node-name=n1"}, tc.args...), tc.env, nil); err != nil {
			t.Errorf("%v %v without encryption: %v, want no error", tc.args, tc.env, err)
		}
	}
}
