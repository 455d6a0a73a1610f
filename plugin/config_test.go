package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestLoadConfigDefaults(t *testing.T) {
	c, e := loadConfig([]byte(`{"cniVersion":"1.0.0","name":"net","type":"routelet"}`))
	if e != nil {
		t.Fatal(e)
	}
	if c.StateDir != "/run/routelet" || c.Prefix != "cali" || c.MTU != 0 || c.Delegate != "" || len(c.Blocks) != 0 {
		t.Errorf("defaults: stateDir=%q prefix=%q mtu=%d delegate=%q blocks=%v", c.StateDir, c.Prefix, c.MTU, c.Delegate, c.Blocks)
	}
}

func TestLoadConfigFull(t *testing.T) {
	c, e := loadConfig([]byte(`{
		"cniVersion":"1.1.0","name":"net","type":"routelet",
		"stateDir":"/var/run/rl/","mtu":1400,"interfacePrefix":"pod",
		"ipam":{"blocks":["10.1.0.0/26","fd00:1::/122"]},
		"dns":{"nameservers":["10.96.0.10"]},
		"runtimeConfig":{"ips":["10.1.0.7/24"]},
		"args":{"cni":{"ips":["fd00:1::7","10.1.0.7"]}}}`))
	if e != nil {
		t.Fatal(e)
	}
	if c.StateDir != "/var/run/rl" || c.MTU != 1400 || c.Prefix != "pod" {
		t.Errorf("got stateDir=%q mtu=%d prefix=%q", c.StateDir, c.MTU, c.Prefix)
	}
	wantBlocks := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/26"), netip.MustParsePrefix("fd00:1::/122")}
	if !slices.Equal(c.Blocks, wantBlocks) {
		t.Errorf("blocks = %v, want %v", c.Blocks, wantBlocks)
	}
	wantIPs := []netip.Addr{netip.MustParseAddr("10.1.0.7"), netip.MustParseAddr("fd00:1::7")}
	if !slices.Equal(c.Requested, wantIPs) {
		t.Errorf("requested = %v, want %v", c.Requested, wantIPs)
	}
	if len(c.DNS.Nameservers) != 1 {
		t.Errorf("dns = %+v", c.DNS)
	}
}

func TestLoadConfigDelegatedIPAM(t *testing.T) {
	c, e := loadConfig([]byte(`{"cniVersion":"1.0.0","name":"net","type":"routelet",
		"ipam":{"type":"host-local","ranges":[[{"subnet":"10.2.0.0/24"}]]},
		"runtimeConfig":{"ips":["not-checked-here"]}}`))
	if e != nil {
		t.Fatal(e)
	}
	if c.Delegate != "host-local" || len(c.Blocks) != 0 || len(c.Requested) != 0 {
		t.Errorf("delegate=%q blocks=%v requested=%v", c.Delegate, c.Blocks, c.Requested)
	}
}

// TestLoadConfigRejects is the table of bad configs: each error has the
// spec's code and names the bad value.
func TestLoadConfigRejects(t *testing.T) {
	tests := []struct {
		name  string
		conf  string
		code  uint
		names string // substring the message must contain
	}{
		{"malformed JSON", `{"name":"net",`, types.ErrDecodingFailure, "decode network config"},
		{"not an object", `[1,2]`, types.ErrDecodingFailure, "decode network config"},
		{"no name", `{"cniVersion":"1.0.0","type":"routelet"}`, types.ErrInvalidNetworkConfig, "name"},
		{"relative stateDir", `{"name":"n","stateDir":"run/rl"}`, types.ErrInvalidNetworkConfig, `"run/rl"`},
		{"negative mtu", `{"name":"n","mtu":-5}`, types.ErrInvalidNetworkConfig, "mtu -5"},
		{"tiny mtu", `{"name":"n","mtu":40}`, types.ErrInvalidNetworkConfig, "mtu 40"},
		{"huge mtu", `{"name":"n","mtu":70000}`, types.ErrInvalidNetworkConfig, "mtu 70000"},
		{"mtu not a number", `{"name":"n","mtu":"1400"}`, types.ErrDecodingFailure, "mtu"},
		{"prefix with slash", `{"name":"n","interfacePrefix":"ca/li"}`, types.ErrInvalidNetworkConfig, `"ca/li"`},
		{"prefix too long", `{"name":"n","interfacePrefix":"abcdefghijkl"}`, types.ErrInvalidNetworkConfig, `"abcdefghijkl"`},
		{"prefix starts with digit", `{"name":"n","interfacePrefix":"1x"}`, types.ErrInvalidNetworkConfig, `"1x"`},
		{"bad CIDR", `{"name":"n","ipam":{"blocks":["10.0.0.0/33"]}}`, types.ErrInvalidNetworkConfig, `ipam.blocks[0] "10.0.0.0/33"`},
		{"block not a CIDR", `{"name":"n","ipam":{"blocks":["10.0.0.1"]}}`, types.ErrInvalidNetworkConfig, `"10.0.0.1"`},
		{"host bits set", `{"name":"n","ipam":{"blocks":["10.0.0.5/24"]}}`, types.ErrInvalidNetworkConfig, "10.0.0.0/24"},
		{"v4 block too small", `{"name":"n","ipam":{"blocks":["10.0.0.0/31"]}}`, types.ErrInvalidNetworkConfig, `"10.0.0.0/31"`},
		{"v6 block too small", `{"name":"n","ipam":{"blocks":["fd00::1/128"]}}`, types.ErrInvalidNetworkConfig, `"fd00::1/128"`},
		{"overlapping blocks", `{"name":"n","ipam":{"blocks":["10.0.0.0/24","10.0.0.0/26"]}}`, types.ErrInvalidNetworkConfig, `"10.0.0.0/26"`},
		{"unknown built-in ipam key", `{"name":"n","ipam":{"blocks":["10.0.0.0/24"],"subnet":"x"}}`, types.ErrInvalidNetworkConfig, "subnet"},
		{"ipam not an object", `{"name":"n","ipam":"host-local"}`, types.ErrDecodingFailure, "ipam"},
		{"ipam type not a string", `{"name":"n","ipam":{"type":5}}`, types.ErrInvalidNetworkConfig, "ipam.type 5"},
		{"ipam type is a path", `{"name":"n","ipam":{"type":"../bin/x"}}`, types.ErrInvalidNetworkConfig, `"../bin/x"`},
		{"blocks with a delegate", `{"name":"n","ipam":{"type":"host-local","blocks":["10.0.0.0/24"]}}`, types.ErrInvalidNetworkConfig, `"host-local"`},
		{"bad runtimeConfig ip", `{"name":"n","runtimeConfig":{"ips":["10.0.0.300"]}}`, types.ErrInvalidNetworkConfig, `runtimeConfig.ips[0] "10.0.0.300"`},
		{"bad args ip", `{"name":"n","args":{"cni":{"ips":["x"]}}}`, types.ErrInvalidNetworkConfig, `args.cni.ips[0] "x"`},
		{"two v4 requested", `{"name":"n","runtimeConfig":{"ips":["10.0.0.1","10.0.0.2"]}}`, types.ErrInvalidNetworkConfig, `"10.0.0.2"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, e := loadConfig([]byte(tc.conf))
			if e == nil {
				t.Fatalf("loadConfig(%s) succeeded, want code %d", tc.conf, tc.code)
			}
			if e.Code != tc.code {
				t.Errorf("code = %d, want %d (msg %q)", e.Code, tc.code, e.Msg)
			}
			if !strings.Contains(e.Msg, tc.names) {
				t.Errorf("message %q does not name %q", e.Msg, tc.names)
			}
		})
	}
}

func TestParseCNIArgs(t *testing.T) {
	a, e := parseCNIArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u;FOO=bar;IP=10.0.0.9,fd00::9")
	if e != nil {
		t.Fatal(e)
	}
	if a.PodNamespace != "default" || a.PodName != "web-0" {
		t.Errorf("pod = %s/%s", a.PodNamespace, a.PodName)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("fd00::9")}; !slices.Equal(a.IPs, want) {
		t.Errorf("IPs = %v, want %v", a.IPs, want)
	}
	if a, e := parseCNIArgs(""); e != nil || a.PodName != "" {
		t.Errorf("empty CNI_ARGS: %+v, %v", a, e)
	}

	for _, tc := range []struct{ args, names string }{
		{"FOO=bar", "FOO=bar"},
		{"K8S_POD_NAME", "K8S_POD_NAME"},
		{"IP=10.0.0.999", "10.0.0.999"},
		{"IP=10.0.0.1,10.0.0.2", "10.0.0.2"},
	} {
		_, e := parseCNIArgs(tc.args)
		if e == nil {
			t.Errorf("parseCNIArgs(%q) succeeded, want error", tc.args)
			continue
		}
		if e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, tc.names) || !strings.Contains(e.Msg, "CNI_ARGS") {
			t.Errorf("parseCNIArgs(%q) = code %d %q, want code 4 naming CNI_ARGS and %q", tc.args, e.Code, e.Msg, tc.names)
		}
	}
}

func TestRequestedMergesArgsAndConfig(t *testing.T) {
	c := &config{Requested: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}
	got, e := requested(c, &cniArgs{IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}})
	if e != nil || len(got) != 2 {
		t.Fatalf("requested = %v, %v; want two addresses", got, e)
	}
	if _, e := requested(c, &cniArgs{IPs: []netip.Addr{netip.MustParseAddr("10.0.0.6")}}); e == nil || !strings.Contains(e.Msg, "10.0.0.6") {
		t.Errorf("conflicting IP= accepted or not named: %v", e)
	}
}

// TestPreflight checks the environment validation that runs before skel.
func TestPreflight(t *testing.T) {
	regular := filepath.Join(t.TempDir(), "not-a-netns")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_IFNAME": "eth0",
		"CNI_NETNS": regular, "CNI_PATH": "/opt/cni/bin",
	}
	tests := []struct {
		name     string
		override map[string]string
		names    string
	}{
		{"missing container id", map[string]string{"CNI_CONTAINERID": ""}, "CNI_CONTAINERID"},
		{"invalid container id", map[string]string{"CNI_CONTAINERID": "-bad id"}, "-bad id"},
		{"missing ifname", map[string]string{"CNI_IFNAME": ""}, "CNI_IFNAME"},
		{"ifname too long", map[string]string{"CNI_IFNAME": "eth0123456789abc"}, "eth0123456789abc"},
		{"ifname with slash", map[string]string{"CNI_IFNAME": "et/h0"}, "et/h0"},
		{"missing netns", map[string]string{"CNI_NETNS": ""}, "CNI_NETNS"},
		{"netns is a regular file", nil, regular},
		{"netns does not exist", map[string]string{"CNI_NETNS": "/nonexistent/netns"}, "/nonexistent/netns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.override {
				env[k] = v
			}
			e := preflight(func(k string) string { return env[k] })
			if e == nil {
				t.Fatal("preflight accepted bad environment")
			}
			if e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, tc.names) {
				t.Errorf("got code %d %q, want code 4 naming %q", e.Code, e.Msg, tc.names)
			}
		})
	}
	// DEL needs no namespace; VERSION needs nothing.
	for _, env := range []map[string]string{
		{"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "abc", "CNI_IFNAME": "eth0"},
		{"CNI_COMMAND": "VERSION"},
	} {
		if e := preflight(func(k string) string { return env[k] }); e != nil {
			t.Errorf("preflight(%v) = %v, want nil", env, e)
		}
	}
}

// TestExampleConflist loads conf/10-routelet.conflist's routelet stanza the
// way a runtime hands it to the plugin.
func TestExampleConflist(t *testing.T) {
	b, err := os.ReadFile("../conf/10-routelet.conflist")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("conf/10-routelet.conflist: %v", err)
	}
	if len(list.Plugins) != 2 || list.Plugins[0]["type"] != "routelet" || list.Plugins[1]["type"] != "portmap" {
		t.Fatalf("plugins = %v, want routelet then portmap", list.Plugins)
	}
	stanza := list.Plugins[0]
	stanza["name"], stanza["cniVersion"] = list.Name, list.CNIVersion
	raw, _ := json.Marshal(stanza)
	c, e := loadConfig(raw)
	if e != nil {
		t.Fatalf("example routelet stanza rejected: %v", e)
	}
	if c.StateDir != "/run/routelet" || c.Prefix != "cali" || c.Delegate != "" {
		t.Errorf("example config parsed as %+v", c)
	}
}

func TestCheckRequested(t *testing.T) {
	blocks := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/30"), netip.MustParsePrefix("fd00::/127")}
	for _, ok := range []string{"10.0.0.1", "10.0.0.2", "fd00::1"} {
		if e := checkRequested([]netip.Addr{netip.MustParseAddr(ok)}, blocks, nil); e != nil {
			t.Errorf("checkRequested(%s) = %v, want nil", ok, e)
		}
	}
	reserved := []netip.Addr{netip.MustParseAddr("10.0.0.2")}
	for _, bad := range []string{"10.0.0.0", "10.0.0.3", "10.0.0.4", "fd00::", "fd00::2", "10.0.0.2"} {
		e := checkRequested([]netip.Addr{netip.MustParseAddr(bad)}, blocks, reserved)
		if e == nil || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, bad) {
			t.Errorf("checkRequested(%s) = %v, want code 7 naming it", bad, e)
		}
	}
}

// TestCheckNotSelf: the plugin's own type, and names in CNI_PATH that are
// this executable by symlink or hard link, are refused with code 7; another
// executable and a missing name are not.
func TestCheckNotSelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(exe, filepath.Join(dir, "via-symlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(exe, filepath.Join(dir, "via-hardlink")); err != nil {
		t.Logf("no hard link across file systems (%v): that case is left to the privileged test", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ  string
		self bool
	}{
		{"routelet", true}, {"via-symlink", true}, {"other", false}, {"missing", false},
	} {
		e := checkNotSelf(tc.typ, "routelet", dir)
		if tc.self != (e != nil) || e != nil && (e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, tc.typ)) {
			t.Errorf("checkNotSelf(%q) = %v, want refused %v", tc.typ, e, tc.self)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "via-hardlink")); err == nil {
		if e := checkNotSelf("via-hardlink", "routelet", dir); e == nil {
			t.Error("hard link to the plugin's executable accepted as ipam.type")
		}
	}
}
