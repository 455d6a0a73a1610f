package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netnstest"
)

// nodesCmd runs `routeletd nodes VERB ARGS` in the node with the flags
// startDaemon gives the daemon (the same state directory and node).
func (tn *testNode) nodesCmd(verb string, args ...string) (string, string, int) {
	tn.t.Helper()
	full := append([]string{"nodes", verb}, args...)
	full = append(full, "--node-name=node-a", "--state-dir="+tn.stateDir, "--pod-cidr="+tn.podCIDR)
	return tn.runIn(full...)
}

// TestNodesCLI: peer records added with `routeletd nodes add` are what the
// running daemon routes to; a record the daemon would refuse is refused
// with the value named and nothing written; `remove` takes the peer away.
func TestNodesCLI(t *testing.T) {
	tn := newTestNode(t, true)
	tn.startDaemon("--encapsulation=vxlan")
	tn.waitReady()
	const route = "10.244.8.0/24 vxlan.calico proto 80"

	out, errs, code := tn.nodesCmd("add", "node-b", "--host-ipv4", "192.0.2.20", "--block", "10.244.8.0/24",
		"--vtep-mac", "66:aa:bb:cc:dd:02", "--tunnel-ipv4", "10.244.8.0")
	if code != 0 {
		t.Fatalf("nodes add node-b: exit %d: %s%s", code, out, errs)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "route to node-b's block", func() bool { return tn.hasRoute(v4, route) })
	rec, err := tn.store.GetNode("node-b")
	if err != nil || rec.HostIPv4 != "192.0.2.20" || rec.VTEPMAC != "66:aa:bb:cc:dd:02" || rec.Updated.IsZero() {
		t.Errorf("record written = %+v, %v", rec, err)
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"node-c", []string{"--host-ipv4", "192.0.2.21", "--block", "10.244.7.128/25"}, `block "10.244.7.128/25" refused: overlaps this node's block 10.244.7.0/24`},
		{"node-d", []string{"--host-ipv4", "192.0.2.22", "--block", "10.244.9.0/24", "--vtep-mac", "01:00:5e:00:00:01"}, `vtepMAC "01:00:5e:00:00:01" refused`},
		{"node-e", []string{"--host-ipv4", "192.0.2.20", "--block", "10.244.10.0/24"}, `hostIPv4 "192.0.2.20" refused: is node node-b's`},
		{"node-f", []string{"--host-ipv4", "192.0.2.10", "--block", "10.244.11.0/24"}, `refused`},
		{"Bad_Name", []string{"--host-ipv4", "192.0.2.23", "--block", "10.244.12.0/24"}, `"Bad_Name"`},
	} {
		_, errs, code := tn.nodesCmd("add", append([]string{c.name}, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("nodes add %s %v: exit %d, stderr %q; want a refusal naming %q", c.name, c.args, code, errs, c.want)
		}
		if _, err := os.Lstat(filepath.Join(tn.stateDir, "nodes", c.name+".json")); !os.IsNotExist(err) {
			t.Errorf("refused record %s was written (%v)", c.name, err)
		}
	}
	if _, errs, code := tn.nodesCmd("add", "node-b", "--host-ipv4", "192.0.2.30", "--block", "10.244.8.0/24"); code == 0 || !strings.Contains(errs, "--replace") {
		t.Errorf("nodes add over an existing record: exit %d %q, want a refusal pointing at --replace", code, errs)
	}
	if _, errs, code := tn.nodesCmd("remove", "node-a"); code == 0 || !strings.Contains(errs, "this node") {
		t.Errorf("nodes remove of this node's own record: exit %d %q, want a refusal", code, errs)
	}

	out, _, code = tn.nodesCmd("list")
	if code != 0 || !strings.Contains(out, "node-b  192.0.2.20") || !strings.Contains(out, "this node") {
		t.Errorf("nodes list: exit %d:\n%s", code, out)
	}
	out, _, code = tn.nodesCmd("show", "node-b", "--output", "json")
	if code != 0 || !strings.Contains(out, `"vtepMAC": "66:aa:bb:cc:dd:02"`) {
		t.Errorf("nodes show node-b: exit %d:\n%s", code, out)
	}

	// A record copied from node-b's own state directory goes in with --from.
	if _, errs, code := tn.nodesCmd("remove", "node-b"); code != 0 {
		t.Fatalf("nodes remove node-b: exit %d: %s", code, errs)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "route to node-b gone", func() bool { return !tn.hasRoute(v4, route) })
	file := filepath.Join(t.TempDir(), "node-b.json")
	if err := os.WriteFile(file, []byte(`{"version":1,"name":"node-b","hostIPv4":"192.0.2.20","blocks":["10.244.8.0/24"],`+
		`"vtepMAC":"66:aa:bb:cc:dd:02","tunnelIPv4":"10.244.8.0","updated":"2026-01-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := tn.nodesCmd("add", "--from", file); code != 0 {
		t.Fatalf("nodes add --from: exit %d: %s", code, errs)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "route to node-b again", func() bool { return tn.hasRoute(v4, route) })
}
