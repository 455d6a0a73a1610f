package config

import (
	"errors"
	"flag"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netiptest"
)

// load runs Load with a fake environment and file system.
func load(t *testing.T, args []string, env map[string]string, files map[string]string) (*Config, error) {
	t.Helper()
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	read := func(p string) ([]byte, error) {
		s, ok := files[p]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		}
		return []byte(s), nil
	}
	return Load(args, getenv, read, io.Discard)
}

func mustLoad(t *testing.T, args []string, env map[string]string, files map[string]string) *Config {
	t.Helper()
	c, err := load(t, args, env, files)
	if err != nil {
		t.Fatalf("Load(%q): %v", args, err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	c := mustLoad(t, []string{"--node-name=n1"}, nil, nil)
	want := Config{
		NodeName: "n1", StateDir: "/run/routelet", Datastore: "file", Encapsulation: "vxlan",
		VXLANVNI: 4096, VXLANPort: 4789, VXLANDevice: "vxlan.calico", RouteProtocol: 80,
		IfacePrefix: "cali", ResyncPeriod: 90 * time.Second, DeviceCheckPeriod: 10 * time.Second,
		GracePeriod: 10 * time.Second, LeakGracePeriod: 15 * time.Minute,
		HealthAddr: "127.0.0.1:9099", LogLevel: "info", LogFormat: "text",
		CNIConfName: DefaultCNIConfName,
		NATOutgoing: true, IptablesBackend: "auto", AllowlistCheckPeriod: time.Second, Etcd: Etcd{Prefix: "/routelet"}, GoRuntime: GoRuntime{GCPercent: 40},
		Encryption: "none", WireGuard: WireGuard{Port: 51820, Device: "wireguard.cali", Implementation: "auto"},
		BGP: BGP{ASN: 64512, NodeMesh: true, ListenPort: 179, GracefulRestart: true, RestartTime: 120 * time.Second, RouteProtocol: 186, MaxPrefixes: 10000},
	}
	got := *c
	got.sources = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
}

func TestDurationDefault(t *testing.T) {
	for d, want := range map[time.Duration]string{
		90 * time.Second: "90s", 15 * time.Minute: "15m", time.Second: "1s",
		1500 * time.Millisecond: "1.5s", 0: "0s",
	} {
		if got := durationDefault(d); got != want {
			t.Errorf("durationDefault(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestPodCIDRNeverABlock: pod CIDRs that can never be pod blocks are refused
// while loading, naming the key, the layer and the value.
func TestPodCIDRNeverABlock(t *testing.T) {
	for _, tc := range []struct{ cidr, want string }{
		{"0.0.0.0/0", "every address"},
		{"::/0", "every address"},
		{"127.0.0.0/16", "loopback"},
		{"169.254.1.0/24", "169.254.1.1"},
		{"224.0.0.0/24", "multicast"},
		{"fe80::/64", "link-local"},
		{"10.0.0.0/31", "too small"},
		{"fd00::/128", "too small"},
	} {
		_, err := load(t, []string{"--node-name=n"}, map[string]string{"ROUTELET_POD_CIDR": tc.cidr}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "env ROUTELET_POD_CIDR") || !strings.Contains(err.Error(), tc.cidr) {
			t.Errorf("pod-cidr %s: %v, want an error naming the env variable, the value and %q", tc.cidr, err, tc.want)
		}
	}
}

// TestKeyErrorNamesSource: errors made after Load name the layer the key's
// value came from.
func TestKeyErrorNamesSource(t *testing.T) {
	file := map[string]string{"/c.yaml": "interface-prefix: veth\n"}
	c := mustLoad(t, []string{"--config=/c.yaml", "--node-name=n", "--pod-cidr=10.1.0.0/24"}, nil, file)
	for key, want := range map[string]string{
		"pod-cidr":         `config key "pod-cidr" (flag --pod-cidr): invalid value "10.1.0.0/24": boom`,
		"interface-prefix": `config key "interface-prefix" (file): invalid value "10.1.0.0/24": boom`,
		"mtu":              `config key "mtu" (default): invalid value "10.1.0.0/24": boom`,
	} {
		if got := c.KeyError(key, "10.1.0.0/24", errors.New("boom")).Error(); got != want {
			t.Errorf("KeyError(%s) = %s, want %s", key, got, want)
		}
	}
}

func TestDefaultNodeNameIsHostname(t *testing.T) {
	h, err := os.Hostname()
	if err != nil {
		t.Skipf("no hostname: %v", err)
	}
	c, err := load(t, nil, nil, nil)
	if err != nil {
		if validateNodeName(strings.ToLower(h)) != nil {
			t.Skipf("hostname %q is not a valid node name", h)
		}
		t.Fatal(err)
	}
	if c.NodeName != strings.ToLower(h) {
		t.Errorf("NodeName = %q, want hostname %q", c.NodeName, h)
	}
}

// TestEveryKey sets each key through each layer and checks both a good and a
// bad value; the error must name the key and the bad value.
func TestEveryKey(t *testing.T) {
	cases := []struct {
		key  string
		good string
		ok   check
		bad  string
	}{
		{"node-name", "worker-1.example", func(c *Config) bool { return c.NodeName == "worker-1.example" }, "Bad_Name"},
		{"state-dir", "/var/run/rl", func(c *Config) bool { return c.StateDir == "/var/run/rl" }, "relative/dir"},
		{"datastore", "kubernetes", func(c *Config) bool { return c.Datastore == "kubernetes" }, "consul"},
		{"pod-cidr", "10.244.1.0/24", func(c *Config) bool {
			return reflect.DeepEqual(c.PodCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")})
		}, "10.244.1.1/24"},
		{"node-ip", "192.168.1.10", func(c *Config) bool { return c.NodeIP == "192.168.1.10" }, "192.168.1.300"},
		{"node-ip", "cidr:192.168.0.0/16", func(c *Config) bool { return c.NodeIP == "cidr:192.168.0.0/16" }, "cidr:192.168.0.0"},
		{"node-ip", "interface:^eth[0-9]+$", func(c *Config) bool { return c.NodeIP == "interface:^eth[0-9]+$" }, "interface:eth(["},
		{"encapsulation", "ipip", func(c *Config) bool { return c.Encapsulation == "ipip" }, "gre"},
		{"cross-subnet", "true", func(c *Config) bool { return c.CrossSubnet }, "maybe"},
		{"vxlan-vni", "42", func(c *Config) bool { return c.VXLANVNI == 42 }, "16777216"},
		{"vxlan-port", "8472", func(c *Config) bool { return c.VXLANPort == 8472 }, "0"},
		{"encryption", "wireguard", func(c *Config) bool { return c.Encryption == "wireguard" }, "ipsec"},
		{"wireguard-port", "51821", func(c *Config) bool { return c.WireGuard.Port == 51821 }, "65536"},
		{"vxlan-device", "vxlan.rl", func(c *Config) bool { return c.VXLANDevice == "vxlan.rl" }, "this-name-is-too-long"},
		{"mtu", "1400", func(c *Config) bool { return c.MTU == 1400 }, "100"},
		{"nat-outgoing", "0", func(c *Config) bool { return !c.NATOutgoing }, "yes please"},
		{"nat-outgoing-pool", "10.244.0.0/17", func(c *Config) bool {
			return len(c.NATOutgoingPools) == 1 && c.NATOutgoingPools[0] == netip.MustParsePrefix("10.244.0.0/17")
		}, "10.244.0.1/17"},
		{"external-node-cidr", "192.0.2.0/28", func(c *Config) bool {
			return reflect.DeepEqual(c.ExternalNodeCIDRs, []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28")})
		}, "192.0.2.1/24"},
		{"iptables-backend", "legacy", func(c *Config) bool { return c.IptablesBackend == IptablesLegacy }, "ebtables"},
		{"allowlist-check-period", "500ms", func(c *Config) bool { return c.AllowlistCheckPeriod == 500*time.Millisecond }, "10ms"},
		{"route-protocol", "99", func(c *Config) bool { return c.RouteProtocol == 99 }, "4"},
		{"interface-prefix", "rl", func(c *Config) bool { return c.IfacePrefix == "rl" }, "a/b"},
		{"resync-period", "30s", func(c *Config) bool { return c.ResyncPeriod == 30*time.Second }, "soon"},
		{"device-check-period", "2s", func(c *Config) bool { return c.DeviceCheckPeriod == 2*time.Second }, "0s"},
		{"grace-period", "0s", func(c *Config) bool { return c.GracePeriod == 0 }, "-1s"},
		{"leak-grace-period", "1s", func(c *Config) bool { return c.LeakGracePeriod == time.Second }, "15"},
		{"health-addr", "0.0.0.0:9100", func(c *Config) bool { return c.HealthAddr == "0.0.0.0:9100" }, "localhost"},
		{"health-addr", "", func(c *Config) bool { return c.HealthAddr == "" }, "localhost:http"},
		{"log-level", "DEBUG", func(c *Config) bool { return c.LogLevel == "debug" }, "verbose"},
		{"log-format", "json", func(c *Config) bool { return c.LogFormat == "json" }, "xml"},
		{"kubeconfig", "/etc/kubernetes/routelet.conf", func(c *Config) bool { return c.Kubeconfig == "/etc/kubernetes/routelet.conf" }, "kube.conf"},
		{"cni-conf-dir", "/etc/cni/net.d", func(c *Config) bool { return c.CNIConfDir == "/etc/cni/net.d" }, "etc/cni"},
		{"cni-conf-template", "/etc/routelet/t.conflist", func(c *Config) bool { return c.CNIConfTemplate == "/etc/routelet/t.conflist" }, "t.conflist"},
		{"cni-conf-name", "05-routelet.conflist", func(c *Config) bool { return c.CNIConfName == "05-routelet.conflist" }, "../x.conflist"},
	}
	cases = append(cases, etcdKeyCases...)
	cases = append(cases, goRuntimeKeyCases...)
	cases = append(cases, wireguardKeyCases...)
	cases = append(cases, bgpKeyCases...)
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.key] = true
		base := []string{}
		if tc.key != "node-name" {
			base = append(base, "--node-name=n1")
		}
		layers := map[string]func(v string) (*Config, error){
			"flag": func(v string) (*Config, error) { return load(t, append(base, "--"+tc.key+"="+v), nil, nil) },
			"env": func(v string) (*Config, error) {
				return load(t, base, map[string]string{EnvName(tc.key): v}, nil)
			},
			"file": func(v string) (*Config, error) {
				return load(t, append(base, "--config=/c.yaml"), nil, map[string]string{"/c.yaml": tc.key + ": \"" + v + "\"\n"})
			},
		}
		for lname, run := range layers {
			t.Run(tc.key+"/"+lname+"/"+tc.good, func(t *testing.T) {
				c, err := run(tc.good)
				if err != nil {
					t.Fatalf("good value %q: %v", tc.good, err)
				}
				if !tc.ok(c) {
					t.Errorf("value %q not applied: %+v", tc.good, c)
				}
				_, err = run(tc.bad)
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("bad value %q: got error %v, want *Error", tc.bad, err)
				}
				if ce.Key != tc.key || string(ce.Source) != lname {
					t.Errorf("error names key %q source %q, want %q %q", ce.Key, ce.Source, tc.key, lname)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.key) || !strings.Contains(msg, tc.bad) {
					t.Errorf("error %q does not name key %q and value %q", msg, tc.key, tc.bad)
				}
			})
		}
	}
	for _, k := range KeyNames() {
		if !covered[k] {
			t.Errorf("key %q has no test case", k)
		}
	}
}

// TestNodeNameFromDownwardAPI: NODE_NAME names the node when neither
// --node-name nor ROUTELET_NODE_NAME does, and is checked like them.
func TestNodeNameFromDownwardAPI(t *testing.T) {
	if c := mustLoad(t, nil, map[string]string{NodeNameEnv: "worker-7"}, nil); c.NodeName != "worker-7" {
		t.Errorf("NodeName = %q, want worker-7 from %s", c.NodeName, NodeNameEnv)
	}
	c := mustLoad(t, nil, map[string]string{NodeNameEnv: "worker-7", EnvName("node-name"): "worker-8"}, nil)
	if c.NodeName != "worker-8" {
		t.Errorf("NodeName = %q, want worker-8 from %s over %s", c.NodeName, EnvName("node-name"), NodeNameEnv)
	}
	if c := mustLoad(t, []string{"--node-name=worker-9"}, map[string]string{NodeNameEnv: "worker-7"}, nil); c.NodeName != "worker-9" {
		t.Errorf("NodeName = %q, want worker-9 from the flag", c.NodeName)
	}
	_, err := load(t, nil, map[string]string{NodeNameEnv: "Bad_Name"}, nil)
	if err == nil || !strings.Contains(err.Error(), "Bad_Name") || !strings.Contains(err.Error(), "env NODE_NAME") {
		t.Errorf("NODE_NAME=Bad_Name: error %v, want one naming the value and NODE_NAME", err)
	}
	file := map[string]string{"/c.yaml": "node-name: from-file\n"}
	if c := mustLoad(t, []string{"--config=/c.yaml"}, map[string]string{NodeNameEnv: "worker-7"}, file); c.NodeName != "worker-7" {
		t.Errorf("NodeName = %q, want worker-7 from %s over the config file", c.NodeName, NodeNameEnv)
	}
}

func TestPrecedence(t *testing.T) {
	file := map[string]string{"/c.yaml": "mtu: 1300\nlog-level: warn\nencapsulation: none\nnode-name: from-file\n"}
	env := map[string]string{"ROUTELET_MTU": "1350", "ROUTELET_LOG_LEVEL": "error", "ROUTELET_CONFIG": "/c.yaml"}
	c := mustLoad(t, []string{"--mtu=1400"}, env, file)
	if c.MTU != 1400 {
		t.Errorf("flag > env > file: MTU = %d, want 1400", c.MTU)
	}
	if c.LogLevel != "error" {
		t.Errorf("env > file: LogLevel = %q, want error", c.LogLevel)
	}
	if c.Encapsulation != "none" || c.NodeName != "from-file" {
		t.Errorf("file > default: got encapsulation %q node %q", c.Encapsulation, c.NodeName)
	}
	if c.ResyncPeriod != 90*time.Second {
		t.Errorf("default kept: ResyncPeriod = %s", c.ResyncPeriod)
	}
	if c.ConfigFile != "/c.yaml" {
		t.Errorf("ConfigFile = %q", c.ConfigFile)
	}
	// --config overrides ROUTELET_CONFIG.
	file["/d.yaml"] = "mtu: 1450\n"
	c = mustLoad(t, []string{"--config", "/d.yaml", "--node-name=x"}, map[string]string{"ROUTELET_CONFIG": "/c.yaml"}, file)
	if c.MTU != 1450 {
		t.Errorf("--config over ROUTELET_CONFIG: MTU = %d, want 1450", c.MTU)
	}
	// A bad value in a lower layer is hidden by a good one above it.
	c = mustLoad(t, []string{"--mtu=1400", "--node-name=x"}, map[string]string{"ROUTELET_MTU": "bogus"}, nil)
	if c.MTU != 1400 {
		t.Errorf("MTU = %d, want 1400", c.MTU)
	}
}

func TestPodCIDRLists(t *testing.T) {
	p := netiptest.Prefixes
	file := map[string]string{"/c.yaml": "node-name: n\npod-cidr:\n  - 10.1.0.0/24\n  - fd00:1::/120\n"}
	c := mustLoad(t, []string{"--config=/c.yaml"}, nil, file)
	if !reflect.DeepEqual(c.PodCIDRs, p("10.1.0.0/24", "fd00:1::/120")) {
		t.Errorf("file list: %v", c.PodCIDRs)
	}
	c = mustLoad(t, []string{"--config=/c.yaml"}, map[string]string{"ROUTELET_POD_CIDR": "10.2.0.0/24, 10.3.0.0/24"}, file)
	if !reflect.DeepEqual(c.PodCIDRs, p("10.2.0.0/24", "10.3.0.0/24")) {
		t.Errorf("env replaces file list: %v", c.PodCIDRs)
	}
	c = mustLoad(t, []string{"--config=/c.yaml", "--pod-cidr=10.4.0.0/24", "--pod-cidr", "10.5.0.0/24"}, map[string]string{"ROUTELET_POD_CIDR": "10.2.0.0/24"}, file)
	if !reflect.DeepEqual(c.PodCIDRs, p("10.4.0.0/24", "10.5.0.0/24")) {
		t.Errorf("repeated flag replaces env list: %v", c.PodCIDRs)
	}
	if _, err := load(t, []string{"--node-name=n", "--pod-cidr=10.0.0.0/16", "--pod-cidr=10.0.1.0/24"}, nil, nil); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlapping blocks: err = %v", err)
	}
}

func TestFileErrors(t *testing.T) {
	for name, body := range map[string]string{
		"unknown key":    "mtu: 1400\nmtux: 1\n",
		"not a mapping":  "- a\n- b\n",
		"broken yaml":    "mtu: [1400\n",
		"nested value":   "mtu:\n  a: 1\n",
		"config in file": "config: /other.yaml\n",
		"bad value":      "route-protocol: 300\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, []string{"--config=/c.yaml", "--node-name=n"}, nil, map[string]string{"/c.yaml": body})
			if err == nil {
				t.Fatalf("file %q accepted", body)
			}
			if !strings.Contains(err.Error(), "/c.yaml") && !strings.Contains(err.Error(), "file") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	if _, err := load(t, []string{"--config=/missing.yaml"}, nil, nil); err == nil || !strings.Contains(err.Error(), "/missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	// An empty file is fine.
	mustLoad(t, []string{"--config=/e.yaml", "--node-name=n"}, nil, map[string]string{"/e.yaml": "# nothing\n"})
}

func TestFlagsMisc(t *testing.T) {
	c := mustLoad(t, []string{"--node-name=n", "--cross-subnet", "--nat-outgoing"}, nil, nil)
	if !c.CrossSubnet || !c.NATOutgoing {
		t.Errorf("bare bool flags not set: %+v", c)
	}
	if _, err := load(t, []string{"--nope"}, nil, nil); err == nil {
		t.Error("unknown flag accepted")
	}
	if _, err := load(t, []string{"--node-name=n", "extra"}, nil, nil); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Errorf("stray argument: %v", err)
	}
	if _, err := load(t, []string{"-h"}, nil, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestExampleConfig keeps conf/routeletd.yaml loadable.
func TestExampleConfig(t *testing.T) {
	const path = "../../conf/routeletd.yaml"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no example config: %v", err)
	}
	c, err := Load([]string{"--config=" + path}, func(string) (string, bool) { return "", false }, os.ReadFile, io.Discard)
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if c.NodeName == "" || len(c.PodCIDRs) == 0 {
		t.Errorf("example config lacks node-name or pod-cidr: %+v", c)
	}
}

func TestNodeIPMode(t *testing.T) {
	for in, want := range map[string][2]string{
		"":                 {"auto", ""},
		"autodetect":       {"auto", ""},
		"10.0.0.1":         {"ip", "10.0.0.1"},
		"cidr:10.0.0.0/8":  {"cidr", "10.0.0.0/8"},
		"interface:eth.*":  {"interface", "eth.*"},
		"interface:^ens3$": {"interface", "^ens3$"},
	} {
		m, a := NodeIPMode(in)
		if m != want[0] || a != want[1] {
			t.Errorf("NodeIPMode(%q) = %q, %q; want %q, %q", in, m, a, want[0], want[1])
		}
	}
}

// TestAllowlistKeys: defaults of the allowlist keys and the forms an
// external node CIDR may take.
func TestAllowlistKeys(t *testing.T) {
	c := mustLoad(t, []string{"--node-name=n"}, nil, nil)
	if !c.NATOutgoing || c.IptablesBackend != IptablesAuto || c.AllowlistCheckPeriod != time.Second || c.ExternalNodeCIDRs != nil {
		t.Errorf("defaults: natOutgoing %v backend %q check period %s external %v; want true auto 1s none",
			c.NATOutgoing, c.IptablesBackend, c.AllowlistCheckPeriod, c.ExternalNodeCIDRs)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    []string
		wantErr string
	}{
		{name: "bare IPv4 is a /32", args: []string{"--external-node-cidr=198.51.100.7"}, want: []string{"198.51.100.7/32"}},
		{name: "bare IPv6 is a /128", args: []string{"--external-node-cidr=2001:db8::7"}, want: []string{"2001:db8::7/128"}},
		{name: "repeated flag, duplicates once", args: []string{"--external-node-cidr=10.9.0.0/16", "--external-node-cidr", "2001:db8::/64,10.9.0.0/16"},
			want: []string{"10.9.0.0/16", "2001:db8::/64"}},
		{name: "env list", env: map[string]string{"ROUTELET_EXTERNAL_NODE_CIDR": "10.1.0.0/24, 10.2.0.0/24"}, want: []string{"10.1.0.0/24", "10.2.0.0/24"}},
		{name: "everyone refused", args: []string{"--external-node-cidr=0.0.0.0/0"}, wantErr: "every host"},
		{name: "garbage", args: []string{"--external-node-cidr=gateway"}, wantErr: `"gateway"`},
		{name: "backend is case-insensitive", args: []string{"--iptables-backend=NFT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, append([]string{"--node-name=n"}, tc.args...), tc.env, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "external-node-cidr") {
					t.Fatalf("err = %v, want one naming external-node-cidr and %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range c.ExternalNodeCIDRs {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("external node CIDRs = %v, want %v", got, tc.want)
			}
		})
	}
	if c := mustLoad(t, []string{"--node-name=n", "--iptables-backend=NFT"}, nil, nil); c.IptablesBackend != IptablesNFT {
		t.Errorf("backend NFT parsed as %q", c.IptablesBackend)
	}
	// An empty list in a higher layer clears a lower one.
	file := map[string]string{"/c.yaml": "node-name: n\nexternal-node-cidr: [10.1.0.0/24]\n"}
	if c := mustLoad(t, []string{"--config=/c.yaml"}, map[string]string{"ROUTELET_EXTERNAL_NODE_CIDR": ""}, file); c.ExternalNodeCIDRs != nil {
		t.Errorf("empty env did not clear the file's list: %v", c.ExternalNodeCIDRs)
	}
}
