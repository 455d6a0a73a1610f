package config

// wireGuardKeyCases are TestEveryKey's cases for the encryption keys.
var wireGuardKeyCases = []struct {
	key  string
	good string
	ok   check
	bad  string
}{
	{"encryption", "wireguard", func(c *Config) bool { return c.Encryption == EncryptionWireGuard }, "ipsec"},
	{"wireguard-port", "51821", func(c *Config) bool { return c.WireGuardPort == 51821 }, "65536"},
	{"wireguard-device", "wg.rl", func(c *Config) bool { return c.WireGuardDevice == "wg.rl" }, "vxlan.calico"},
	{"wireguard-device", "wg0", func(c *Config) bool { return c.WireGuardDevice == "wg0" }, "cali12345"},
	{"wireguard-implementation", "userspace", func(c *Config) bool { return c.WireGuardImplementation == WireGuardUserspace }, "ebpf"},
}
