package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/etcdtest"
	"github.com/routelet/routelet/pkg/state"
)

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

// startToProgrammed starts the daemon with args and returns how long it
// took until every peer's route was in the kernel, and the daemon.
func startToProgrammed(b *testing.B, tn *testNode, args ...string) (time.Duration, *daemonProc) {
	t0 := time.Now()
	d := tn.startDaemon(append([]string{"--log-level=info", "--encapsulation=vxlan"}, args...)...)
	deadline := time.Now().Add(2 * time.Minute)
	for vxlanRoutes(tn) < benchPeers {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d peer routes after 2 minutes; log:\n%s", vxlanRoutes(tn), benchPeers, d.log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(t0), d
}

// BenchmarkEtcdPeers1000: 1,000 peer records in etcd against the same
// 1,000 in the file datastore's nodes/, in one run: daemon start → every
// peer's route in the kernel (and the ratio etcd/file), the daemon's RSS
// with them, and for 100 single-peer changes (a record's block moved) the
// time from etcd acknowledging the write to the new route's netlink
// notification.
func BenchmarkEtcdPeers1000(b *testing.B) {
	needRoot(b)
	etcdtest.Binary(b)
	for it := 0; it < b.N; it++ {
		fileNode := newTestNode(b, true)
		for i := range benchPeers {
			if err := fileNode.store.PutNode(benchPeer(i, false)); err != nil {
				b.Fatal(err)
			}
		}
		fileTime, fd := startToProgrammed(b, fileNode)
		fileRSS := rssKiB(b, fd.proc.Cmd.Process.Pid)
		fd.stop(b)

		tn := newTestNode(b, true)
		srv := etcdtest.Start(b, etcdtest.Options{NetNS: tn.node.NS})
		cli := srv.Client(b)
		defer cli.Close()
		ctx := context.Background()
		put := func(n *state.Node) time.Time {
			data, err := state.EncodeNode(n)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cli.Put(ctx, "/routelet/nodes/"+n.Name, string(data)); err != nil {
				b.Fatal(err)
			}
			return time.Now()
		}
		for i := range benchPeers {
			put(benchPeer(i, false))
		}
		etcdTime, d := startToProgrammed(b, tn, "--datastore=etcd", "--etcd-endpoints=http://127.0.0.1:2379")
		etcdRSS := rssKiB(b, d.proc.Cmd.Process.Pid)

		h, err := netns.GetFromPath(tn.node.NS.Path())
		if err != nil {
			b.Fatal(err)
		}
		ch := make(chan netlink.RouteUpdate, 4096)
		done := make(chan struct{})
		if err := netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{Namespace: &h}); err != nil {
			b.Fatal(err)
		}
		var lat []time.Duration
		for i := range 100 {
			n := benchPeer(i, true)
			want := n.Blocks[0]
			t0 := put(n)
			timeout := time.After(10 * time.Second)
		wait:
			for {
				select {
				case u := <-ch:
					if u.Type == unix.RTM_NEWROUTE && u.Dst != nil && u.Dst.String() == want && u.Protocol == 80 {
						lat = append(lat, time.Since(t0))
						break wait
					}
				case <-timeout:
					b.Fatalf("no route for %s within 10s of its record", want)
				}
			}
		}
		close(done)
		h.Close()
		slices.Sort(lat)
		p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
		ratio := etcdTime.Seconds() / fileTime.Seconds()
		b.ReportMetric(etcdTime.Seconds()*1000, "etcd-start-ms")
		b.ReportMetric(fileTime.Seconds()*1000, "file-start-ms")
		b.ReportMetric(ratio, "etcd/file")
		b.ReportMetric(float64(p(0.99).Microseconds())/1000, "change-p99-ms")
		b.ReportMetric(float64(etcdRSS)/1024, "rss-MiB")
		b.Logf("%d peers: start → programmed etcd %s, file %s (%.2f×); one change → route p50 %s p99 %s max %s; RSS etcd %.1f MiB, file %.1f MiB",
			benchPeers, etcdTime.Round(time.Millisecond), fileTime.Round(time.Millisecond), ratio, p(0.5), p(0.99), lat[len(lat)-1],
			float64(etcdRSS)/1024, float64(fileRSS)/1024)
	}
}
