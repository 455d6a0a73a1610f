package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// benchNode sets up a node with n workload veths (calib<i>, peers pb<i>),
// each with what the plugin's ADD writes before the record: the settings
// (podnet.HostSysctls) and the pod guard for its address (benchIP), as a
// pod's veth has.
func benchNode(b *testing.B, n int) *testNode {
	tn := newTestNode(b, true)
	for i := range n {
		tn.addVeth("calib"+strconv.Itoa(i), "pb"+strconv.Itoa(i))
	}
	err := tn.node.NS.Do(func(ns.NetNS) error {
		g, err := podguard.New()
		if err != nil {
			return err
		}
		defer g.Close()
		for i := range n {
			veth := "calib" + strconv.Itoa(i)
			if _, err := podnet.EnsureSysctls(podnet.HostSysctls(veth, false)); err != nil {
				return err
			}
			if _, err := g.Ensure(podguard.Spec{Device: veth, Addrs: []netip.Addr{netip.MustParseAddr(benchIP(i))}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return tn
}

// benchIP is the i-th workload address inside 10.244.7.0/24 and
// 10.244.8.0/24 (the bench node's blocks).
func benchIP(i int) string { return fmt.Sprintf("10.244.%d.%d", 7+i/200, 10+i%200) }

// writeRecord writes a workload record the way the plugin does (temp file,
// then rename) and returns the moment of the rename.
func writeRecord(b *testing.B, tn *testNode, i int) time.Time {
	w := &state.Workload{Version: state.RecordVersion, ContainerID: "b" + strconv.Itoa(i), IfName: "eth0",
		HostIface: "calib" + strconv.Itoa(i), Netns: "/var/run/netns/bench", IPs: []string{benchIP(i) + "/32"},
		ContainerMAC: "02:00:00:00:00:01", Created: time.Now()}
	data := fmt.Appendf(nil, `{"version":1,"containerID":%q,"ifName":"eth0","hostIface":%q,"netns":%q,"ips":[%q],"containerMAC":%q,"created":%q}`,
		w.ContainerID, w.HostIface, w.Netns, w.IPs[0], w.ContainerMAC, w.Created.Format(time.RFC3339Nano))
	dir := tn.store.WorkloadsDir()
	tmp := filepath.Join(dir, ".tmp-bench")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := os.Rename(tmp, filepath.Join(dir, state.AttachmentName(w.ContainerID, w.IfName)+".json")); err != nil {
		b.Fatal(err)
	}
	return t0
}

// BenchmarkRecordToRoute measures, for 200 workload records written one at a
// time, the time from the record file's rename to the netlink notification
// of its route (RTM_NEWROUTE with routelet's protocol) in the node.
func BenchmarkRecordToRoute(b *testing.B) {
	netnstest.SkipUnlessRoot(b, whyRoot)
	const n = 200
	tn := benchNode(b, n)
	tn.startDaemon("--log-level=info", "--pod-cidr=10.244.8.0/24")
	tn.waitReady()
	// Measure the steady state: wait out the route grace period (1s
	// here) of the veths the daemon found at start.
	time.Sleep(1500 * time.Millisecond)

	ch := subscribeRoutes(b, tn)
	for it := 0; it < b.N; it++ {
		lat := make([]time.Duration, 0, n)
		for i := range n {
			t0 := writeRecord(b, tn, i)
			lat = append(lat, waitRoute(b, ch, benchIP(i)+"/32", t0, 5*time.Second))
		}
		// Clean up for the next iteration: records and their routes go.
		for i := range n {
			tn.store.DeleteWorkload("b"+strconv.Itoa(i), "eth0")
		}
		netnstest.Eventually(b, 10*time.Second, "routes removed", func() bool {
			return !tn.hasRoute(netlink.FAMILY_V4, benchIP(n-1)+"/32 calib"+strconv.Itoa(n-1)+" proto 80")
		})
		for i, l := range lat {
			if l > 5*time.Millisecond {
				b.Logf("slow: record %d took %s", i, l)
			}
		}
		sortDurations(lat)
		p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
		b.ReportMetric(float64(p(0.50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
		b.Logf("record→route over %d records: p50 %s p99 %s max %s", n, p(0.5), p(0.99), lat[len(lat)-1])
	}
}

// subscribeRoutes subscribes to tn's route notifications until b ends, on
// a socket with an 8 MiB receive buffer (the daemon's), so a burst of
// 1,000 routes fits while the bench is slow to read on a loaded machine.
func subscribeRoutes(b *testing.B, tn *testNode) <-chan netlink.RouteUpdate {
	h, err := netns.GetFromPath(tn.node.NS.Path())
	if err != nil {
		b.Fatal(err)
	}
	ch := make(chan netlink.RouteUpdate, 1<<16)
	done := make(chan struct{})
	err = netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &h, ReceiveBufferSize: 8 << 20, ReceiveBufferForceSize: true,
		ErrorCallback: func(err error) {
			select {
			case <-done: // closing the socket at the end
			default:
				b.Logf("route subscription: %v", err)
			}
		}})
	h.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { close(done) })
	return ch
}

// waitRoute waits for the netlink notification of a new routelet route
// to want and returns how long after t0 it came; none within timeout
// fails b.
func waitRoute(b *testing.B, ch <-chan netlink.RouteUpdate, want string, t0 time.Time, timeout time.Duration) time.Duration {
	return awaitRoute(b, ch, timeout, "to "+want, func(u netlink.RouteUpdate) bool {
		return u.Type == unix.RTM_NEWROUTE && u.Dst != nil && u.Dst.String() == want && u.Protocol == 80
	}).Sub(t0)
}

// BenchmarkIdle250 runs the daemon with 250 workloads and measures its RSS
// and CPU use over 60 s of idling (no events, default resync period).
// ROUTELET_BENCH_IDLE overrides the idle duration (e.g. "10s").
func BenchmarkIdle250(b *testing.B) {
	netnstest.SkipUnlessRoot(b, whyRoot)
	const n = 250
	idle := 60 * time.Second
	if s := os.Getenv("ROUTELET_BENCH_IDLE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("ROUTELET_BENCH_IDLE=%q: %v", s, err)
		}
		idle = d
	}
	tn := benchNode(b, n)
	for i := range n {
		writeRecord(b, tn, i)
	}
	d := tn.startDaemon("--log-level=info", "--pod-cidr=10.244.8.0/24", "--resync-period=90s", "--device-check-period=10s")
	tn.waitReady()
	netnstest.Eventually(b, 10*time.Second, "all routes", func() bool { return tn.metric("routelet_routes_programmed{table=\"ipv4\"}") == strconv.Itoa(n+2) })
	time.Sleep(2 * time.Second) // let start-up work settle
	for it := 0; it < b.N; it++ {
		pid := d.proc.Cmd.Process.Pid
		cpu0 := cpuTicks(b, pid)
		t0 := time.Now()
		time.Sleep(idle)
		cpu := time.Duration(cpuTicks(b, pid)-cpu0) * time.Second / 100 // USER_HZ is 100 on Linux
		rss := rssKiB(b, pid)
		el := time.Since(t0)
		b.ReportMetric(float64(rss)/1024, "rss-MiB")
		b.ReportMetric(float64(cpu.Milliseconds()), "cpu-ms")
		b.ReportMetric(100*cpu.Seconds()/el.Seconds(), "cpu-%")
		b.Logf("%d workloads, idle %s: RSS %.1f MiB, CPU %s (%.3f%%)", n, el.Round(time.Second), float64(rss)/1024, cpu, 100*cpu.Seconds()/el.Seconds())
	}
}

// cpuTicks returns utime+stime of pid in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may contain spaces) start at ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// rssKiB returns VmRSS of pid.
func rssKiB(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			v, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return v
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// The 1,000-peer datastore benchmarks (BenchmarkEtcdPeers1000,
// BenchmarkNodes1000) share one harness: a peerBench per datastore, the
// same peers, the same start and change measurements, the same file
// datastore baseline in the same run (comparePeers).
const (
	benchPeers   = 1000 // peers each datastore holds
	benchChanges = 100  // single-peer changes the latencies are taken over
)

// benchPeer is peer i's record: host 172.16.x.y (behind the bench node's
// default route), block 10.128.0.0/9's i-th /24, VTEP MAC
// 02:00:00:00:hi:lo, tunnel address the block's first (moved: its second)
// address. A change moves the tunnel address: the one value every
// datastore can change in place (a Node's podCIDRs cannot).
func benchPeer(i int, moved bool) *state.Node {
	prefix := fmt.Sprintf("10.%d.%d.", 128+i/256, i%256)
	tunnel := prefix + "0"
	if moved {
		tunnel = prefix + "1"
	}
	return &state.Node{Version: state.RecordVersion, Name: fmt.Sprintf("peer-%04d", i),
		HostIPv4: fmt.Sprintf("172.16.%d.%d", i/250, 1+i%250), Blocks: []string{prefix + "0/24"},
		VTEPMAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), TunnelIPv4: tunnel, Updated: time.Now().UTC()}
}

// vxlanRoutes counts the routelet routes through vxlan.calico in tn.
func vxlanRoutes(tn *testNode) int {
	l, err := tn.nl.LinkByName("vxlan.calico")
	if err != nil {
		return 0
	}
	rs, err := tn.nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: l.Attrs().Index, Protocol: 80},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return 0
	}
	return len(rs)
}

// peerBench is one node under test with its benchPeers peers in one
// datastore.
type peerBench struct {
	tn   *testNode
	args []string                      // the daemon's datastore flags
	fill func()                        // stores every peer (nil: put each)
	put  func(n *state.Node) time.Time // stores a peer's record; returns when the datastore acknowledged it
	// delivered, when set, returns when the datastore delivered the
	// change of peer name to tunnel address tunnel to its watchers (the
	// API server's watch event), waiting up to timeout.
	delivered func(name, tunnel string, timeout time.Duration) (time.Time, error)

	d      *daemonProc
	routes <-chan netlink.RouteUpdate
}

// tmpfsNode is a test node whose state directory is on tmpfs, as
// routeletd's default /run/routelet is: on the test's disk temp directory
// every record and claim-ledger write would pay an fsync that a node never
// pays.
func tmpfsNode(b *testing.B) *testNode {
	tn := newTestNode(b, true)
	dir, err := os.MkdirTemp("/dev/shm", "routelet-bench-")
	if err != nil {
		b.Fatalf("state directory on tmpfs: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	tn.setStateDir(filepath.Join(dir, "state"))
	return tn
}

// fileBench is a node whose peers are files in nodes/.
func fileBench(b *testing.B) *peerBench {
	tn := tmpfsNode(b)
	return &peerBench{tn: tn, put: func(n *state.Node) time.Time {
		if err := tn.store.PutNode(n); err != nil {
			b.Fatal(err)
		}
		return time.Now()
	}}
}

// etcdBench is a node whose peers are in an etcd running in its namespace.
func etcdBench(b *testing.B) *peerBench {
	tn := tmpfsNode(b)
	srv := etcdtest.Start(b, etcdtest.Options{NetNS: tn.node.NS})
	cli := srv.Client(b)
	b.Cleanup(func() { cli.Close() })
	return &peerBench{tn: tn, args: []string{"--datastore=etcd", "--etcd-endpoints=http://127.0.0.1:2379"}, put: func(n *state.Node) time.Time {
		data, err := state.EncodeNode(n)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Put(context.Background(), "/routelet/nodes/"+n.Name, string(data)); err != nil {
			b.Fatal(err)
		}
		return time.Now()
	}}
}

// start stores the peers, starts the daemon and returns how long it took
// from the start until every peer's route was in the kernel. The device
// check runs at its default period and the resync at 90 s: the harness's
// test-sized periods would re-read every peer's ARP and FDB entries and
// routes several times a second, and the changes would measure that
// rather than their own path.
func (pb *peerBench) start(b *testing.B) time.Duration {
	if pb.fill != nil {
		pb.fill()
	} else {
		for i := range benchPeers {
			pb.put(benchPeer(i, false))
		}
	}
	pb.routes = subscribeRoutes(b, pb.tn)
	t0 := time.Now()
	pb.d = pb.tn.startDaemon(append([]string{"--log-level=info", "--encapsulation=vxlan", "--device-check-period=10s", "--resync-period=90s"}, pb.args...)...)
	seen := map[string]bool{}
	deadline := time.After(5 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var took time.Duration
	for took == 0 {
		select {
		case u := <-pb.routes:
			if u.Type == unix.RTM_NEWROUTE && u.Protocol == 80 && u.Gw != nil && u.Dst != nil && u.Dst.IP[0] == 10 && u.Dst.IP[1] >= 128 {
				seen[u.Dst.String()] = true
			}
			if len(seen) == benchPeers {
				took = time.Since(t0)
			}
		case <-tick.C:
			// Notifications lost all the same: count the routes.
			if n := vxlanRoutes(pb.tn); n >= benchPeers {
				took = time.Since(t0)
				b.Logf("%d of %d peer routes notified; all in the kernel after %s (to a second)", len(seen), benchPeers, took)
			}
		case <-deadline:
			b.Fatalf("%d of %d peer routes after 5 minutes; log:\n%s", vxlanRoutes(pb.tn), benchPeers, pb.d.log.String())
		}
	}
	pb.tn.waitReady()
	return took
}

// change moves peer i's tunnel address and returns the times from the
// stored write and (with delivered) from the datastore's event to the
// netlink notification of the route through the new address.
func (pb *peerBench) change(b *testing.B, i int) (fromStored, fromEvent time.Duration) {
	rec := benchPeer(i, true)
	gw := net.ParseIP(rec.TunnelIPv4)
	for len(pb.routes) > 0 { // what earlier changes left
		<-pb.routes
	}
	t0 := pb.put(rec)
	at := awaitRoute(b, pb.routes, 30*time.Second, rec.Blocks[0]+" via "+rec.TunnelIPv4, func(u netlink.RouteUpdate) bool {
		return u.Type == unix.RTM_NEWROUTE && u.Dst != nil && u.Dst.String() == rec.Blocks[0] && u.Gw.Equal(gw)
	})
	if pb.delivered != nil {
		ev, err := pb.delivered(rec.Name, rec.TunnelIPv4, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		fromEvent = at.Sub(ev)
	}
	return at.Sub(t0), fromEvent
}

// awaitRoute returns when the first route update on ch that match accepts
// arrived; none within timeout fails b (what names the route).
func awaitRoute(b *testing.B, ch <-chan netlink.RouteUpdate, timeout time.Duration, what string, match func(netlink.RouteUpdate) bool) time.Time {
	deadline := time.After(timeout)
	for {
		select {
		case u := <-ch:
			if match(u) {
				return time.Now()
			}
		case <-deadline:
			b.Fatalf("no route %s within %s", what, timeout)
		}
	}
}

// peerRun is one datastore's numbers from comparePeers.
type peerRun struct {
	pb                *peerBench      // the last round's
	starts            []time.Duration // daemon start → every peer's route, each round, sorted
	start             time.Duration   // their median
	stored, delivered []time.Duration // one change → its route, from the stored write and from the datastore's event, sorted
	cpu               time.Duration   // the daemon's CPU time (user and system) per change
	mem               memBreakdown    // after the changes, settled
}

// comparePeers runs the 1,000-peer bench of each datastore mk makes, in
// one run: rounds starts of each (a fresh node, datastore and daemon each
// round, the order rotated every round); then benchChanges single-peer
// changes, taking turns between the datastores so each meets the same
// load on the machine; then each daemon's memory. The daemon's CPU time
// per change is less sensitive than the latencies to what else the
// machine runs.
func comparePeers(b *testing.B, rounds int, mk ...func(*testing.B) *peerBench) []peerRun {
	runs := make([]peerRun, len(mk))
	for r := range rounds {
		for k := range mk {
			j := (k + r) % len(mk)
			if runs[j].pb != nil {
				runs[j].pb.d.stop(b)
			}
			runs[j].pb = mk[j](b)
			runs[j].starts = append(runs[j].starts, runs[j].pb.start(b))
		}
	}
	cpu0 := make([]int64, len(runs))
	for j := range runs {
		cpu0[j] = cpuTicks(b, runs[j].pb.d.proc.Cmd.Process.Pid)
	}
	for c := range benchChanges {
		for j := range runs {
			stored, ev := runs[j].pb.change(b, c*(benchPeers/benchChanges))
			runs[j].stored = append(runs[j].stored, stored)
			if runs[j].pb.delivered != nil {
				runs[j].delivered = append(runs[j].delivered, ev)
			}
		}
	}
	for j := range runs {
		ticks := cpuTicks(b, runs[j].pb.d.proc.Cmd.Process.Pid) - cpu0[j]
		runs[j].cpu = time.Duration(ticks) * time.Second / 100 / benchChanges // USER_HZ is 100 on Linux
	}
	time.Sleep(2 * time.Second) // let the work settle before reading memory
	for j := range runs {
		run := &runs[j]
		sortDurations(run.starts)
		sortDurations(run.stored)
		sortDurations(run.delivered)
		run.start = run.starts[len(run.starts)/2]
		run.mem = readMem(b, run.pb.tn, run.pb.d)
	}
	return runs
}

// latencies is ds's p50, p99 and max.
func latencies(ds []time.Duration) string {
	return fmt.Sprintf("p50 %s p99 %s max %s", quantile(ds, 0.5).Round(10*time.Microsecond), quantile(ds, 0.99).Round(10*time.Microsecond),
		ds[len(ds)-1].Round(10*time.Microsecond))
}

// sortDurations sorts ds in place, shortest first.
func sortDurations(ds []time.Duration) { sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] }) }

// quantile is the q-quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration { return ds[int(q*float64(len(ds)-1))] }

// ms is d in milliseconds, for ReportMetric.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkEtcdPeers1000: 1,000 peer records in etcd against the same
// 1,000 in the file datastore's nodes/, in one run (comparePeers), three
// starts of each, alternating (medians): daemon start → every peer's route
// in the kernel and the ratio etcd/file; for 100 single-peer changes (a
// record's tunnel address moved) the time from the stored write (etcd's
// acknowledgement, the file's rename) to the new route's netlink
// notification and the daemon's CPU time per change; the daemons' RSS.
func BenchmarkEtcdPeers1000(b *testing.B) {
	netnstest.SkipUnlessRoot(b, whyRoot)
	etcdtest.Binary(b)
	for it := 0; it < b.N; it++ {
		runs := comparePeers(b, 3, etcdBench, fileBench)
		e, f := runs[0], runs[1]
		ratio := e.start.Seconds() / f.start.Seconds()
		b.ReportMetric(ms(e.start), "etcd-start-ms")
		b.ReportMetric(ms(f.start), "file-start-ms")
		b.ReportMetric(ratio, "etcd/file")
		b.ReportMetric(ms(quantile(e.stored, 0.5)), "etcd-change-p50-ms")
		b.ReportMetric(ms(quantile(f.stored, 0.5)), "file-change-p50-ms")
		b.ReportMetric(ms(quantile(e.stored, 0.99)), "etcd-change-p99-ms")
		b.ReportMetric(ms(quantile(f.stored, 0.99)), "file-change-p99-ms")
		b.ReportMetric(float64(e.mem.rss)/1024, "etcd-rss-MiB")
		b.ReportMetric(ms(e.cpu), "etcd-change-cpu-ms")
		b.ReportMetric(ms(f.cpu), "file-change-cpu-ms")
		b.Logf("%d peers: start → programmed (median of 3) etcd %s, file %s (%.2f×; all: etcd %v, file %v)",
			benchPeers, e.start.Round(time.Millisecond), f.start.Round(time.Millisecond), ratio, e.starts, f.starts)
		b.Logf("one change → route: etcd %s; file %s", latencies(e.stored), latencies(f.stored))
		b.Logf("daemon CPU per change: etcd %s, file %s", e.cpu, f.cpu)
		b.Logf("etcd memory: %s", e.mem)
		b.Logf("file memory: %s", f.mem)
	}
}

// memBreakdown is where a daemon's resident memory goes: the kernel's
// view (/proc/PID/smaps_rollup) and the Go runtime's (its /metrics).
type memBreakdown struct {
	rss, anon, file int64 // KiB: Rss, Anonymous, and Rss − Anonymous (the binary and libraries mapped from files)
	// KiB resident of the binary's own mappings: code (r-x), read-only
	// data (r--: rodata, pclntab, type links), initialised data (rw-,
	// file-backed until written).
	text, rodata, data int64
	// Bytes, from go_memstats_*: heap spans in use, heap held but free and
	// not returned to the OS, heap returned, goroutine stacks, the next
	// collection's heap target, everything the runtime mapped.
	heapInuse, heapIdleKept, heapReleased, stacks, nextGC, sys int64
	gogc                                                       string // go_gc_gogc_percent
}

// readMem reads d's memory breakdown; tn is its node.
func readMem(b *testing.B, tn *testNode, d *daemonProc) memBreakdown {
	pid := d.proc.Cmd.Process.Pid
	var m memBreakdown
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			m.rss = v
		case "Anonymous:":
			m.anon = v
		}
	}
	m.file = m.rss - m.anon
	m.text, m.rodata, m.data = binaryRSS(b, pid)
	_, body, err := tn.get("/metrics")
	if err != nil {
		b.Fatal(err)
	}
	vals := map[string]string{}
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) == 2 && !strings.HasPrefix(l, "#") {
			vals[f[0]] = f[1]
		}
	}
	num := func(name string) int64 {
		v, _ := strconv.ParseFloat(vals[name], 64)
		return int64(v)
	}
	m.heapInuse = num("go_memstats_heap_inuse_bytes")
	m.heapReleased = num("go_memstats_heap_released_bytes")
	m.heapIdleKept = num("go_memstats_heap_idle_bytes") - m.heapReleased
	m.stacks = num("go_memstats_stack_inuse_bytes")
	m.nextGC = num("go_memstats_next_gc_bytes")
	m.sys = num("go_memstats_sys_bytes")
	m.gogc = vals["go_gc_gogc_percent"]
	return m
}

// String is the breakdown in MiB.
func (m memBreakdown) String() string {
	return fmt.Sprintf("RSS %.1f MiB = anon %.1f + file-backed %.1f (binary: text %.1f, rodata %.1f, data %.1f); Go: heap in use %.1f, free heap kept %.1f, released %.1f, stacks %.1f, next GC at %.1f, mapped %.1f; GOGC %s",
		float64(m.rss)/1024, float64(m.anon)/1024, float64(m.file)/1024, float64(m.text)/1024, float64(m.rodata)/1024, float64(m.data)/1024, mib(m.heapInuse), mib(m.heapIdleKept), mib(m.heapReleased),
		mib(m.stacks), mib(m.nextGC), mib(m.sys), m.gogc)
}

// binaryRSS returns the KiB resident of pid's executable's mappings by
// permission (from /proc/PID/smaps): r-x, r--, rw-.
func binaryRSS(b *testing.B, pid int) (text, rodata, data int64) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		b.Fatal(err)
	}
	var cur *int64
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			cur = nil // a mapping's header: range perms offset dev inode [path]
			if len(f) == 6 && f[5] == exe {
				switch f[1][:3] {
				case "r-x":
					cur = &text
				case "r--":
					cur = &rodata
				case "rw-":
					cur = &data
				}
			}
		case len(f) >= 2 && f[0] == "Rss:" && cur != nil:
			v, _ := strconv.ParseInt(f[1], 10, 64)
			*cur += v
		}
	}
	return text, rodata, data
}

// mib converts bytes to MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
