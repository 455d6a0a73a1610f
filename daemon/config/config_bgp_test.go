package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netiptest"
	"github.com/routelet/routelet/pkg/peers"
)

// bgpKeyCases are TestEveryKey's cases for the bgp-* keys.
var bgpKeyCases = []struct {
	key  string
	good string
	ok   check
	bad  string
}{
	{"bgp", "true", func(c *Config) bool { return c.BGP.Enabled }, "on"},
	{"bgp-as", "4200000000", func(c *Config) bool { return c.BGP.ASN == 4200000000 }, "0"},
	{"bgp-as", "1", func(c *Config) bool { return c.BGP.ASN == 1 }, "4294967295"},
	{"bgp-as", "4294967294", func(c *Config) bool { return c.BGP.ASN == 4294967294 }, "AS64512"},
	{"bgp-router-id", "192.0.2.9", func(c *Config) bool { return c.BGP.RouterID == netip.MustParseAddr("192.0.2.9") }, "2001:db8::9"},
	{"bgp-router-id", "", func(c *Config) bool { return !c.BGP.RouterID.IsValid() }, "0.0.0.0"},
	{"bgp-router-id", "10.0.0.1", func(c *Config) bool { return c.BGP.RouterID.String() == "10.0.0.1" }, "router-1"},
	{"bgp-node-mesh", "false", func(c *Config) bool { return !c.BGP.NodeMesh }, "mesh"},
	{"bgp-peer", "192.0.2.254,as=65000,route-reflector", func(c *Config) bool {
		return reflect.DeepEqual(c.BGP.Peers, []peers.BGPPeer{{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000, RouteReflector: true}})
	}, "192.0.2.254,as=0"},
	{"bgp-peer", "2001:db8::fe,as=65001,port=1179;192.0.2.254,as=65000", func(c *Config) bool {
		return len(c.BGP.Peers) == 2 && c.BGP.Peers[0].Port == 1179 && c.BGP.Peers[1].ASN == 65000
	}, "127.0.0.1,as=65000"},
	{"bgp-peer", "", func(c *Config) bool { return c.BGP.Peers == nil }, "192.0.2.254,as=65000,port=0"},
	{"bgp-peer", "192.0.2.1,as=1", func(c *Config) bool { return len(c.BGP.Peers) == 1 }, "192.0.2.1,as=1;192.0.2.1,as=2"},
	{"bgp-peer", "192.0.2.1,as=1", func(c *Config) bool { return len(c.BGP.Peers) == 1 }, "192.0.2.1,as=1,password-file=/nonexistent/tor.pw"},
	{"bgp-peer", "192.0.2.1,as=1", func(c *Config) bool { return len(c.BGP.Peers) == 1 }, "192.0.2.1,as=1,hold-time=9"},
	{"bgp-pool", "10.244.0.0/16", func(c *Config) bool {
		return reflect.DeepEqual(c.BGP.Pools, netiptest.Prefixes("10.244.0.0/16"))
	}, "10.244.0.1/16"},
	{"bgp-pool", "10.244.0.0/16,fd00:244::/48", func(c *Config) bool { return len(c.BGP.Pools) == 2 }, "0.0.0.0/0"},
	{"bgp-listen-port", "1179", func(c *Config) bool { return c.BGP.ListenPort == 1179 }, "65536"},
	{"bgp-listen-port", "0", func(c *Config) bool { return c.BGP.ListenPort == 0 }, "-1"},
	{"bgp-graceful-restart", "false", func(c *Config) bool { return !c.BGP.GracefulRestart }, "maybe"},
	{"bgp-restart-time", "1s", func(c *Config) bool { return c.BGP.RestartTime == time.Second }, "500ms"},
	{"bgp-restart-time", "4095s", func(c *Config) bool { return c.BGP.RestartTime == 4095*time.Second }, "4096s"},
	{"bgp-restart-time", "5m", func(c *Config) bool { return c.BGP.RestartTime == 5*time.Minute }, "1500ms"},
	{"bgp-restart-time", "120s", func(c *Config) bool { return c.BGP.RestartTime == 2*time.Minute }, "2 minutes"},
	{"bgp-route-protocol", "5", func(c *Config) bool { return c.BGP.RouteProtocol == 5 }, "4"},
	{"bgp-route-protocol", "255", func(c *Config) bool { return c.BGP.RouteProtocol == 255 }, "256"},
	{"bgp-route-protocol", "186", func(c *Config) bool { return c.BGP.RouteProtocol == 186 }, "0"},
	{"bgp-max-prefixes", "0", func(c *Config) bool { return c.BGP.MaxPrefixes == 0 }, "-1"},
	{"bgp-max-prefixes", "500", func(c *Config) bool { return c.BGP.MaxPrefixes == 500 }, "many"},
}

// TestBGPBadValues: each bad bgp-* value is refused with an error naming
// the key, the value and what is wrong with it.
func TestBGPBadValues(t *testing.T) {
	for _, tc := range []struct {
		key, value, reason string
	}{
		{"bgp-as", "0", "not an AS number"},
		{"bgp-as", "4294967295", "not an AS number"},
		{"bgp-router-id", "fd00::1", "not an IPv4 address"},
		{"bgp-router-id", "::ffff:10.0.0.1", "not an IPv4 address"},
		{"bgp-router-id", "0.0.0.0", "no router ID"},
		{"bgp-restart-time", "0s", "at least 1s"},
		{"bgp-restart-time", "4096s", "at most 4095s"},
		{"bgp-restart-time", "2.5s", "whole seconds"},
		{"bgp-route-protocol", "4", "between 5 and 255"},
		{"bgp-route-protocol", "0", "between 5 and 255"},
		{"bgp-route-protocol", "256", "between 5 and 255"},
		{"bgp-listen-port", "65536", "between 0 and 65535"},
		{"bgp-max-prefixes", "-5", "between 0 and"},
		{"bgp-pool", "0.0.0.0/0", "is not a pod pool"},
		{"bgp-pool", "::ffff:10.0.0.0/104", "is not a pod pool"},
		{"bgp-pool", "10.244.0.0", "is not a CIDR"},
		{"bgp-peer", "192.0.2.1", "no as=N"},
		{"bgp-peer", "0.0.0.0,as=1", "unspecified"},
		{"bgp-peer", "::1,as=1", "loopback"},
		{"bgp-peer", "ff02::2,as=1", "multicast"},
		{"bgp-peer", "fe80::1,as=1", "link-local"},
		{"bgp-peer", "169.254.0.1,as=1", "link-local"},
		{"bgp-peer", "192.0.2.1,as=4294967295", `as "4294967295"`},
		{"bgp-peer", "192.0.2.1,as=1,port=0", `port "0"`},
		{"bgp-peer", "192.0.2.1,as=1,md5=x", `unknown option "md5"`},
		{"bgp-peer", "192.0.2.1,as=1,as=1", "given twice"},
		{"bgp-peer", "192.0.2.1,as=1;192.0.2.1,as=2", "also peer"},
		{"bgp-peer", "192.0.2.1,as=1,password-file=relative.pw", "not an absolute path"},
		{"bgp-peer", "192.0.2.1,as=1,password-file=/nonexistent/tor.pw", "/nonexistent/tor.pw"},
	} {
		_, err := load(t, []string{"--node-name=n1", "--" + tc.key + "=" + tc.value}, nil, nil)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(err.Error(), tc.value) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("--%s=%s: err = %v; want a %s error naming the value and %q", tc.key, tc.value, err, tc.key, tc.reason)
		}
	}
}

// TestBGPRouteProtocolNotRouteletsOther: with the speaker on, a
// bgp-route-protocol equal to route-protocol is refused, naming the key,
// the layer and the value; with it off the two are not compared.
func TestBGPRouteProtocolNotRouteletsOther(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		env   map[string]string
		where string
	}{
		{[]string{"--bgp-route-protocol=80"}, nil, "flag --bgp-route-protocol"},
		{[]string{"--route-protocol=186"}, nil, "default"},
		{[]string{"--route-protocol=99"}, map[string]string{"ROUTELET_BGP_ROUTE_PROTOCOL": "99"}, "env ROUTELET_BGP_ROUTE_PROTOCOL"},
	} {
		_, err := load(t, append([]string{"--node-name=n1", "--bgp"}, tc.args...), tc.env, nil)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != "bgp-route-protocol" || !strings.Contains(err.Error(), tc.where) || !strings.Contains(err.Error(), "route-protocol's too") {
			t.Errorf("%v %v: err = %v, want a bgp-route-protocol error from %s", tc.args, tc.env, err, tc.where)
		}
		if _, err := load(t, append([]string{"--node-name=n1"}, tc.args...), tc.env, nil); err != nil {
			t.Errorf("%v %v without bgp: %v, want no error", tc.args, tc.env, err)
		}
	}
}

// TestBGPPeers: peers come from repeated flags, a ';'-separated
// environment variable and a file's list (or ';'-separated scalar), a
// higher layer replacing a lower one; a password file is checked at load
// (readable, 1-80 bytes once trimmed), kept as a path, and read by
// BGPPeer.Password.
func TestBGPPeers(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "tor.pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tor := peers.BGPPeer{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000, PasswordFile: pw}
	rr := peers.BGPPeer{Address: netip.MustParseAddr("2001:db8::fe"), ASN: 64512, Port: 1179, RouteReflector: true}
	both := []peers.BGPPeer{tor, rr}
	file := map[string]string{
		"/list.yaml":   "node-name: n\nbgp-peer:\n  - 192.0.2.254,as=65000,password-file=" + pw + "\n  - 2001:db8::fe,as=64512,port=1179,route-reflector\n",
		"/scalar.yaml": "node-name: n\nbgp-peer: 192.0.2.254,as=65000,password-file=" + pw + "; 2001:db8::fe,as=64512,port=1179,route-reflector\n",
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want []peers.BGPPeer
	}{
		"flags":          {args: []string{"--node-name=n", "--bgp-peer=" + tor.String(), "--bgp-peer", rr.String()}, want: both},
		"env":            {args: []string{"--node-name=n"}, env: map[string]string{"ROUTELET_BGP_PEER": tor.String() + " ; " + rr.String() + ";"}, want: both},
		"file list":      {args: []string{"--config=/list.yaml"}, want: both},
		"file scalar":    {args: []string{"--config=/scalar.yaml"}, want: both},
		"flag over file": {args: []string{"--config=/list.yaml", "--bgp-peer=" + rr.String()}, want: []peers.BGPPeer{rr}},
		"empty env":      {args: []string{"--config=/list.yaml"}, env: map[string]string{"ROUTELET_BGP_PEER": ""}, want: nil},
	} {
		c, err := load(t, tc.args, tc.env, file)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(c.BGP.Peers, tc.want) {
			t.Errorf("%s: peers %+v, want %+v", name, c.BGP.Peers, tc.want)
		}
	}
	if p, err := tor.Password(); p != "s3cret" || err != nil {
		t.Errorf("Password() = %q, %v", p, err)
	}
	for name, content := range map[string]string{"empty": "\n", "too long": strings.Repeat("x", 81)} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := load(t, []string{"--node-name=n", "--bgp-peer=192.0.2.1,as=1,password-file=" + bad}, nil, nil)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != "bgp-peer" || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s password file: err = %v, want a bgp-peer error naming %s", name, err, bad)
		}
	}
	unreadable := filepath.Join(dir, "unreadable")
	if err := os.WriteFile(unreadable, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 { // root reads it anyway
		if _, err := load(t, []string{"--node-name=n", "--bgp-peer=192.0.2.1,as=1,password-file=" + unreadable}, nil, nil); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("unreadable password file: err = %v", err)
		}
	}
	if _, err := load(t, []string{"--node-name=n", "--bgp-peer=192.0.2.1,as=1,password-file=" + dir}, nil, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory as password file: err = %v", err)
	}
}
