package main

import (
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
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
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
