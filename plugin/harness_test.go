package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

func TestMain(m *testing.M) {
	code := m.Run()
	netnstest.RemoveBins()
	os.Exit(code)
}

// pluginDir builds the binaries on first use and returns their directory
// (used as CNI_PATH).
func pluginDir(t testing.TB) string {
	t.Helper()
	return netnstest.Bins(t, netnstest.Routelet, netnstest.HostLocalPackage)
}

// newNetNS creates a network namespace removed when the test ends.
func newNetNS(t testing.TB) ns.NetNS {
	t.Helper()
	return netnstest.NewT(t).NetNS
}

// node is a simulated node: a network namespace the plugin runs in and a
// state directory.
type node struct {
	t        testing.TB
	ns       ns.NetNS
	stateDir string
	bin      string
}

func newNode(t testing.TB) *node {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "runs the plugin in fresh network namespaces")
	return &node{t: t, ns: newNetNS(t), stateDir: filepath.Join(t.TempDir(), "state"), bin: pluginDir(t)}
}

// call is one plugin invocation.
type call struct {
	cmd, containerID, netns, ifName, args string
	env                                   map[string]string // extra or overriding variables ("" removes)
	conf                                  []byte
	// timeout, when set, runs the plugin in its own process group, which
	// gets SIGKILL (the plugin and everything it started) once it passes.
	timeout time.Duration
}

// outcome is what the plugin printed and how it exited.
type outcome struct {
	stdout, stderr []byte
	exitCode       int
	cniErr         *types.Error // decoded from stdout when exitCode != 0
	timedOut       bool         // killed after call.timeout
}

// run execs the plugin binary with CNI variables and stdin, from a thread
// inside the node namespace (the child inherits that namespace).
func (n *node) run(c call) outcome {
	n.t.Helper()
	env := map[string]string{
		"CNI_COMMAND":     c.cmd,
		"CNI_CONTAINERID": c.containerID,
		"CNI_NETNS":       c.netns,
		"CNI_IFNAME":      c.ifName,
		"CNI_ARGS":        c.args,
		"CNI_PATH":        n.bin,
		"PATH":            os.Getenv("PATH"),
	}
	for k, v := range c.env {
		env[k] = v
	}
	var envList []string
	for k, v := range env {
		if v != "" {
			envList = append(envList, k+"="+v)
		}
	}
	var o outcome
	err := n.ns.Do(func(ns.NetNS) error {
		cmd := exec.Command(filepath.Join(n.bin, "routelet"))
		cmd.Env = envList
		cmd.Stdin = bytes.NewReader(c.conf)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		var err error
		if c.timeout > 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err = cmd.Start(); err != nil {
				return err
			}
			pgid := cmd.Process.Pid
			timer := time.AfterFunc(c.timeout, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
			err = cmd.Wait()
			if !timer.Stop() {
				// Fired: descendants may outlive the leader, kill the group again.
				o.timedOut = true
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		} else {
			err = cmd.Run()
		}
		o.stdout, o.stderr = stdout.Bytes(), stderr.Bytes()
		if o.timedOut {
			return nil
		}
		if ee, ok := err.(*exec.ExitError); ok {
			o.exitCode = ee.ExitCode()
			return nil
		}
		return err
	})
	if err != nil {
		n.t.Fatalf("run plugin %s: %v", c.cmd, err)
	}
	if o.exitCode != 0 && !o.timedOut {
		o.cniErr = &types.Error{}
		if err := json.Unmarshal(o.stdout, o.cniErr); err != nil {
			n.t.Fatalf("plugin %s exited %d with non-JSON stdout %q (stderr %q)", c.cmd, o.exitCode, o.stdout, o.stderr)
		}
	}
	return o
}

// mustOK fails the test unless the plugin succeeded.
func (o outcome) mustOK(t testing.TB, what string) outcome {
	t.Helper()
	if o.exitCode != 0 {
		t.Fatalf("%s: exit %d: %s (stderr %s)", what, o.exitCode, o.stdout, o.stderr)
	}
	return o
}

// conf renders a network config for this node.
func (n *node) conf(version string, extra map[string]any) []byte {
	m := map[string]any{
		"cniVersion": version,
		"name":       "routelet-test",
		"type":       "routelet",
		"stateDir":   n.stateDir,
		"ipam":       map[string]any{"blocks": []string{"10.90.0.0/26", "fd90::/122"}},
	}
	for k, v := range extra {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// withPrev adds prevResult to a config (for CHECK).
func withPrev(t testing.TB, conf, prev []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	var p any
	if err := json.Unmarshal(prev, &p); err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = p
	b, _ := json.Marshal(m)
	return b
}

// hostLinks lists the node's links other than lo and the kernel's own
// fallback devices (tunl0 and the like, there whenever their module is).
func (n *node) hostLinks() []string {
	n.t.Helper()
	names, err := netnstest.MadeLinks(n.ns)
	if err != nil {
		n.t.Fatal(err)
	}
	return names
}

// proto80Routes lists the node's routes with protocol 80.
func (n *node) proto80Routes() []string {
	n.t.Helper()
	var out []string
	err := n.ns.Do(func(ns.NetNS) error {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: 80}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return err
		}
		for _, r := range rs {
			out = append(out, r.Dst.String())
		}
		return nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// records lists the workload records in the node's state directory.
func (n *node) records() []*state.Workload {
	n.t.Helper()
	if _, err := os.Stat(n.stateDir); os.IsNotExist(err) {
		return nil
	}
	st, err := state.Open(n.stateDir)
	if err != nil {
		n.t.Fatal(err)
	}
	good, bad := st.ListWorkloads()
	if len(bad) > 0 {
		n.t.Errorf("bad records: %v", bad)
	}
	return good
}

// allocations lists the built-in IPAM's attachments.
func (n *node) allocations() map[ipam.Attachment][]ipam.Allocation {
	n.t.Helper()
	dir := filepath.Join(n.stateDir, "ipam")
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	a, err := ipam.New(dir, nil, ipam.Options{})
	if err != nil {
		n.t.Fatal(err)
	}
	m, err := a.List(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	return m
}

// assertEmpty checks that nothing of routelet's is left on the node.
func (n *node) assertEmpty(what string) {
	n.t.Helper()
	if l := n.hostLinks(); len(l) > 0 {
		n.t.Errorf("%s: links left in node netns: %v", what, l)
	}
	if r := n.proto80Routes(); len(r) > 0 {
		n.t.Errorf("%s: proto 80 routes left: %v", what, r)
	}
	if r := n.records(); len(r) > 0 {
		n.t.Errorf("%s: workload records left: %d (first %s/%s)", what, len(r), r[0].ContainerID, r[0].IfName)
	}
	if a := n.allocations(); len(a) > 0 {
		n.t.Errorf("%s: allocations left: %v", what, a)
	}
	if c := n.guardChains(); len(c) > 0 {
		n.t.Errorf("%s: pod guard chains left: %v", what, c)
	}
}

// addrsOf pulls the addresses out of an ADD result (any version).
func addrsOf(t testing.TB, out []byte) []netip.Addr {
	t.Helper()
	var r struct {
		IPs []struct{ Address string }
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("parse result %s: %v", out, err)
	}
	var as []netip.Addr
	for _, ip := range r.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			t.Fatalf("result address %q: %v", ip.Address, err)
		}
		as = append(as, p.Addr())
	}
	return as
}

// hostIfOf returns the host interface named in an ADD result.
func hostIfOf(t testing.TB, out []byte) string {
	t.Helper()
	var r struct {
		Interfaces []struct{ Name, Sandbox string }
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	for _, i := range r.Interfaces {
		if i.Sandbox == "" {
			return i.Name
		}
	}
	t.Fatalf("no host interface in %s", out)
	return ""
}

func mustContain(t testing.TB, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s: %q does not contain %q", what, s, sub)
		}
	}
}

// execInNS runs a command from a thread inside the namespace at path.
func execInNS(path string, args ...string) ([]byte, error) {
	var out []byte
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		out, err = exec.Command(args[0], args[1:]...).CombinedOutput()
		return err
	})
	return out, err
}
