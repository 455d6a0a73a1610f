package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// binDir holds routeletd and the routelet plugin, built once in TestMain.
var binDir string

// nsPrefix names every namespace these tests create, so leftovers of a
// crashed run can be removed.
const nsPrefix = "rltd-"

// whyRoot is what the privileged tests and benchmarks need root for
// (netnstest.SkipUnlessRoot).
const whyRoot = "creates network namespaces and runs routeletd in them"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if code, ok := netnstest.SquatMain(); ok {
		return code // a helper process of a test, not the tests
	}
	defer netnstest.RemoveBins()
	names := []string{netnstest.Routeletd}
	if os.Geteuid() == 0 {
		names = append(names, netnstest.Routelet)
	}
	dir, err := netnstest.BuildBins(names...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n", err)
		return 1
	}
	binDir = dir
	return m.Run()
}

// testNode is a fresh "node" network namespace with an uplink, a state dir,
// a libcni handle for the plugin and a netlink handle for looking inside.
type testNode struct {
	t        testing.TB
	node     *netnstest.Node
	nl       *netlink.Handle
	stateDir string
	store    *state.Store
	conf     *libcni.NetworkConfigList
	podCIDR  string
}

// newTestNode creates the node namespace with uplink up0 (192.0.2.10/24) and,
// when withDefault, a default route through it.
func newTestNode(t testing.TB, withDefault bool) *testNode {
	t.Helper()
	netnstest.SkipUnlessRoot(t, whyRoot)
	name := fmt.Sprintf("%s%d", nsPrefix, time.Now().UnixNano()%1e9)
	cache := t.TempDir()
	node, err := netnstest.NewNode(name, []string{binDir}, cache)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	nl := netnstest.HandleFor(t, node.NS)
	tn := &testNode{t: t, node: node, nl: nl, stateDir: filepath.Join(t.TempDir(), "state"), podCIDR: "10.244.7.0/24"}
	up0, err := netnstest.AddVeth(nl, "up0", "up1")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("192.0.2.10/24")
	if err := nl.AddrAdd(up0, addr); err != nil {
		t.Fatal(err)
	}
	if withDefault {
		tn.addDefaultRoute()
	}
	tn.setStateDir(tn.stateDir)
	return tn
}

// setStateDir makes dir the node's state directory: the store the test
// writes records through and the conflist the plugin gets.
func (tn *testNode) setStateDir(dir string) {
	tn.t.Helper()
	var err error
	tn.stateDir = dir
	if tn.store, err = state.Open(dir); err != nil {
		tn.t.Fatal(err)
	}
	if tn.conf, err = (netnstest.RouteletConf{Name: "routelet", CNIVersion: "1.1.0", StateDir: dir, Blocks: []string{tn.podCIDR}}).ConfList(); err != nil {
		tn.t.Fatal(err)
	}
}

func (tn *testNode) addDefaultRoute() {
	tn.t.Helper()
	up0, err := tn.nl.LinkByName("up0")
	if err != nil {
		tn.t.Fatal(err)
	}
	if err := tn.nl.RouteAdd(&netlink.Route{LinkIndex: up0.Attrs().Index, Gw: net.ParseIP("192.0.2.1")}); err != nil {
		tn.t.Fatal(err)
	}
}

// daemonProc is a routeletd running in a test node.
type daemonProc struct {
	proc *netnstest.Proc
	log  *netnstest.Buffer
}

// startDaemon runs routeletd in the node with `ip netns exec`, test-sized
// periods and extra flags; it is killed at cleanup and its log is printed
// when the test failed.
func (tn *testNode) startDaemon(extra ...string) *daemonProc {
	tn.t.Helper()
	args := append([]string{"--node-name=node-a", "--state-dir=" + tn.stateDir, "--pod-cidr=" + tn.podCIDR,
		"--encapsulation=none", "--log-level=debug", "--grace-period=1s",
		"--device-check-period=200ms", "--resync-period=30s"}, extra...)
	d := &daemonProc{log: &netnstest.Buffer{}}
	var err error
	if d.proc, err = netnstest.StartIn(tn.node.NS, d.log, filepath.Join(binDir, "routeletd"), args...); err != nil {
		tn.t.Fatal(err)
	}
	t := tn.t
	t.Cleanup(func() {
		d.proc.Kill()
		if t.Failed() {
			t.Logf("routeletd log:\n%s", d.log.String())
		}
	})
	return d
}

// stop sends SIGTERM and waits for the exit status.
func (d *daemonProc) stop(t testing.TB) error {
	t.Helper()
	err := d.proc.Stop(10 * time.Second)
	if errors.Is(err, netnstest.ErrStillRunning) {
		t.Fatal("routeletd did not stop within 10s of SIGTERM")
	}
	return err
}

// kill9 kills the daemon outright.
func (d *daemonProc) kill9(t testing.TB) {
	t.Helper()
	d.proc.Kill()
}

// get fetches path from the daemon's health server inside the node; the
// connection is dialled on a thread in the node namespace.
func (tn *testNode) get(path string) (int, string, error) {
	return netnstest.HTTPGet(tn.node.NS, "http://127.0.0.1:9099"+path)
}

// metric returns the value line of a metric (e.g. "routelet_workloads").
func (tn *testNode) metric(name string) string {
	_, body, err := tn.get("/metrics")
	if err != nil {
		return ""
	}
	v, _ := netnstest.MetricValue(body, name)
	return v
}

// waitReady polls /readyz until 200.
func (tn *testNode) waitReady() {
	tn.t.Helper()
	netnstest.Eventually(tn.t, netnstest.ReadyTimeout, "daemon ready", func() bool {
		code, _, err := tn.get("/readyz")
		return err == nil && code == 200
	})
}

// routes returns the node's main-table routes of family with routelet's
// protocol, as "cidr dev" strings ("blackhole" for no device).
func (tn *testNode) routes(family int) map[string]bool {
	tn.t.Helper()
	out, err := tn.listRoutes(family)
	if err != nil {
		tn.t.Fatal(err)
	}
	return out
}

// listRoutes is routes without failing the test, for use off the test
// goroutine.
func (tn *testNode) listRoutes(family int) (map[string]bool, error) {
	rs, err := tn.nl.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		dev := "blackhole"
		if r.LinkIndex != 0 {
			l, err := tn.nl.LinkByIndex(r.LinkIndex)
			if err != nil {
				continue
			}
			dev = l.Attrs().Name
		}
		out[fmt.Sprintf("%s %s proto %d", r.Dst, dev, r.Protocol)] = true
	}
	return out, nil
}

func (tn *testNode) hasRoute(family int, s string) bool { return tn.routes(family)[s] }

// addVeth creates a host veth named name in the node with its peer (named
// peer) left in the node too, both up: a stand-in for a pod's attachment.
func (tn *testNode) addVeth(name, peer string) {
	tn.t.Helper()
	if _, err := netnstest.AddVeth(tn.nl, name, peer); err != nil {
		tn.t.Fatal(err)
	}
}

// addRecord writes a workload record as the plugin would.
func (tn *testNode) addRecord(cid, hostIface, netnsPath string, ips ...string) {
	tn.t.Helper()
	err := tn.store.PutWorkload(&state.Workload{ContainerID: cid, IfName: "eth0", HostIface: hostIface, Netns: netnsPath,
		IPs: ips, ContainerMAC: "02:00:00:00:00:01", Created: time.Now()})
	if err != nil {
		tn.t.Fatal(err)
	}
}

// pod is a workload added through the plugin.
type pod struct {
	ns    ns.NetNS
	rt    *libcni.RuntimeConf
	iface string
	ip    string
}

// addPod creates a pod namespace and runs CNI ADD through the built plugin.
func (tn *testNode) addPod(cid string) *pod {
	tn.t.Helper()
	pns, err := netnstest.New(nsPrefix + "pod-")
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.t.Cleanup(func() { netnstest.Remove(pns) })
	rt := &libcni.RuntimeConf{ContainerID: cid, NetNS: pns.Path(), IfName: "eth0"}
	if _, err := tn.node.Add(context.Background(), tn.conf, rt); err != nil {
		tn.t.Fatalf("CNI ADD %s: %v", cid, err)
	}
	w, err := tn.store.GetWorkload(cid, "eth0")
	if err != nil {
		tn.t.Fatalf("record after ADD: %v", err)
	}
	return &pod{ns: pns, rt: rt, iface: w.HostIface, ip: w.IPs[0]}
}

func (tn *testNode) delPod(p *pod) {
	tn.t.Helper()
	if err := tn.node.Del(context.Background(), tn.conf, p.rt); err != nil {
		tn.t.Fatalf("CNI DEL %s: %v", p.rt.ContainerID, err)
	}
}

// exitCode returns the exit status of a finished command's error.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// runIn runs the built routeletd with args inside the node; stdout and
// stderr apart (JSON on stdout, logs on stderr).
func (tn *testNode) runIn(args ...string) (stdout, stderr string, code int) {
	tn.t.Helper()
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tn.node.NS.Do(func(ns.NetNS) error {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "routeletd"), args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		return cmd.Run()
	})
	return out.String(), errb.String(), exitCode(err)
}
