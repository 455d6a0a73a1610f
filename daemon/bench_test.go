package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// benchNode sets up a node with n workload veths (calib<i>, peers pb<i>).
func benchNode(b *testing.B, n int) *testNode {
	tn := newTestNode(b, true)
	for i := range n {
		tn.addVeth("calib"+strconv.Itoa(i), "pb"+strconv.Itoa(i))
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
	needRoot(b)
	const n = 200
	tn := benchNode(b, n)
	tn.startDaemon("--log-level=info", "--pod-cidr=10.244.8.0/24")
	tn.waitReady()
	// Measure the steady state: during the first grace period (1s here)
	// the IPv6 table keeps every new interface dirty because of the
	// kernel's fe80::/64 route, and each apply re-reads them all (see
	// docs/bench-daemon.md).
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

// subscribeRoutes subscribes to tn's route notifications until b ends.
func subscribeRoutes(b *testing.B, tn *testNode) <-chan netlink.RouteUpdate {
	h, err := netns.GetFromPath(tn.node.NS.Path())
	if err != nil {
		b.Fatal(err)
	}
	ch := make(chan netlink.RouteUpdate, 4096)
	done := make(chan struct{})
	err = netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &h})
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
	deadline := time.After(timeout)
	for {
		select {
		case u := <-ch:
			if u.Type == unix.RTM_NEWROUTE && u.Dst != nil && u.Dst.String() == want && u.Protocol == 80 {
				return time.Since(t0)
			}
		case <-deadline:
			b.Fatalf("no route to %s within %s", want, timeout)
		}
	}
}

// BenchmarkIdle250 runs the daemon with 250 workloads and measures its RSS
// and CPU use over 60 s of idling (no events, default resync period).
// ROUTELET_BENCH_IDLE overrides the idle duration (e.g. "10s").
func BenchmarkIdle250(b *testing.B) {
	needRoot(b)
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

// benchPeers is how many peers the datastore benchmarks program.
const benchPeers = 1000

// benchPeer is the i-th peer's record: a host off the node's subnet, one
// /26 of 10.200.0.0/16 (or of 10.201.0.0/16 once moved), its VTEP.
func benchPeer(i int, moved bool) *state.Node {
	pool := 200
	if moved {
		pool = 201
	}
	block := fmt.Sprintf("10.%d.%d.%d", pool, i/4, 64*(i%4))
	return &state.Node{Version: state.RecordVersion, Name: fmt.Sprintf("peer-%04d", i),
		HostIPv4: fmt.Sprintf("10.100.%d.%d", i/250, 1+i%250), Blocks: []string{block + "/26"},
		VTEPMAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), TunnelIPv4: block, Updated: time.Now().UTC()}
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

// peerBench is one node under test with its 1,000 peers in a datastore.
type peerBench struct {
	tn  *testNode
	d   *daemonProc
	put func(n *state.Node) time.Time // writes a peer record; returns when it is stored
}

// fileBench is a node whose peers are files in nodes/.
func fileBench(b *testing.B) *peerBench {
	tn := newTestNode(b, true)
	return &peerBench{tn: tn, put: func(n *state.Node) time.Time {
		if err := tn.store.PutNode(n); err != nil {
			b.Fatal(err)
		}
		return time.Now()
	}}
}

// etcdBench is a node whose peers are in an etcd running in its namespace.
func etcdBench(b *testing.B) *peerBench {
	tn := newTestNode(b, true)
	srv := etcdtest.Start(b, etcdtest.Options{NetNS: tn.node.NS})
	cli := srv.Client(b)
	b.Cleanup(func() { cli.Close() })
	return &peerBench{tn: tn, put: func(n *state.Node) time.Time {
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

// start writes the peers, starts the daemon with args and returns how long
// it took until every peer's route was in the kernel. The device check
// runs at its default period: the harness's test-sized 200 ms would re-read
// every peer's ARP and FDB entries and routes five times a second, and the
// changes would measure that check rather than their own path.
func (pb *peerBench) start(b *testing.B, args ...string) time.Duration {
	for i := range benchPeers {
		pb.put(benchPeer(i, false))
	}
	t0 := time.Now()
	pb.d = pb.tn.startDaemon(append([]string{"--log-level=info", "--encapsulation=vxlan", "--device-check-period=10s"}, args...)...)
	deadline := time.Now().Add(2 * time.Minute)
	for vxlanRoutes(pb.tn) < benchPeers {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d peer routes after 2 minutes; log:\n%s", vxlanRoutes(pb.tn), benchPeers, pb.d.log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(t0)
}

// changes moves n peers' blocks one at a time and returns, sorted, the
// times from each stored write to its new route's netlink notification,
// and the daemon's CPU time (user and system) per change: less sensitive
// than the latencies to what else the machine runs.
func (pb *peerBench) changes(b *testing.B, n int) ([]time.Duration, time.Duration) {
	ch := subscribeRoutes(b, pb.tn)
	pid := pb.d.proc.Cmd.Process.Pid
	cpu0 := cpuTicks(b, pid)
	var lat []time.Duration
	for i := range n {
		rec := benchPeer(i, true)
		t0 := pb.put(rec)
		lat = append(lat, waitRoute(b, ch, rec.Blocks[0], t0, 10*time.Second))
	}
	cpu := time.Duration(cpuTicks(b, pid)-cpu0) * time.Second / 100 // USER_HZ is 100 on Linux
	sortDurations(lat)
	return lat, cpu / time.Duration(n)
}

// sortDurations sorts ds in place, shortest first.
func sortDurations(ds []time.Duration) { sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] }) }

// quantile is the q-quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration { return ds[int(q*float64(len(ds)-1))] }

// BenchmarkEtcdPeers1000: 1,000 peer records in etcd against the same
// 1,000 in the file datastore's nodes/, in one run, three starts of each,
// alternating (medians): daemon start → every peer's route in the kernel
// and the ratio etcd/file; the daemon's RSS with them; and for 100
// single-peer changes (a record's block moved) the time from the stored
// write (etcd's acknowledgement, the file's rename) to the new route's
// netlink notification and the daemon's CPU time per change, for both
// datastores.
func BenchmarkEtcdPeers1000(b *testing.B) {
	needRoot(b)
	etcdtest.Binary(b)
	const rounds = 3
	etcdArgs := []string{"--datastore=etcd", "--etcd-endpoints=http://127.0.0.1:2379"}
	for it := 0; it < b.N; it++ {
		var fileStarts, etcdStarts []time.Duration
		var fb, eb *peerBench
		for r := range rounds {
			if fb != nil {
				fb.d.stop(b)
				eb.d.stop(b)
			}
			fb, eb = fileBench(b), etcdBench(b)
			if r%2 == 0 {
				fileStarts = append(fileStarts, fb.start(b))
				etcdStarts = append(etcdStarts, eb.start(b, etcdArgs...))
			} else {
				etcdStarts = append(etcdStarts, eb.start(b, etcdArgs...))
				fileStarts = append(fileStarts, fb.start(b))
			}
		}
		sortDurations(fileStarts)
		sortDurations(etcdStarts)
		etcdRSS, fileRSS := rssKiB(b, eb.d.proc.Cmd.Process.Pid), rssKiB(b, fb.d.proc.Cmd.Process.Pid)
		etcdLat, etcdCPU := eb.changes(b, 100)
		fileLat, fileCPU := fb.changes(b, 100)
		etcdStart, fileStart := etcdStarts[rounds/2], fileStarts[rounds/2]
		ratio := etcdStart.Seconds() / fileStart.Seconds()
		b.ReportMetric(etcdStart.Seconds()*1000, "etcd-start-ms")
		b.ReportMetric(fileStart.Seconds()*1000, "file-start-ms")
		b.ReportMetric(ratio, "etcd/file")
		b.ReportMetric(float64(quantile(etcdLat, 0.5).Microseconds())/1000, "etcd-change-p50-ms")
		b.ReportMetric(float64(quantile(fileLat, 0.5).Microseconds())/1000, "file-change-p50-ms")
		b.ReportMetric(float64(quantile(etcdLat, 0.99).Microseconds())/1000, "etcd-change-p99-ms")
		b.ReportMetric(float64(quantile(fileLat, 0.99).Microseconds())/1000, "file-change-p99-ms")
		b.ReportMetric(float64(etcdRSS)/1024, "etcd-rss-MiB")
		b.ReportMetric(float64(etcdCPU.Microseconds())/1000, "etcd-change-cpu-ms")
		b.ReportMetric(float64(fileCPU.Microseconds())/1000, "file-change-cpu-ms")
		b.Logf("%d peers: start → programmed (median of %d) etcd %s, file %s (%.2f×; all: etcd %v, file %v)",
			benchPeers, rounds, etcdStart.Round(time.Millisecond), fileStart.Round(time.Millisecond), ratio, etcdStarts, fileStarts)
		b.Logf("one change → route: etcd p50 %s p99 %s max %s; file p50 %s p99 %s max %s",
			quantile(etcdLat, 0.5), quantile(etcdLat, 0.99), etcdLat[len(etcdLat)-1], quantile(fileLat, 0.5), quantile(fileLat, 0.99), fileLat[len(fileLat)-1])
		b.Logf("daemon CPU per change: etcd %s, file %s", etcdCPU.Round(10*time.Microsecond), fileCPU.Round(10*time.Microsecond))
		b.Logf("RSS with %d peers: etcd %.1f MiB, file %.1f MiB", benchPeers, float64(etcdRSS)/1024, float64(fileRSS)/1024)
	}
}
