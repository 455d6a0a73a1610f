package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/google/nftables"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/state"
)

// guards opens the pod guards of the node's namespace.
func (tn *testNode) guards() *podguard.Guards {
	tn.t.Helper()
	g, err := podguard.New(nftables.WithNetNSFd(int(tn.node.NS.Fd())))
	if err != nil {
		tn.t.Fatal(err)
	}
	tn.t.Cleanup(func() { g.Close() })
	return g
}

// sandbox is one sandbox of a Kubernetes pod added through the plugin: the
// pod's name gives the host veth its name, whatever the container ID.
type sandbox struct {
	*pod
	rec *state.Workload
}

// addSandbox creates a pod namespace and runs CNI ADD for container cid of
// pod default/name.
func (tn *testNode) addSandbox(cid, name string) *sandbox {
	tn.t.Helper()
	pns := netnstest.NewFor(tn.t, nsPrefix+"pod-")
	rt := &libcni.RuntimeConf{ContainerID: cid, NetNS: pns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}}}
	if _, err := tn.node.Add(context.Background(), tn.conf, rt); err != nil {
		tn.t.Fatalf("CNI ADD %s: %v", cid, err)
	}
	w, err := tn.store.GetWorkload(cid, "eth0")
	if err != nil {
		tn.t.Fatalf("record after ADD: %v", err)
	}
	return &sandbox{pod: &pod{ns: pns, rt: rt, iface: w.HostIface, ip: w.IPs[0]}, rec: w}
}

// addrOf is the address of a record's CIDR.
func addrOf(t testing.TB, cidr string) netip.Addr {
	t.Helper()
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return p.Addr()
}

// TestRecreatedSandboxOwnsGuard: a pod's sandbox made again (same pod name,
// so the same host veth name; a new container ID and address) while the
// old sandbox's record stays, the old record's file name sorting after the
// new one's. The daemon's guard of the veth holds the new sandbox's
// address: its own traffic passes and the old address is dropped at the
// veth; no route of the old address points at the new pod.
func TestRecreatedSandboxOwnsGuard(t *testing.T) {
	tn := newTestNode(t, true)
	tn.startDaemon("--allowlist-check-period=200ms")
	tn.waitReady()
	old := tn.addSandbox("zz-old-sandbox", "web")
	netnstest.Eventually(t, 10*time.Second, "the daemon serves the first sandbox", func() bool {
		return tn.metric("routelet_workloads") == "1"
	})
	cur := tn.addSandbox("aa-new-sandbox", "web")
	if cur.iface != old.iface || cur.ip == old.ip {
		t.Fatalf("second sandbox: veth %s address %s; want veth %s and an address other than %s", cur.iface, cur.ip, old.iface, old.ip)
	}
	if _, err := tn.store.GetWorkload(old.rt.ContainerID, "eth0"); err != nil {
		t.Fatalf("the old sandbox's record is gone (%v): the test needs it to stay", err)
	}
	netnstest.Eventually(t, 10*time.Second, "the daemon read both records", func() bool {
		return tn.metric("routelet_workloads") == "2"
	})
	// The guard the daemon writes now is the one it wants: remove it and
	// wait for it to be put back.
	g := tn.guards()
	if err := g.Remove(cur.iface); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 10*time.Second, "the daemon rewrote the guard of "+cur.iface, func() bool {
		have, err := g.Chains()
		return err == nil && have[cur.iface] != nil
	})
	spec := podguard.Spec{Device: cur.iface, Addrs: []netip.Addr{addrOf(t, cur.ip)}}
	if st, err := g.Read(spec, nil); err != nil || st != podguard.OK {
		t.Errorf("guard of %s: %v, %v; want it to hold the new sandbox's %s only", cur.iface, st, err, cur.ip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := netnstest.Ping(ctx, cur.ns, "192.0.2.10", 3); err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("the new sandbox's own traffic: %v\n%s", err, out)
	}
	before, err := g.Drops(cur.iface)
	if err != nil {
		t.Fatal(err)
	}
	oldIP := addrOf(t, old.ip).String()
	if _, err := netnstest.Exec(ctx, cur.ns, "ip", "addr", "add", oldIP+"/32", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	out, _ := netnstest.Ping(ctx, cur.ns, "192.0.2.10", 3, "-I", oldIP)
	if !strings.Contains(out, " 0 received") {
		t.Errorf("the new sandbox got answers from the old sandbox's address %s:\n%s", oldIP, out)
	}
	if after, err := g.Drops(cur.iface); err != nil || after.Spoof4 < before.Spoof4+3 {
		t.Errorf("IPv4 source drops on %s: %d before, %d after (%v); want the 3 echo requests from %s", cur.iface, before.Spoof4, after.Spoof4, err, oldIP)
	}
	oldRoute := fmt.Sprintf("%s %s proto 80", old.ip, cur.iface)
	netnstest.Eventually(t, 10*time.Second, "only the new sandbox's address routed to "+cur.iface, func() bool {
		rs := tn.routes(v4)
		return rs[fmt.Sprintf("%s %s proto 80", cur.ip, cur.iface)] && !rs[oldRoute]
	})
}

// TestUnreadableLiveRecordKeepsPod: a live pod's record emptied in place
// is written back from the daemon's last good read, and the pod keeps its
// route and its traffic; one rewritten by another release (an unknown
// version) is left as it is and served as last read through resyncs; and a
// daemon started with that record, which it never read whole, still
// leaves the pod's route and guard alone.
func TestUnreadableLiveRecordKeepsPod(t *testing.T) {
	tn := newTestNode(t, true)
	d := tn.startDaemon("--resync-period=1s")
	tn.waitReady()
	p := tn.addPod("live")
	route := fmt.Sprintf("%s %s proto 80", p.ip, p.iface)
	path := filepath.Join(tn.store.WorkloadsDir(), state.AttachmentName("live", "eth0")+".json")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	resyncs := func() int { n, _ := strconv.Atoi(tn.metric("routelet_resync_duration_seconds_count")); return n }
	reachable := func(when string) {
		t.Helper()
		if !tn.hasRoute(v4, route) {
			t.Errorf("%s: route %s gone", when, route)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := netnstest.Ping(ctx, p.ns, "192.0.2.10", 3); err != nil || !strings.Contains(out, " 0% packet loss") {
			t.Errorf("%s: the pod's traffic: %v\n%s", when, err, out)
		}
	}
	netnstest.Eventually(t, 10*time.Second, "the daemon serves the pod", func() bool { return tn.metric("routelet_workloads") == "1" })
	reachable("before")

	n := resyncs()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 30*time.Second, "two resyncs after the record was emptied", func() bool { return resyncs() >= n+2 })
	reachable("after the record was emptied")
	if w, err := tn.store.GetWorkload("live", "eth0"); err != nil || w.HostIface != p.iface || len(w.IPs) != 1 || w.IPs[0] != p.ip {
		t.Errorf("the emptied record after two resyncs: %+v, %v; want it written back (%s on %s)", w, err, p.ip, p.iface)
		if err := os.WriteFile(path, good, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	future := strings.Replace(string(good), `"version": 1`, `"version": 2`, 1)
	if future == string(good) {
		t.Fatalf("no version field in %s", good)
	}
	if err := os.WriteFile(path, []byte(future), 0o600); err != nil {
		t.Fatal(err)
	}
	n = resyncs()
	netnstest.Eventually(t, 30*time.Second, "two resyncs with a record of another version", func() bool { return resyncs() >= n+2 })
	reachable("with a record of another version")
	if data, _ := os.ReadFile(path); string(data) != future {
		t.Errorf("the daemon rewrote a record of another version:\n%s", data)
	}
	if v := tn.metric("routelet_bad_records"); v != "1" {
		t.Errorf("routelet_bad_records %q with a record of another version, want 1", v)
	}

	// A new daemon never read this record whole: it keeps what the
	// kernel holds on the pod's veth, past the grace period.
	d.kill9(t)
	tn.startDaemon("--resync-period=1s")
	tn.waitReady()
	netnstest.Eventually(t, 30*time.Second, "two resyncs of the new daemon", func() bool { return resyncs() >= 2 })
	reachable("after a restart with a record of another version")
	if v := tn.metric("routelet_bad_records"); v != "1" {
		t.Errorf("routelet_bad_records %q after the restart, want 1", v)
	}
	// Readable again, the record is served as before.
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 30*time.Second, "the record served again", func() bool {
		return tn.metric("routelet_workloads") == "1" && tn.metric("routelet_bad_records") == "0"
	})
	reachable("with the record readable again")
}
