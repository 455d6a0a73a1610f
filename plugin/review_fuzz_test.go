package main

import (
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
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
