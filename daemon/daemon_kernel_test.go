package main

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

const v4 = netlink.FAMILY_V4

// TestDaemon walks one node through a daemon's life: waiting for its
// identity, readiness, plugin ADD, tampering, unexpected routes, bad records,
// DEL, leak collection and SIGTERM.
func TestDaemon(t *testing.T) {
	tn := newTestNode(t, false)

	// A workload that exists before the daemon starts: only the daemon can
	// program its route (the record is written without one).
	tn.addVeth("caliearly0", "pearly0")
	tn.addRecord("early", "caliearly0", "/var/run/netns/does-not-matter", "10.244.7.200/32", "fd00:7::c8/128")

	d := tn.startDaemon("--leak-grace-period=2s")

	// No default route yet: the node IP cannot be detected, so not ready.
	netnstest.Eventually(t, 10*time.Second, "health server", func() bool { _, _, err := tn.get("/healthz"); return err == nil })
	netnstest.Eventually(t, 5*time.Second, "daemon.json saying why not ready", func() bool {
		st, err := tn.store.ReadDaemonStatus()
		return err == nil && !st.Ready && strings.Contains(st.Reason, "node IP")
	})
	if code, body, _ := tn.get("/readyz"); code != 503 || !strings.Contains(body, "node IP") {
		t.Fatalf("/readyz without node IP = %d %q, want 503 naming the node IP", code, body)
	}
	if code, _, _ := tn.get("/healthz"); code != 200 {
		t.Errorf("/healthz while waiting = %d, want 200", code)
	}
	if tn.hasRoute(v4, "10.244.7.200/32 caliearly0 proto 80") {
		t.Fatal("route programmed before the first sync")
	}

	tn.addDefaultRoute()
	tn.waitReady()
	// Ready means synced: the pre-existing workload's route and the block's
	// blackhole are already there.
	if !tn.hasRoute(v4, "10.244.7.200/32 caliearly0 proto 80") {
		t.Errorf("ready before the route of an existing record was programmed: %v", tn.routes(v4))
	}
	if !tn.hasRoute(netlink.FAMILY_V6, "fd00:7::c8/128 caliearly0 proto 80") {
		t.Errorf("ready before the IPv6 route of an existing record was programmed: %v", tn.routes(netlink.FAMILY_V6))
	}
	if !tn.hasRoute(v4, "10.244.7.0/24 blackhole proto 80") {
		t.Errorf("no blackhole for the local block: %v", tn.routes(v4))
	}
	st, err := tn.store.ReadDaemonStatus()
	if err != nil || !st.Ready || len(st.Blocks) != 1 || st.Blocks[0] != "10.244.7.0/24" || st.PodMTU != 1500 {
		t.Errorf("daemon.json = %+v, %v", st, err)
	}
	self, err := tn.store.GetNode("node-a")
	if err != nil || self.HostIPv4 != "192.0.2.10" || len(self.Blocks) != 1 {
		t.Errorf("own node record = %+v, %v", self, err)
	}

	t.Run("plugin ADD route is managed and repaired", func(t *testing.T) {
		p := tn.addPod("pod1")
		route := p.ip + " " + p.iface + " proto 80"
		netnstest.Eventually(t, 2*time.Second, "pod route", func() bool { return tn.hasRoute(v4, route) })
		netnstest.Eventually(t, 2*time.Second, "daemon serving the pod", func() bool { return tn.metric("routelet_workloads") == "2" })
		// Delete it as an operator would; the daemon must put it back.
		if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "route", "del", p.ip, "dev", p.iface); err != nil {
			t.Fatalf("ip route del: %v %s", err, out)
		}
		netnstest.Eventually(t, time.Second, "route repaired within 1s", func() bool { return tn.hasRoute(v4, route) })
		// Same for the blackhole.
		if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "route", "del", "blackhole", "10.244.7.0/24"); err != nil {
			t.Fatalf("ip route del blackhole: %v %s", err, out)
		}
		netnstest.Eventually(t, time.Second, "blackhole repaired within 1s", func() bool { return tn.hasRoute(v4, "10.244.7.0/24 blackhole proto 80") })
		// And for the static ARP entry of a workload route.
		permanent := func() bool {
			l, err := tn.nl.LinkByName("caliearly0")
			if err != nil {
				return false
			}
			ns, _ := tn.nl.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
			for _, n := range ns {
				if n.IP.String() == "10.244.7.200" && n.State&netlink.NUD_PERMANENT != 0 && n.HardwareAddr.String() == "02:00:00:00:00:01" {
					return true
				}
			}
			return false
		}
		netnstest.Eventually(t, time.Second, "static ARP entry", permanent)
		if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "neigh", "del", "10.244.7.200", "dev", "caliearly0"); err != nil {
			t.Fatalf("ip neigh del: %v %s", err, out)
		}
		netnstest.Eventually(t, time.Second, "static ARP entry repaired within 1s", permanent)
	})

	t.Run("unexpected route on a cali veth removed after the grace period", func(t *testing.T) {
		// The grace period runs from when the daemon first saw the
		// interface, so it is measured from before the veth was made.
		added := time.Now()
		tn.addVeth("calistray0", "pstray0")
		if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "route", "add", "10.99.0.1/32", "dev", "calistray0", "proto", "boot"); err != nil {
			t.Fatalf("ip route add: %v %s", err, out)
		}
		// The grace period (1s) protects it first...
		time.Sleep(200 * time.Millisecond)
		if time.Since(added) < 900*time.Millisecond && !tn.hasRoute(v4, "10.99.0.1/32 calistray0 proto 3") {
			t.Error("unexpected route removed inside the grace period")
		}
		// ...then it goes.
		netnstest.Eventually(t, 5*time.Second, "stray route removed", func() bool { return !tn.hasRoute(v4, "10.99.0.1/32 calistray0 proto 3") })
		if time.Since(added) < time.Second {
			t.Errorf("stray route removed after %s, before the 1s grace period", time.Since(added))
		}
	})

	t.Run("bad records are skipped and the others served", func(t *testing.T) {
		dir := tn.store.WorkloadsDir()
		os.WriteFile(filepath.Join(dir, "corrupt_eth0.json"), []byte("{this is not json"), 0o600)
		os.WriteFile(filepath.Join(dir, "future_eth0.json"), []byte(`{"version":7,"containerID":"future","ifName":"eth0","hostIface":"califuture0","ips":["10.244.7.201/32"]}`), 0o600)
		tn.addVeth("caligood0", "pgood0")
		tn.addRecord("good", "caligood0", "/var/run/netns/x", "10.244.7.202/32")
		netnstest.Eventually(t, 2*time.Second, "good record served", func() bool { return tn.hasRoute(v4, "10.244.7.202/32 caligood0 proto 80") })
		netnstest.Eventually(t, 2*time.Second, "bad records logged", func() bool {
			l := d.log.String()
			return strings.Contains(l, "corrupt_eth0.json") && strings.Contains(l, "future_eth0.json") && strings.Contains(l, "version 7")
		})
		if !tn.hasRoute(v4, "10.244.7.200/32 caliearly0 proto 80") {
			t.Error("an older good record stopped being served")
		}
		os.Remove(filepath.Join(dir, "corrupt_eth0.json"))
		os.Remove(filepath.Join(dir, "future_eth0.json"))
	})

	t.Run("plugin DEL route gone", func(t *testing.T) {
		before := tn.metric("routelet_workloads")
		p := tn.addPod("pod2")
		route := p.ip + " " + p.iface + " proto 80"
		netnstest.Eventually(t, 2*time.Second, "pod2 served", func() bool {
			return tn.hasRoute(v4, route) && tn.metric("routelet_workloads") != before
		})
		tn.delPod(p)
		netnstest.Eventually(t, 2*time.Second, "daemon saw the DEL", func() bool { return tn.metric("routelet_workloads") == before })
		if tn.hasRoute(v4, route) {
			t.Errorf("route %s still there after DEL", route)
		}
	})

	t.Run("leak collection after the grace period only", func(t *testing.T) {
		p := tn.addPod("leaky")
		netnstest.Eventually(t, 2*time.Second, "leaky served", func() bool { return tn.hasRoute(v4, p.ip+" "+p.iface+" proto 80") })
		alloc, err := ipam.New(filepath.Join(tn.stateDir, "ipam"), []netip.Prefix{netip.MustParsePrefix(tn.podCIDR)}, ipam.Options{})
		if err != nil {
			t.Fatal(err)
		}
		att := ipam.Attachment{ContainerID: "leaky", IfName: "eth0"}
		if got, _ := alloc.Get(context.Background(), att); len(got) != 1 {
			t.Fatalf("allocation before the leak: %v", got)
		}
		// The pod's netns vanishes without a DEL: its veth goes with it.
		if err := netnstest.Remove(p.ns); err != nil {
			t.Fatal(err)
		}
		gone := time.Now()
		netnstest.Eventually(t, 2*time.Second, "veth gone", func() bool { _, err := tn.nl.LinkByName(p.iface); return err != nil })
		time.Sleep(500 * time.Millisecond)
		if _, err := tn.store.GetWorkload("leaky", "eth0"); err != nil && time.Since(gone) < 2*time.Second {
			t.Fatalf("record released %s after the netns vanished, before the 2s grace: %v", time.Since(gone), err)
		}
		netnstest.Eventually(t, 8*time.Second, "leak collected", func() bool {
			_, err := tn.store.GetWorkload("leaky", "eth0")
			return errors.Is(err, state.ErrNotFound)
		})
		if since := time.Since(gone); since < 2*time.Second {
			t.Errorf("collected after %s, before the 2s leak grace period", since)
		}
		if got, err := alloc.Get(context.Background(), att); err != nil || len(got) != 0 {
			t.Errorf("address not released: %v %v", got, err)
		}
		// The record goes first, then the log line and the metric.
		netnstest.Eventually(t, 2*time.Second, "leak metric and log line", func() bool {
			return tn.metric("routelet_leak_collections_total") == "1" && strings.Contains(d.log.String(), "released leaked workload")
		})
		// Live pods were not touched.
		if _, err := tn.store.GetWorkload("pod1", "eth0"); err != nil {
			t.Errorf("live pod1's record: %v", err)
		}
		if _, err := tn.store.GetWorkload("early", "eth0"); err != nil {
			t.Errorf("live early's record (netns path missing, veth alive): %v", err)
		}
	})

	t.Run("SIGTERM stops cleanly and leaves routes", func(t *testing.T) {
		if err := d.stop(t); err != nil {
			t.Fatalf("exit after SIGTERM: %v\n", err)
		}
		if !tn.hasRoute(v4, "10.244.7.200/32 caliearly0 proto 80") || !tn.hasRoute(v4, "10.244.7.0/24 blackhole proto 80") {
			t.Errorf("routes removed on stop: %v", tn.routes(v4))
		}
		st, err := tn.store.ReadDaemonStatus()
		if err != nil || st.Ready {
			t.Errorf("daemon.json after stop = %+v, %v; want not ready", st, err)
		}
	})
}

// TestRestartKeepsLiveRoutes kills the daemon with SIGKILL and restarts it
// with 50 live workloads while a poller watches the kernel: none of their
// routes may ever be missing.
func TestRestartKeepsLiveRoutes(t *testing.T) {
	tn := newTestNode(t, true)
	const n = 50
	want := make([]string, n)
	for i := range n {
		iface := "calirs" + itoa(i)
		tn.addVeth(iface, "prs"+itoa(i))
		ip := "10.244.7." + itoa(i+10)
		tn.addRecord("rs"+itoa(i), iface, "/var/run/netns/rs"+itoa(i), ip+"/32")
		want[i] = ip + "/32 " + iface + " proto 80"
	}
	d := tn.startDaemon("--resync-period=500ms")
	tn.waitReady()
	for _, w := range want {
		if !tn.hasRoute(v4, w) {
			t.Fatalf("route %s missing after first sync", w)
		}
	}

	var polls, missing, listErrs atomic.Int64
	var firstMissing atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rs, err := tn.listRoutes(v4)
			if err != nil {
				listErrs.Add(1)
				continue
			}
			polls.Add(1)
			for _, w := range want {
				if !rs[w] {
					missing.Add(1)
					firstMissing.CompareAndSwap(nil, w)
				}
			}
		}
	}()
	d.kill9(t)
	time.Sleep(100 * time.Millisecond)
	tn.startDaemon("--resync-period=500ms")
	tn.waitReady()
	// Keep watching past the grace period and a few resyncs of the new daemon.
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if listErrs.Load() > 0 {
		t.Errorf("%d route listings failed during the restart", listErrs.Load())
	}
	if polls.Load() < 10 {
		t.Fatalf("only %d polls: the check saw too little", polls.Load())
	}
	if m := missing.Load(); m != 0 {
		t.Errorf("%d route observations missing across the restart (first: %v) in %d polls", m, firstMissing.Load(), polls.Load())
	}
	t.Logf("%d polls of %d routes across kill -9 and restart, none missing", polls.Load(), n)
}

// TestCleanupCommand runs `routeletd cleanup` after a daemon stopped: every
// route with routelet's protocol, the recorded cali veths and the state go;
// the node's own routes stay.
func TestCleanupCommand(t *testing.T) {
	tn := newTestNode(t, true)
	p := tn.addPod("c1")
	d := tn.startDaemon()
	tn.waitReady()
	netnstest.Eventually(t, 2*time.Second, "routes", func() bool {
		return tn.hasRoute(v4, p.ip+" "+p.iface+" proto 80") && tn.hasRoute(v4, "10.244.7.0/24 blackhole proto 80")
	})
	// While the daemon runs, a second daemon and cleanup both refuse.
	out, err := netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"),
		"--state-dir="+tn.stateDir, "--node-name=node-a", "--health-addr=127.0.0.1:9098")
	if err == nil || !strings.Contains(out, "another routeletd is running") {
		t.Errorf("second daemon on the same state dir: %v\n%s", err, out)
	}
	out, err = netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
		"--state-dir="+tn.stateDir, "--node-name=node-a")
	if err == nil || !strings.Contains(out, "stop routeletd first") {
		t.Errorf("cleanup while the daemon runs: %v\n%s", err, out)
	}
	if !tn.hasRoute(v4, p.ip+" "+p.iface+" proto 80") {
		t.Fatal("refused cleanup removed a route")
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	// A foreign route (another protocol) on a non-routelet device must stay.
	if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "route", "add", "198.51.100.0/24", "via", "192.0.2.1", "proto", "static"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	out, err = netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
		"--state-dir="+tn.stateDir, "--node-name=node-a")
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	for r := range tn.routes(v4) {
		if strings.HasSuffix(r, "proto 80") {
			t.Errorf("route %s left behind", r)
		}
	}
	if !tn.hasRoute(v4, "198.51.100.0/24 up0 proto 4") || !tn.hasRoute(v4, "192.0.2.0/24 up0 proto 2") {
		t.Errorf("foreign routes touched: %v", tn.routes(v4))
	}
	if _, err := tn.nl.LinkByName(p.iface); err == nil {
		t.Errorf("veth %s left behind", p.iface)
	}
	if _, err := os.Stat(tn.stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir left behind: %v", err)
	}
}

// TestRouteProtocolAgreesWithPlugin runs the daemon with --route-protocol=81
// and the real plugin: the plugin reads the protocol from daemon.json, so the
// host route carries 81 from ADD on, the daemon's syncs leave it so, CNI
// CHECK passes, and `routeletd cleanup` with the same protocol removes it.
func TestRouteProtocolAgreesWithPlugin(t *testing.T) {
	tn := newTestNode(t, true)
	d := tn.startDaemon("--route-protocol=81", "--resync-period=300ms")
	tn.waitReady()
	st, err := tn.store.ReadDaemonStatus()
	if err != nil || st.RouteProtocol != 81 {
		t.Fatalf("daemon.json = %+v, %v; want routeProtocol 81", st, err)
	}

	p := tn.addPod("proto81")
	route := p.ip + " " + p.iface + " proto 81"
	if !tn.hasRoute(v4, route) {
		t.Fatalf("after ADD: no %s; routes %v", route, tn.routes(v4))
	}
	ctx := context.Background()
	if err := tn.node.Check(ctx, tn.conf, p.rt); err != nil {
		t.Errorf("CNI CHECK after ADD: %v", err)
	}

	// Let the daemon serve the pod and run two full resyncs after the ADD.
	netnstest.Eventually(t, 5*time.Second, "daemon serving the pod", func() bool { return tn.metric("routelet_workloads") == "1" })
	resyncs := func() int { n, _ := strconv.Atoi(tn.metric("routelet_resync_duration_seconds_count")); return n }
	base := resyncs()
	netnstest.Eventually(t, 5*time.Second, "two resyncs", func() bool { return resyncs() >= base+2 })
	rs := tn.routes(v4)
	if !rs[route] {
		t.Errorf("after the daemon's sync: no %s; routes %v", route, rs)
	}
	for r := range rs {
		if strings.HasPrefix(r, p.ip+" ") && r != route {
			t.Errorf("after the daemon's sync: extra route %s", r)
		}
	}
	if !rs["10.244.7.0/24 blackhole proto 81"] {
		t.Errorf("no blackhole with proto 81: %v", rs)
	}
	if err := tn.node.Check(ctx, tn.conf, p.rt); err != nil {
		t.Errorf("CNI CHECK after the daemon's sync: %v", err)
	}

	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	out, err := netnstest.Exec(ctx, tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
		"--state-dir="+tn.stateDir, "--node-name=node-a", "--route-protocol=81")
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	for r := range tn.routes(v4) {
		if strings.HasSuffix(r, " proto 81") || strings.HasSuffix(r, " proto 80") {
			t.Errorf("route %s left behind by cleanup --route-protocol=81", r)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestBGPASPublished: with bgp on, this node's record carries its AS
// (bgp-as) as bgpAS; with bgp off it carries none.
func TestBGPASPublished(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--bgp", "--bgp-as=4200000001"}, 4200000001},
		{[]string{"--bgp-as=4200000001"}, 0},
	} {
		tn := newTestNode(t, true)
		d := tn.startDaemon(tc.args...)
		tn.waitReady()
		self, err := tn.store.GetNode("node-a")
		if err != nil || self.BGPAS != tc.want {
			t.Errorf("%v: own node record = %+v, %v; want bgpAS %d", tc.args, self, err, tc.want)
		}
		if err := d.stop(t); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
}
