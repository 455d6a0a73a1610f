package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInvalidConfigExits runs the real binary with bad settings: it must exit
// 2 and name the key and the value.
func TestInvalidConfigExits(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want []string
	}{
		{args: []string{"--mtu=12abc"}, want: []string{`"mtu"`, "12abc"}},
		{args: []string{"--node-name=n"}, env: "ROUTELET_ENCAPSULATION=gre", want: []string{`"encapsulation"`, "gre", "ROUTELET_ENCAPSULATION"}},
		{args: []string{"--node-name=n", "--datastore=consul"}, want: []string{`"datastore"`, "consul"}},
		{args: []string{"--node-name=n", "--datastore=kubernetes", "--kubeconfig=kube.conf"}, want: []string{`"kubeconfig"`, "kube.conf"}},
		{args: []string{"--config=/nonexistent/routeletd.yaml"}, want: []string{"/nonexistent/routeletd.yaml"}},
		{args: []string{"--node-name=n", "--datastore=etcd"}, want: []string{`"etcd-endpoints"`}},
		{args: []string{"--node-name=n", "--datastore=etcd", "--etcd-endpoints=http://10.0.0.5:2379", "--etcd-ca-file=/ca.crt"}, want: []string{`"etcd-endpoints"`, "http://10.0.0.5:2379"}},
		{args: []string{"--node-name=n", "--bgp-peer=127.0.0.1,as=65000"}, want: []string{`"bgp-peer"`, "127.0.0.1,as=65000", "loopback"}},
		{args: []string{"--node-name=n", "--bgp", "--bgp-route-protocol=80"}, want: []string{`"bgp-route-protocol"`, `"80"`, "route-protocol's too"}},
		{args: []string{"--node-name=n"}, env: "ROUTELET_BGP_AS=0", want: []string{`"bgp-as"`, "ROUTELET_BGP_AS", "not an AS number"}},
	} {
		cmd := exec.Command(filepath.Join(binDir, "routeletd"), tc.args...)
		cmd.Env = os.Environ()
		if tc.env != "" {
			cmd.Env = append(cmd.Env, tc.env)
		}
		out, err := cmd.CombinedOutput()
		if code := exitCode(err); code != 2 {
			t.Errorf("routeletd %v: exit %d, want 2 (%s)", tc.args, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("routeletd %v %s: message %q lacks %q", tc.args, tc.env, out, w)
			}
		}
	}
}
