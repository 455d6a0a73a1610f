package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// TestLifecycle runs ADD, ping pod to pod (v4 and v6), CHECK, DEL, DEL again
// and ADD after DEL for every supported spec version.
func TestLifecycle(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "runs the plugin in fresh network namespaces")
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := newNode(t)
			podA, podB := newNetNS(t), newNetNS(t)
			conf := n.conf(v, map[string]any{"dns": map[string]any{"nameservers": []string{"10.96.0.10"}}})
			add := func(id string, pod string) outcome {
				return n.run(call{cmd: "ADD", containerID: id, netns: pod, ifName: "eth0", conf: conf}).mustOK(t, "ADD "+id)
			}
			resA := add("pod-a", podA.Path())
			resB := add("pod-b", podB.Path())

			r, err := version.NewResult(v, resA.stdout)
			if err != nil {
				t.Fatalf("result does not parse as %s: %v\n%s", v, err, resA.stdout)
			}
			if r.Version() != v {
				t.Errorf("result version %s, want %s", r.Version(), v)
			}
			mustContain(t, "result", string(resA.stdout), "10.96.0.10", `"sandbox": "`+podA.Path()+`"`)
			a, b := addrsOf(t, resA.stdout), addrsOf(t, resB.stdout)
			if len(a) != 2 || len(b) != 2 || a[0] == b[0] || a[1] == b[1] {
				t.Fatalf("addresses A=%v B=%v, want one v4 and one v6 each, distinct", a, b)
			}
			for i := range a {
				netnstest.CheckPing(t, podA, b[i].String())
				netnstest.CheckPing(t, podB, a[i].String())
			}
			recs := n.records()
			if len(recs) != 2 || recs[0].Network != "routelet-test" || recs[0].HostIface != hostIfOf(t, resA.stdout) {
				t.Errorf("records = %+v", recs)
			}

			if v != "0.3.1" {
				n.run(call{cmd: "CHECK", containerID: "pod-a", netns: podA.Path(), ifName: "eth0", conf: withPrev(t, conf, resA.stdout)}).mustOK(t, "CHECK")
			}
			for _, id := range []string{"pod-a", "pod-b"} {
				n.run(call{cmd: "DEL", containerID: id, netns: map[string]string{"pod-a": podA.Path(), "pod-b": podB.Path()}[id], ifName: "eth0", conf: conf}).mustOK(t, "DEL "+id)
			}
			n.assertEmpty("after DEL")
			// DEL again, and DEL without a namespace: still success.
			n.run(call{cmd: "DEL", containerID: "pod-a", netns: podA.Path(), ifName: "eth0", conf: conf}).mustOK(t, "second DEL")
			n.run(call{cmd: "DEL", containerID: "pod-a", ifName: "eth0", conf: conf}).mustOK(t, "DEL without netns")

			again := add("pod-a", podA.Path())
			if got := addrsOf(t, again.stdout); len(got) != 2 {
				t.Errorf("ADD after DEL gave %v", got)
			}
			n.run(call{cmd: "DEL", containerID: "pod-a", netns: podA.Path(), ifName: "eth0", conf: conf}).mustOK(t, "final DEL")
			n.assertEmpty("after final DEL")
		})
	}
}

// TestBadInput feeds the binary bad environments and configs: each gives the
// spec's error code, a message naming the bad value, and leaves nothing behind.
func TestBadInput(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "runs the plugin in fresh network namespaces")
	regular := filepath.Join(t.TempDir(), "regular-file")
	if err := os.WriteFile(regular, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		modify func(n *node, c *call)
		code   uint
		names  []string
	}{
		{"missing CNI_CONTAINERID", func(n *node, c *call) { c.containerID = "" }, types.ErrInvalidEnvironmentVariables, []string{"CNI_CONTAINERID"}},
		{"invalid CNI_CONTAINERID", func(n *node, c *call) { c.containerID = "bad/id" }, types.ErrInvalidEnvironmentVariables, []string{"CNI_CONTAINERID", "bad/id"}},
		{"ifname too long", func(n *node, c *call) { c.ifName = "eth0123456789abcdef" }, types.ErrInvalidEnvironmentVariables, []string{"CNI_IFNAME", "eth0123456789abcdef"}},
		{"netns is a regular file", func(n *node, c *call) { c.netns = regular }, types.ErrInvalidEnvironmentVariables, []string{"CNI_NETNS", regular}},
		{"netns is the node's own", func(n *node, c *call) { c.netns = n.ns.Path() }, types.ErrInvalidEnvironmentVariables, []string{"CNI_NETNS", "own"}},
		{"malformed JSON", func(n *node, c *call) { c.conf = []byte(`{"cniVersion":"1.0.0","name":`) }, types.ErrDecodingFailure, []string{"unexpected end of JSON"}},
		{"unsupported cniVersion", func(n *node, c *call) { c.conf = n.conf("9.9.9", nil) }, types.ErrIncompatibleCNIVersion, []string{"9.9.9"}},
		{"bad CNI_ARGS", func(n *node, c *call) { c.args = "FOO=bar" }, types.ErrInvalidEnvironmentVariables, []string{"CNI_ARGS", "FOO=bar"}},
		{"negative mtu", func(n *node, c *call) { c.conf = n.conf("1.0.0", map[string]any{"mtu": -1}) }, types.ErrInvalidNetworkConfig, []string{"mtu -1"}},
		{"bad block", func(n *node, c *call) {
			c.conf = n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{"10.0.0.0/40"}}})
		}, types.ErrInvalidNetworkConfig, []string{"10.0.0.0/40"}},
		{"unwritable state dir", func(n *node, c *call) {
			c.conf = n.conf("1.0.0", map[string]any{"stateDir": filepath.Join(regular, "state")})
		}, types.ErrIOFailure, []string{filepath.Join(regular, "state")}},
		{"no blocks and no daemon", func(n *node, c *call) { c.conf = n.conf("1.0.0", map[string]any{"ipam": nil}) }, types.ErrTryAgainLater, []string{"no blocks", "daemon.json"}},
		{"requested address outside blocks", func(n *node, c *call) {
			c.conf = n.conf("1.0.0", map[string]any{"runtimeConfig": map[string]any{"ips": []string{"192.0.2.7"}}})
		}, types.ErrInvalidNetworkConfig, []string{"192.0.2.7", "10.90.0.0/26"}},
		{"requested address reserved", func(n *node, c *call) { c.args = "IgnoreUnknown=1;IP=10.90.0.63" }, types.ErrInvalidNetworkConfig, []string{"10.90.0.63", "reserved"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			pod := newNetNS(t)
			c := call{cmd: "ADD", containerID: "bad-input", netns: pod.Path(), ifName: "eth0", conf: n.conf("1.0.0", nil)}
			tc.modify(n, &c)
			o := n.run(c)
			if o.exitCode != 1 {
				t.Fatalf("exit code %d, want 1; stdout %s", o.exitCode, o.stdout)
			}
			if o.cniErr.Code != tc.code {
				t.Errorf("CNI code %d, want %d (msg %q)", o.cniErr.Code, tc.code, o.cniErr.Msg)
			}
			mustContain(t, "error message", o.cniErr.Msg, tc.names...)
			n.assertEmpty(tc.name)
			if pv, err := podnet.InspectPod(pod.Path(), "eth0"); err != nil || pv.Exists {
				t.Errorf("pod netns has eth0 after failed ADD (err %v)", err)
			}
		})
	}
}

// TestExhaustedBlock fills a /30 (two usable IPv4 addresses) and checks that
// the failing ADD says so with code 11, naming the block once, and leaves
// nothing of its own behind.
func TestExhaustedBlock(t *testing.T) {
	n := newNode(t)
	conf := n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{"10.91.0.0/30"}}})
	var failed *outcome
	var added int
	for i := range 4 {
		pod := newNetNS(t)
		o := n.run(call{cmd: "ADD", containerID: fmt.Sprintf("fill-%d", i), netns: pod.Path(), ifName: "eth0", conf: conf})
		if o.exitCode != 0 {
			failed = &o
			if pv, err := podnet.InspectPod(pod.Path(), "eth0"); err != nil || pv.Exists {
				t.Errorf("pod netns has eth0 after failed ADD (err %v)", err)
			}
			break
		}
		added++
	}
	if failed == nil {
		t.Fatal("four ADDs into a /30 all succeeded")
	}
	if added != 2 {
		t.Errorf("%d ADDs succeeded before exhaustion, want 2 (.1 and .2)", added)
	}
	if failed.cniErr.Code != types.ErrTryAgainLater {
		t.Errorf("code %d, want 11 (msg %q)", failed.cniErr.Code, failed.cniErr.Msg)
	}
	mustContain(t, "exhaustion message", failed.cniErr.Msg, "no addresses left in block 10.91.0.0/30")
	if strings.Count(failed.cniErr.Msg, "ipam:") > 1 {
		t.Errorf("exhaustion message %q repeats its prefix", failed.cniErr.Msg)
	}
	if l := n.hostLinks(); len(l) != added {
		t.Errorf("node links %v, want only the %d successful pods'", l, added)
	}
	if r := n.records(); len(r) != added {
		t.Errorf("%d records, want %d", len(r), added)
	}
	if a := n.allocations(); len(a) != added {
		t.Errorf("%d allocations, want %d", len(a), added)
	}
}

// TestCheckNamesDrift breaks an attachment piece by piece and checks that
// CHECK names each broken piece.
func TestCheckNamesDrift(t *testing.T) {
	n := newNode(t)
	pod := newNetNS(t)
	conf := n.conf("1.0.0", nil)
	res := n.run(call{cmd: "ADD", containerID: "drift", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD")
	hostIf := hostIfOf(t, res.stdout)
	addrs := addrsOf(t, res.stdout)
	check := func() outcome {
		return n.run(call{cmd: "CHECK", containerID: "drift", netns: pod.Path(), ifName: "eth0", conf: withPrev(t, conf, res.stdout)})
	}
	check().mustOK(t, "CHECK of a fresh attachment")

	mustRun(t, n, "ip", "route", "del", addrs[0].String()+"/32", "dev", hostIf)
	mustRunIn(t, pod.Path(), "ip", "-6", "route", "del", "default")
	st, err := state.Open(n.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteWorkload("drift", "eth0"); err != nil {
		t.Fatal(err)
	}
	o := check()
	if o.exitCode == 0 {
		t.Fatal("CHECK passed on a broken attachment")
	}
	mustContain(t, "CHECK message", o.cniErr.Msg,
		"host route "+addrs[0].String()+"/32 dev "+hostIf+" is missing",
		"route ::/0 via fe80::ecee:eeff:feee:eeee is missing",
		"workload record for drift/eth0 is missing")

	mustRun(t, n, "ip", "link", "set", hostIf, "down")
	o = check()
	mustContain(t, "CHECK message", o.cniErr.Msg, "host veth "+hostIf+" is down")
	n.run(call{cmd: "DEL", containerID: "drift", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "DEL")
	o = check()
	mustContain(t, "CHECK after DEL", o.cniErr.Msg, "interface eth0 is missing", "host veth "+hostIf+" is missing")
	n.assertEmpty("after DEL")
}

func mustRun(t *testing.T, n *node, args ...string) {
	t.Helper()
	mustRunIn(t, n.ns.Path(), args...)
}

// mustRunIn runs a command (ip …) inside the namespace at path.
func mustRunIn(t *testing.T, path string, args ...string) {
	t.Helper()
	out, err := execInNS(path, args...)
	if err != nil {
		t.Fatalf("%v in %s: %v\n%s", args, path, err, out)
	}
}

// TestStatus: not ready without daemon.json, with a not-ready one, with an
// unreadable one; ready once routeletd says so while it holds its lock; not
// ready again once the lock is let go (a dead daemon leaves daemon.json).
func TestStatus(t *testing.T) {
	n := newNode(t)
	conf := n.conf("1.1.0", nil)
	status := func() outcome { return n.run(call{cmd: "STATUS", conf: conf}) }

	o := status()
	if o.exitCode == 0 || o.cniErr.Code != 50 {
		t.Fatalf("STATUS without daemon.json: exit %d %s, want code 50", o.exitCode, o.stdout)
	}
	mustContain(t, "STATUS message", o.cniErr.Msg, "daemon.json")

	st, err := state.Open(n.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	release := holdDaemonLock(t, n.stateDir)
	defer func() { release() }()
	if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: false, Reason: "waiting for node record"}); err != nil {
		t.Fatal(err)
	}
	o = status()
	if o.exitCode == 0 || o.cniErr.Code != 50 {
		t.Fatalf("STATUS when not ready: exit %d %s, want code 50", o.exitCode, o.stdout)
	}
	mustContain(t, "STATUS message", o.cniErr.Msg, "waiting for node record")

	n.writeDaemonStatus("{garbage")
	o = status()
	if o.exitCode == 0 || o.cniErr.Code != 50 {
		t.Fatalf("STATUS with garbage daemon.json: exit %d %s, want code 50", o.exitCode, o.stdout)
	}
	mustContain(t, "STATUS message", o.cniErr.Msg, "unreadable")

	if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true}); err != nil {
		t.Fatal(err)
	}
	status().mustOK(t, "STATUS when ready")

	release()
	release = func() {}
	o = status()
	if o.exitCode == 0 || o.cniErr.Code != 50 {
		t.Fatalf("STATUS with a ready daemon.json but no daemon: exit %d %s, want code 50", o.exitCode, o.stdout)
	}
	mustContain(t, "STATUS message", o.cniErr.Msg, "routeletd is not running", "routeletd.lock")

	o = n.run(call{cmd: "STATUS", conf: n.conf("1.0.0", nil)})
	if o.exitCode == 0 || o.cniErr.Code != types.ErrIncompatibleCNIVersion {
		t.Errorf("STATUS with cniVersion 1.0.0: exit %d %s, want code 1", o.exitCode, o.stdout)
	}
}

// TestDaemonStatusSuppliesBlocksAndMTU: without ipam.blocks or mtu in the
// conflist, both come from daemon.json.
func TestDaemonStatusSuppliesBlocksAndMTU(t *testing.T) {
	n := newNode(t)
	pod := newNetNS(t)
	st, err := state.Open(n.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true, PodMTU: 1370, Blocks: []string{"10.92.0.0/28"}}); err != nil {
		t.Fatal(err)
	}
	conf := n.conf("1.0.0", map[string]any{"ipam": nil})
	res := n.run(call{cmd: "ADD", containerID: "from-daemon", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD")
	if a := addrsOf(t, res.stdout); len(a) != 1 || a[0].String() != "10.92.0.1" {
		t.Errorf("addresses %v, want [10.92.0.1] from daemon.json's block", a)
	}
	// /sys shows the namespace it was mounted in, so ask netlink via ip.
	out, err := execInNS(pod.Path(), "ip", "-o", "link", "show", "eth0")
	if err != nil || !strings.Contains(string(out), " mtu 1370 ") {
		t.Errorf("pod MTU %q (err %v), want 1370 from daemon.json", out, err)
	}
	n.run(call{cmd: "DEL", containerID: "from-daemon", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "DEL")
	n.assertEmpty("after DEL")
}

// TestGC removes only stale attachments of this network.
func TestGC(t *testing.T) {
	n := newNode(t)
	conf := n.conf("1.1.0", nil)
	ids := []string{"keep-1", "keep-2", "stale-1", "stale-2"}
	for _, id := range ids {
		pod := newNetNS(t)
		n.run(call{cmd: "ADD", containerID: id, netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD "+id)
	}
	// A record of another network on the same state dir must survive.
	st, err := state.Open(n.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorkload(&state.Workload{ContainerID: "other-net", IfName: "eth0", HostIface: "caliothernet00", Netns: "/x",
		IPs: []string{"10.200.0.1/32"}, ContainerMAC: "02:00:00:00:00:01", Network: "another"}); err != nil {
		t.Fatal(err)
	}

	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m["cni.dev/valid-attachments"] = []map[string]string{{"containerID": "keep-1", "ifname": "eth0"}}
	m["cni.dev/attachments"] = []map[string]string{{"containerID": "keep-2", "ifname": "eth0"}}
	gcConf, _ := json.Marshal(m)
	n.run(call{cmd: "GC", conf: gcConf}).mustOK(t, "GC")

	var left []string
	for _, r := range n.records() {
		left = append(left, r.ContainerID)
	}
	if strings.Join(left, ",") != "keep-1,keep-2,other-net" {
		t.Errorf("records after GC: %v, want keep-1, keep-2, other-net", left)
	}
	allocs := n.allocations()
	if len(allocs) != 2 || allocs[ipam.Attachment{ContainerID: "keep-1", IfName: "eth0"}] == nil || allocs[ipam.Attachment{ContainerID: "keep-2", IfName: "eth0"}] == nil {
		t.Errorf("allocations after GC: %v, want keep-1 and keep-2 only", allocs)
	}
	if l := n.hostLinks(); len(l) != 2 {
		t.Errorf("links after GC: %v, want the two kept veths", l)
	} else if c := n.guardChains(); len(c) != 2 || !slices.Contains(c, l[0]) || !slices.Contains(c, l[1]) {
		t.Errorf("pod guards after GC: %v, want those of the kept veths %v", c, l)
	}
}

// TestParallelAdds runs 32 ADDs at once, then 32 DELs at once.
func TestParallelAdds(t *testing.T) {
	n := newNode(t)
	conf := n.conf("1.0.0", nil)
	const pods = 32
	nss := make([]string, pods)
	for i := range nss {
		nss[i] = newNetNS(t).Path()
	}
	// all runs cmd for every pod at once and returns the outcomes by pod.
	all := func(cmd string) []outcome {
		outs := make([]outcome, pods)
		var wg sync.WaitGroup
		for i := range pods {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i] = n.run(call{cmd: cmd, containerID: fmt.Sprintf("par-%02d", i), netns: nss[i], ifName: "eth0", conf: conf})
			}()
		}
		wg.Wait()
		return outs
	}
	seen := map[string]bool{}
	for i, o := range all("ADD") {
		o.mustOK(t, fmt.Sprintf("parallel ADD %d", i))
		for _, a := range addrsOf(t, o.stdout) {
			if seen[a.String()] {
				t.Errorf("address %s handed out twice", a)
			}
			seen[a.String()] = true
		}
	}
	if len(seen) != 2*pods || len(n.records()) != pods || len(n.hostLinks()) != pods {
		t.Errorf("%d addresses, %d records, %d links; want %d, %d, %d", len(seen), len(n.records()), len(n.hostLinks()), 2*pods, pods, pods)
	}
	for i, o := range all("DEL") {
		o.mustOK(t, fmt.Sprintf("parallel DEL %d", i))
	}
	n.assertEmpty("after parallel DEL")
}

// TestDelegatedIPAM uses host-local through ipam.type, including rollback of
// its allocation when the ADD fails later.
func TestDelegatedIPAM(t *testing.T) {
	n := newNode(t)
	pod := newNetNS(t)
	dataDir := filepath.Join(t.TempDir(), "host-local")
	conf := n.conf("1.0.0", map[string]any{"ipam": map[string]any{
		"type": "host-local", "dataDir": dataDir,
		"ranges": [][]map[string]string{{{"subnet": "10.93.0.0/24"}}},
	}})
	res := n.run(call{cmd: "ADD", containerID: "delegated", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD")
	a := addrsOf(t, res.stdout)
	if len(a) != 1 || !strings.HasPrefix(a[0].String(), "10.93.0.") {
		t.Fatalf("addresses %v, want one from 10.93.0.0/24", a)
	}
	if !strings.Contains(string(res.stdout), a[0].String()+"/32") {
		t.Errorf("result should carry %s/32: %s", a[0], res.stdout)
	}
	n.run(call{cmd: "CHECK", containerID: "delegated", netns: pod.Path(), ifName: "eth0", conf: withPrev(t, conf, res.stdout)}).mustOK(t, "CHECK")
	// A second ADD on the same interface fails without releasing the live
	// pod's address.
	o := n.run(call{cmd: "ADD", containerID: "delegated-2", netns: pod.Path(), ifName: "eth0", conf: conf})
	if o.exitCode == 0 {
		t.Fatal("second ADD onto an existing eth0 succeeded")
	}
	mustContain(t, "duplicate ADD", o.cniErr.Msg, "eth0 already exists")
	n.run(call{cmd: "DEL", containerID: "delegated", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "DEL")
	entries, _ := os.ReadDir(filepath.Join(dataDir, "routelet-test"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "10.93.") {
			t.Errorf("host-local still holds %s after DEL", e.Name())
		}
	}
	n.assertEmpty("after DEL")
}

// TestFailedAddRollsBack makes the pod side fail after the address was
// allocated and the veth created and configured on the host (the pod's
// namespace has IPv6 disabled, so its IPv6 address is refused), and checks
// that everything is undone.
func TestFailedAddRollsBack(t *testing.T) {
	n := newNode(t)
	pod := newNetNS(t)
	err := pod.Do(func(ns.NetNS) error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	conf := n.conf("1.0.0", nil)
	o := n.run(call{cmd: "ADD", containerID: "rollback", netns: pod.Path(), ifName: "eth0", conf: conf})
	if o.exitCode == 0 {
		t.Fatalf("ADD of an IPv6 address into a namespace without IPv6 succeeded: %s", o.stdout)
	}
	mustContain(t, "error", o.cniErr.Msg, "fd90::1/128", "eth0")
	n.assertEmpty("after failed ADD")
	if pv, err := podnet.InspectPod(pod.Path(), "eth0"); err != nil || pv.Exists {
		t.Errorf("pod netns has eth0 after failed ADD (err %v)", err)
	}
}

// TestRequestedIP: the ips capability and CNI_ARGS IP= pick the addresses.
func TestRequestedIP(t *testing.T) {
	n := newNode(t)
	pod := newNetNS(t)
	conf := n.conf("1.0.0", map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.90.0.42/26"}}})
	res := n.run(call{cmd: "ADD", containerID: "wants-ip", netns: pod.Path(), ifName: "eth0", args: "IgnoreUnknown=1;IP=fd90::2a", conf: conf}).mustOK(t, "ADD")
	if got := fmt.Sprint(addrsOf(t, res.stdout)); got != "[10.90.0.42 fd90::2a]" {
		t.Errorf("addresses %s, want [10.90.0.42 fd90::2a]", got)
	}
	// The same address for a second attachment: busy, try again later.
	other := newNetNS(t)
	o := n.run(call{cmd: "ADD", containerID: "wants-same", netns: other.Path(), ifName: "eth0", conf: conf})
	if o.exitCode == 0 || o.cniErr.Code != types.ErrTryAgainLater {
		t.Fatalf("second ADD for 10.90.0.42: exit %d %s, want code 11", o.exitCode, o.stdout)
	}
	mustContain(t, "in-use message", o.cniErr.Msg, "10.90.0.42")
	n.run(call{cmd: "DEL", containerID: "wants-ip", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "DEL")
	n.run(call{cmd: "DEL", containerID: "wants-same", netns: other.Path(), ifName: "eth0", conf: conf}).mustOK(t, "DEL of the failed one")
	n.assertEmpty("after DEL")
}

// holdDaemonLock takes the lock a running routeletd holds on its state
// directory (an exclusive flock on routeletd.lock, as the daemon takes it)
// and returns its release.
func holdDaemonLock(t testing.TB, stateDir string) (release func()) {
	t.Helper()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(stateDir, "routeletd.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", f.Name(), err)
	}
	return func() { f.Close() }
}
