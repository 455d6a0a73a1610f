package main

import (
	"testing"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestCheckRealKernelPerFamily: CHECK right after ADD passes against the
// real kernel for v4-only, v6-only and dual-stack blocks, with and without
// Kubernetes pod arguments and on an interface other than eth0 (no false
// positives from how the kernel reports routes and addresses).
func TestCheckRealKernelPerFamily(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "runs the plugin in fresh network namespaces")
	for name, blocks := range map[string][]string{
		"v4":   {"10.91.0.0/30"},
		"v6":   {"fd91::/127"},
		"dual": {"10.91.0.0/26", "fd91::/122"},
	} {
		for _, v := range []string{"0.4.0", "1.1.0"} {
			t.Run(name+"/"+v, func(t *testing.T) {
				n := newNode(t)
				pod := newNetNS(t)
				conf := n.conf(v, map[string]any{"ipam": map[string]any{"blocks": blocks}, "mtu": 1400})
				for _, c := range []struct{ id, ifName, args string }{
					{"k8s", "eth0", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web;IgnoreUnknown=1"},
					{"plain", "net1", ""},
				} {
					res := n.run(call{cmd: "ADD", containerID: c.id, netns: pod.Path(), ifName: c.ifName, args: c.args, conf: conf}).mustOK(t, "ADD "+c.id)
					n.run(call{cmd: "CHECK", containerID: c.id, netns: pod.Path(), ifName: c.ifName, args: c.args, conf: withPrev(t, conf, res.stdout)}).mustOK(t, "CHECK "+c.id)
					if name == "v6" {
						// A /127 holds exactly one pod: the next ADD fails cleanly.
						o := n.run(call{cmd: "ADD", containerID: c.id + "-2", netns: newNetNS(t).Path(), ifName: "eth0", conf: conf})
						if o.exitCode == 0 || o.cniErr.Code != 11 {
							t.Errorf("ADD into a full %s block: exit %d %+v, want code 11", blocks[0], o.exitCode, o.cniErr)
						}
						n.run(call{cmd: "DEL", containerID: c.id + "-2", ifName: "eth0", conf: conf}).mustOK(t, "DEL of failed ADD")
					}
					n.run(call{cmd: "DEL", containerID: c.id, netns: pod.Path(), ifName: c.ifName, args: c.args, conf: conf}).mustOK(t, "DEL "+c.id)
				}
				n.assertEmpty("after DEL")
			})
		}
	}
}
