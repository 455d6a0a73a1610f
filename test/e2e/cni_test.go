package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

// specVersions are the CNI spec versions routelet supports.
var specVersions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// TestLifecycle walks two pods through the life a runtime gives them, for
// every spec version: ADD, pod↔pod ping through the host routes, CHECK, DEL,
// DEL again, DEL with the netns already gone, ADD after DEL.
func TestLifecycle(t *testing.T) {
	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, v)
			a, b := newPod(t, "pod-a"), newPod(t, "pod-b")
			attA := e.add(t, a)
			attB := e.add(t, b)
			if attA.ips[0] == attB.ips[0] {
				t.Fatalf("both pods got %s", attA.ips[0])
			}
			netnstest.CheckPing(t, a.ns, attB.ips[0].String())
			netnstest.CheckPing(t, b.ns, attA.ips[0].String())

			if v != "0.3.1" { // CHECK exists from 0.4.0 on
				for _, p := range []*pod{a, b} {
					if err := e.node.Check(ctx, e.list, p.rt); err != nil {
						t.Errorf("CHECK %s: %v", p.name, err)
					}
				}
				// An operator deletes pod-b's host route: CHECK must say so.
				restore := e.deleteHostRoute(t, attB.ips[0])
				err := e.node.Check(ctx, e.list, b.rt)
				if err == nil || !strings.Contains(err.Error(), attB.ips[0].String()) {
					t.Errorf("CHECK pod-b without its host route: %v, want an error naming %s", err, attB.ips[0])
				}
				restore()
				if err := e.node.Check(ctx, e.list, b.rt); err != nil {
					t.Errorf("CHECK pod-b with its host route back: %v", err)
				}
			}

			if err := e.node.Del(ctx, e.list, a.rt); err != nil {
				t.Fatalf("DEL pod-a: %v", err)
			}
			e.checkDetached(t, a, attA)
			if err := e.node.Del(ctx, e.list, a.rt); err != nil {
				t.Errorf("second DEL pod-a: %v", err)
			}
			// pod-b keeps working while pod-a comes and goes.
			if _, ok := e.hostView(t).routes[attB.ips[0]]; !ok {
				t.Errorf("pod-b's host route %s vanished with pod-a's DEL", attB.ips[0])
			}

			// The runtime may DEL after the sandbox is already gone.
			if err := netnstest.Remove(b.ns); err != nil {
				t.Fatal(err)
			}
			if err := e.node.Del(ctx, e.list, b.rt); err != nil {
				t.Errorf("DEL pod-b with its netns gone: %v", err)
			}
			e.checkDetached(t, b, attB)

			// ADD after DEL: same sandbox, same IDs, working again.
			again := e.add(t, a)
			c := newPod(t, "pod-c")
			attC := e.add(t, c)
			netnstest.CheckPing(t, a.ns, attC.ips[0].String())
			netnstest.CheckPing(t, c.ns, again.ips[0].String())
			for _, p := range []*pod{a, c} {
				if err := e.node.Del(ctx, e.list, p.rt); err != nil {
					t.Errorf("final DEL %s: %v", p.name, err)
				}
			}
		})
	}
}

// deleteHostRoute removes the node's route to ip, as a careless operator
// might, and returns a function that puts it back.
func (e *env) deleteHostRoute(t *testing.T, ip netip.Addr) (restore func()) {
	t.Helper()
	r, ok := e.hostView(t).routes[ip]
	if !ok {
		t.Fatalf("no host route to %s to delete", ip)
	}
	if err := e.node.NS.Do(func(ns.NetNS) error { return netlink.RouteDel(&r) }); err != nil {
		t.Fatalf("deleting host route %s: %v", ip, err)
	}
	return func() {
		t.Helper()
		if err := e.node.NS.Do(func(ns.NetNS) error { return netlink.RouteAdd(&r) }); err != nil {
			t.Fatalf("restoring host route %s: %v", ip, err)
		}
	}
}

// TestParallelAddDel runs 32 ADDs at once, each its own libcni call and
// plugin process, then 32 DELs at once.
func TestParallelAddDel(t *testing.T) {
	const n = 32
	ctx := context.Background()
	e := newEnv(t, "1.1.0")
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = newPod(t, fmt.Sprintf("par-%02d", i))
	}
	results := make([]types.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.node.Add(ctx, e.list, p.rt)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("parallel ADD: %v", err)
	}
	seen := map[netip.Addr]string{}
	atts := make([]attachment, n)
	for i, p := range pods {
		atts[i] = e.checkAttached(t, p, results[i])
		ip := atts[i].ips[0]
		if other, dup := seen[ip]; dup {
			t.Errorf("%s and %s both got %s", other, p.name, ip)
		}
		seen[ip] = p.name
	}
	v := e.hostView(t)
	if len(v.cali) != n || len(v.routes) != n {
		t.Errorf("node has %d cali veths and %d host routes, want %d each", len(v.cali), len(v.routes), n)
	}
	recs, err := filepath.Glob(filepath.Join(e.stateDir, "workloads", "*.json"))
	if err != nil || len(recs) != n {
		t.Errorf("%d workload records (%v), want %d", len(recs), err, n)
	}
	if got := len(e.allocations(t)); got != n {
		t.Errorf("IPAM holds %d attachments, want %d", got, n)
	}
	netnstest.CheckPing(t, pods[0].ns, atts[n-1].ips[0].String())

	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.node.Del(ctx, e.list, p.rt)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("parallel DEL: %v", err)
	}
	v = e.hostView(t)
	if len(v.cali) != 0 || len(v.routes) != 0 {
		t.Errorf("after DEL the node still has cali veths %v and host routes %v", keys(v.cali), v.routes)
	}
	recs, _ = filepath.Glob(filepath.Join(e.stateDir, "workloads", "*"))
	if len(recs) != 0 {
		t.Errorf("after DEL workload records remain: %v", recs)
	}
	if got := e.allocations(t); len(got) != 0 {
		t.Errorf("after DEL IPAM still holds %v", got)
	}
}

// TestDualStack gives pods an IPv4 and an IPv6 address and pings over both.
// The pings come right after ADD, before anything else: when ADD returns the
// pod must be reachable, as a runtime starts the workload at once.
func TestDualStack(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "1.0.0", "10.244.0.0/24", "fd00:244::/120")
	a, b := newPod(t, "ds-a"), newPod(t, "ds-b")
	resA, err := e.node.Add(ctx, e.list, a.rt)
	if err != nil {
		t.Fatalf("ADD %s: %v", a.name, err)
	}
	resB, err := e.node.Add(ctx, e.list, b.rt)
	if err != nil {
		t.Fatalf("ADD %s: %v", b.name, err)
	}
	ipA, ipB := resultIPs(t, resA), resultIPs(t, resB)
	if len(ipA) != 2 || len(ipB) != 2 {
		t.Fatalf("ADD results give %v and %v, want an IPv4 and an IPv6 address each", ipA, ipB)
	}
	for i := range ipA {
		netnstest.CheckPing(t, a.ns, ipB[len(ipB)-1-i].String()) // v6 first
		netnstest.CheckPing(t, b.ns, ipA[len(ipA)-1-i].String())
	}
	attA, attB := e.checkAttached(t, a, resA), e.checkAttached(t, b, resB)
	if !attA.ip(true).IsValid() || !attB.ip(true).IsValid() {
		t.Fatalf("no IPv6 address: %v %v", attA.ips, attB.ips)
	}
	for _, p := range []*pod{a, b} {
		if err := e.node.Check(ctx, e.list, p.rt); err != nil {
			t.Errorf("CHECK %s: %v", p.name, err)
		}
		if err := e.node.Del(ctx, e.list, p.rt); err != nil {
			t.Errorf("DEL %s: %v", p.name, err)
		}
	}
	e.checkDetached(t, a, attA)
	e.checkDetached(t, b, attB)
}

// resultIPs returns the addresses of an ADD result, IPv4 before IPv6.
func resultIPs(t *testing.T, raw types.Result) []netip.Addr {
	t.Helper()
	res, err := types100.NewResultFromResult(raw)
	if err != nil {
		t.Fatal(err)
	}
	var ips []netip.Addr
	for _, ipc := range res.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		ips = append(ips, a.Unmap())
	}
	slices.SortFunc(ips, func(x, y netip.Addr) int { return x.Compare(y) })
	return ips
}

// TestGC attaches three pods, then runs libcni GC with only the first in the
// valid-attachments list. libcni's own cache is empty for the GC call (a new
// cache dir, as after a runtime restart), so the plugin's GC alone must find
// and remove the two stale attachments, and leave the valid one intact.
func TestGC(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "1.1.0")
	keep, stale1, stale2 := newPod(t, "gc-keep"), newPod(t, "gc-stale1"), newPod(t, "gc-stale2")
	attKeep, att1, att2 := e.add(t, keep), e.add(t, stale1), e.add(t, stale2)

	gcNode := &netnstest.Node{NS: e.node.NS, CNI: libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, t.TempDir(), nil)}
	valid := []types.GCAttachment{{ContainerID: keep.rt.ContainerID, IfName: keep.rt.IfName}}
	if err := gcNode.GC(ctx, e.list, valid); err != nil {
		t.Fatalf("GC: %v", err)
	}
	e.checkDetached(t, stale1, att1)
	e.checkDetached(t, stale2, att2)
	e.checkHost(t, keep, attKeep)
	e.checkRecord(t, keep, attKeep)
	att := ipam.Attachment{ContainerID: keep.rt.ContainerID, IfName: keep.rt.IfName}
	if got := e.allocations(t)[att]; len(got) != 1 || got[0].Addr != attKeep.ips[0] {
		t.Errorf("after GC IPAM holds %v for the valid attachment, want %s", got, attKeep.ips[0])
	}
	if err := e.node.Check(ctx, e.list, keep.rt); err != nil {
		t.Errorf("CHECK of the valid attachment after GC: %v", err)
	}
}

// TestStatus: STATUS fails with code 50 without daemon.json, with a
// not-ready one, and with a ready one that no running daemon stands behind.
func TestStatus(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "1.1.0")
	wantCode := func(err error, code uint, what string) {
		t.Helper()
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != code {
			t.Errorf("STATUS %s: %v, want CNI error code %d", what, err, code)
		}
	}
	wantCode(e.node.Status(ctx, e.list), types.ErrPluginNotAvailable, "without daemon.json")

	st, err := state.Open(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	// Held as routeletd holds it (TestStatusFollowsDaemon runs the real one).
	lock, err := os.OpenFile(filepath.Join(e.stateDir, "routeletd.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteDaemonStatus(&state.DaemonStatus{Version: 1, Ready: false, Reason: "routes not synced yet"}); err != nil {
		t.Fatal(err)
	}
	err = e.node.Status(ctx, e.list)
	wantCode(err, types.ErrPluginNotAvailable, "with a not-ready daemon.json")
	if err != nil && !strings.Contains(err.Error(), "routes not synced yet") {
		t.Errorf("STATUS not ready: %q does not give the daemon's reason", err)
	}

	if err := st.WriteDaemonStatus(&state.DaemonStatus{Version: 1, Ready: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.Status(ctx, e.list); err != nil {
		t.Errorf("STATUS with a ready daemon.json: %v", err)
	}
	lock.Close()
	err = e.node.Status(ctx, e.list)
	wantCode(err, types.ErrPluginNotAvailable, "with a ready daemon.json but no daemon holding its lock")
	if err != nil && !strings.Contains(err.Error(), "routeletd is not running") {
		t.Errorf("STATUS without a daemon: %q does not say routeletd is not running", err)
	}
}

// TestStatusFollowsDaemon runs a real routeletd in the node: STATUS becomes
// ready once it is, and is not ready (code 50, "routeletd is not running")
// as soon as the daemon is killed, although its daemon.json still says
// ready.
func TestStatusFollowsDaemon(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "1.1.0", "10.244.3.0/24")
	daemon := routeletdBin(t)
	for _, args := range [][]string{
		{"ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1"},
		{"ip", "link", "set", "up0", "up"},
		{"ip", "link", "set", "up1", "up"},
		{"ip", "addr", "add", "192.0.2.10/24", "dev", "up0"},
		{"ip", "route", "add", "default", "via", "192.0.2.1", "dev", "up0"},
	} {
		if out, err := netnstest.Exec(ctx, e.node.NS, args[0], args[1:]...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	log := &netnstest.Buffer{}
	p, err := netnstest.StartIn(e.node.NS, log, daemon, "--node-name=status-node", "--state-dir="+e.stateDir,
		"--pod-cidr=10.244.3.0/24", "--encapsulation=none", "--health-addr=")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("routeletd log:\n%s", log.String())
		}
	})
	netnstest.WaitFor(t, 30*time.Second, "STATUS ready after routeletd started", func() error { return e.node.Status(ctx, e.list) })
	p.Kill()
	st, err := state.Open(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := st.ReadDaemonStatus(); err != nil || !ds.Ready {
		t.Fatalf("daemon.json after the kill: %+v, %v; the test needs it still saying ready", ds, err)
	}
	err = e.node.Status(ctx, e.list)
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrPluginNotAvailable || !strings.Contains(ce.Msg, "routeletd is not running") {
		t.Errorf("STATUS after routeletd was killed: %v, want code 50 saying routeletd is not running", err)
	}
}

// TestPortmapChained runs routelet chained with portmap, the shape of the
// example conflist in conf/: the DNAT rule appears with ADD and goes with DEL.
func TestPortmapChained(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "1.0.0")
	e.conf.Portmap = true
	e.list = mustList(t, e.conf)
	p := newPod(t, "web")
	p.rt.CapabilityArgs = map[string]any{"portMappings": []map[string]any{
		{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"},
	}}
	att := e.add(t, p)
	dnat := fmt.Sprintf("%s:80", att.ips[0])
	rules := func() string {
		out, err := netnstest.Exec(ctx, e.node.NS, "iptables-save", "-t", "nat")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if r := rules(); !strings.Contains(r, dnat) || !strings.Contains(r, "18080") {
		t.Errorf("after ADD the node's nat table has no DNAT 18080 → %s:\n%s", dnat, r)
	}
	if err := e.node.Check(ctx, e.list, p.rt); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := e.node.Del(ctx, e.list, p.rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	e.checkDetached(t, p, att)
	if r := rules(); strings.Contains(r, dnat) {
		t.Errorf("after DEL the node's nat table still DNATs to %s:\n%s", dnat, r)
	}
}

// TestNodeNamespaceOnly guards the tests themselves: plugins run in the node
// namespace, never in the machine's own. The host's links must not gain a
// cali veth while a pod is attached.
func TestNodeNamespaceOnly(t *testing.T) {
	e := newEnv(t, "1.1.0")
	p := newPod(t, "guard")
	att := e.add(t, p)
	if _, err := os.Stat("/sys/class/net/" + att.hostIface); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host veth %s appeared in the machine's own namespace (%v)", att.hostIface, err)
	}
	if err := e.node.Del(context.Background(), e.list, p.rt); err != nil {
		t.Errorf("DEL: %v", err)
	}
}
