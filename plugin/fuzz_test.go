package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/state"
)

// FuzzLoadConfig feeds arbitrary stdin to the config parser and, for a
// config that parses, to CHECK's prevResult decoding: neither may panic, and
// an accepted config must satisfy the invariants the commands rely on.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"routelet"}`,
		`{"cniVersion":"1.0.0","name":"n","type":"routelet","stateDir":"/run/x","mtu":1400,"interfacePrefix":"rl","ipam":{"blocks":["10.0.0.0/26","fd00::/122"]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local","ranges":[]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":""}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"blocks":["::ffff:10.0.0.0/120"]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"blocks":["fd00::/127"]}}`,
		`{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"ips":["10.0.0.5/24","fd00::5"]},"args":{"cni":{"ips":["10.0.0.5"]}}}`,
		`{"cniVersion":"1.1.0","name":"n","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}],"cni.dev/attachments":[]}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"cali1","mac":"ee:ee:ee:ee:ee:ee"},{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.0.0.5/32","interface":1}],"routes":[{"dst":"0.0.0.0/0","gw":"169.254.1.1"}]}}`,
		`{"cniVersion":"0.4.0","name":"n","prevResult":{"interfaces":[null],"ips":[null],"routes":[null]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"ips":[{"address":"10.0.0.5/32","interface":-7}],"interfaces":[{"name":"eth0","sandbox":"/x"}]}}`,
		`null`, `[]`, `{"name":""}`,
		`{"cniVersion":"1.0.0","name":"n","type":"routelet","ipam":{"type":"routelet"}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"x","ipam":{"type":"x"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"../routelet"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"blocks":["0.0.0.0/0"]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"blocks":["169.254.1.0/24","127.0.0.0/8","224.0.0.0/4","ff02::/16","fe80::/64"]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"blocks":["10.0.0.0/31","10.0.0.0/30","10.0.0.0/8"]}}`,
		`{"cniVersion":"1.0.0","name":"n","interfacePrefix":"eth"}`,
		`{"cniVersion":"1.0.0","name":"n","interfacePrefix":"ca%d"}`,
		`{"cniVersion":"1.0.0","name":"n","interfacePrefix":"a/b:c d"}`,
		`{"cniVersion":"1.1.0","name":"n","cni.dev/valid-attachments":null}`,
		`{"cniVersion":"1.1.0","name":"n","cni.dev/attachments":[]}`,
	} {
		f.Add([]byte(s), "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;IgnoreUnknown=1;IP=10.0.0.5")
	}
	f.Fuzz(func(t *testing.T, stdin []byte, argStr string) {
		ka, _ := parseCNIArgs(argStr)
		c, e := loadConfig(stdin)
		if e != nil {
			return
		}
		if c.Name == "" || c.StateDir == "" || c.Prefix == "" || c.MTU < 0 {
			t.Fatalf("accepted config with name %q stateDir %q prefix %q mtu %d", c.Name, c.StateDir, c.Prefix, c.MTU)
		}
		if c.Delegate != "" && c.Delegate == c.raw.Type {
			t.Fatalf("accepted ipam.type %q equal to the plugin's own type", c.Delegate)
		}
		if err := nodespace.CheckPrefixSyntax(c.Prefix); err != nil {
			t.Fatalf("accepted interfacePrefix %q: %v", c.Prefix, err)
		}
		if c.KeepListGiven && !bytes.Contains(stdin, []byte("attachments")) {
			t.Fatalf("keep list given for %s", stdin)
		}
		for _, b := range c.Blocks {
			if b != b.Masked() || b.Addr().Is4In6() {
				t.Fatalf("accepted block %s", b)
			}
		}
		if ka == nil {
			ka = &cniArgs{}
		}
		if _, e := requested(c, ka); e != nil {
			return
		}
		if prevResultShape(c.raw.RawPrevResult) != nil {
			return
		}
		if version.ParsePrevResult(&c.raw.PluginConf) != nil || c.raw.PrevResult == nil {
			return
		}
		prev, err := types100.NewResultFromResult(c.raw.PrevResult)
		if err != nil {
			return
		}
		_, _ = expectedFromPrev(prev, &skel.CmdArgs{ContainerID: "c", IfName: "eth0", Netns: "/x"}, c, ka)
	})
}

// fuzzHost is a node with an uplink veth, a bridge, a pod veth, a VXLAN
// device and a connected route, for FuzzGuards.
var fuzzHost = nodespace.Host{
	Addrs:     []netip.Prefix{netip.MustParsePrefix("192.168.77.2/24"), netip.MustParsePrefix("2001:db8:1::2/64")},
	Connected: []netip.Prefix{netip.MustParsePrefix("172.31.0.0/16")},
	Links: []nodespace.Link{
		{Name: "lo", Type: "device"}, {Name: "eth0", Type: "veth"}, {Name: "br0", Type: "bridge"},
		{Name: "cali0123456789a", Type: "veth"}, {Name: "vxlan.calico", Type: "vxlan"},
	},
	Uplinks: []string{"eth0"},
}

// FuzzGuards feeds hostile interface names, prefixes, link names and types
// and blocks to the checks ADD, DEL and GC run: nothing panics, and what is
// accepted keeps the promises the commands rely on.
func FuzzGuards(f *testing.F) {
	for _, s := range []struct{ ifName, prefix, link, typ, block string }{
		{"eth0", "cali", "cali0123456789a", "veth", "10.244.0.0/24"},
		{"eth%d", "ca%d", "br0", "bridge", "0.0.0.0/0"},
		{"%", "eth", "eth0", "veth", "::/0"},
		{"a/b", "br", "vxlan.calico", "vxlan", "169.254.1.0/24"},
		{"a:b", "cali", "eth0", "veth", "192.168.77.128/26"},
		{"a b", "", "", "", "172.31.5.0/24"},
		{"eth0123456789abcdef", "abcdefghijkl", "cali", "ipip", "fe80::/64"},
		{"..", "c", "calix", "veth", "10.0.0.0/31"},
		{"tunl0", "tunl", "tunl0", "ipip", "224.0.0.0/24"},
		{"\x00", "v", "veth1", "veth", "2001:db8:1::/120"},
	} {
		f.Add(s.ifName, s.prefix, s.link, s.typ, s.block)
	}
	f.Fuzz(func(t *testing.T, ifName, prefix, link, typ, block string) {
		if state.ValidateIfName(ifName) == nil && checkIfName(ifName) == nil {
			if strings.ContainsAny(ifName, "%/: \t\n") || len(ifName) > 15 {
				t.Fatalf("accepted CNI_IFNAME %q", ifName)
			}
		}
		if checkPrefix(fuzzHost, prefix) == nil {
			for _, l := range fuzzHost.Links {
				if strings.HasPrefix(l.Name, prefix) && (l.Type != "veth" || fuzzHost.HasUplink(l.Name)) {
					t.Fatalf("accepted interfacePrefix %q although it matches %s (%s)", prefix, l.Name, l.Type)
				}
			}
		}
		why := ownerDescription(fuzzHost, nodespace.Link{Name: link, Type: typ}, prefix)
		if why == "" && (typ != "veth" || prefix == "" || !strings.HasPrefix(link, prefix) || fuzzHost.HasUplink(link)) {
			t.Fatalf("would delete link %q of type %q under prefix %q", link, typ, prefix)
		}
		p, err := netip.ParsePrefix(block)
		if err != nil {
			return
		}
		if checkBlocks(fuzzHost, []netip.Prefix{p}) == nil {
			if p.Bits() == 0 || nodespace.SpecialRange(p) != "" || fuzzHost.Overlap(p) != "" || p != p.Masked() {
				t.Fatalf("accepted block %s", p)
			}
			if p.Contains(netip.MustParseAddr("169.254.1.1")) {
				t.Fatalf("accepted block %s holding the pod gateway", p)
			}
		}
		if p == p.Masked() && p.Addr().Zone() == "" {
			res := reservedAddrs([]netip.Prefix{p})
			if len(res) < 2 || res[1] != p.Addr() {
				t.Fatalf("reserved addresses %v for daemon block %s lack its first address", res, p)
			}
		}
	})
}
