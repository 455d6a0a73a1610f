package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

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
// it took until every peer's route was in the kernel.
func (pb *peerBench) start(b *testing.B, args ...string) time.Duration {
	for i := range benchPeers {
		pb.put(benchPeer(i, false))
	}
	t0 := time.Now()
	pb.d = pb.tn.startDaemon(append([]string{"--log-level=info", "--encapsulation=vxlan"}, args...)...)
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
// times from each stored write to its new route's netlink notification.
func (pb *peerBench) changes(b *testing.B, n int) []time.Duration {
	ch := subscribeRoutes(b, pb.tn)
	var lat []time.Duration
	for i := range n {
		rec := benchPeer(i, true)
		t0 := pb.put(rec)
		lat = append(lat, waitRoute(b, ch, rec.Blocks[0], t0, 10*time.Second))
	}
	slices.Sort(lat)
	return lat
}

// quantile is the q-quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration { return ds[int(q*float64(len(ds)-1))] }

// BenchmarkEtcdPeers1000: 1,000 peer records in etcd against the same
// 1,000 in the file datastore's nodes/, in one run, three starts of each,
// alternating (medians): daemon start → every peer's route in the kernel
// and the ratio etcd/file; the daemon's RSS with them; and for 100
// single-peer changes (a record's block moved) the time from the stored
// write (etcd's acknowledgement, the file's rename) to the new route's
// netlink notification, for both datastores.
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
		slices.Sort(fileStarts)
		slices.Sort(etcdStarts)
		etcdRSS, fileRSS := rssKiB(b, eb.d.proc.Cmd.Process.Pid), rssKiB(b, fb.d.proc.Cmd.Process.Pid)
		etcdLat, fileLat := eb.changes(b, 100), fb.changes(b, 100)
		etcdStart, fileStart := etcdStarts[rounds/2], fileStarts[rounds/2]
		ratio := etcdStart.Seconds() / fileStart.Seconds()
		b.ReportMetric(etcdStart.Seconds()*1000, "etcd-start-ms")
		b.ReportMetric(fileStart.Seconds()*1000, "file-start-ms")
		b.ReportMetric(ratio, "etcd/file")
		b.ReportMetric(float64(quantile(etcdLat, 0.99).Microseconds())/1000, "etcd-change-p99-ms")
		b.ReportMetric(float64(quantile(fileLat, 0.99).Microseconds())/1000, "file-change-p99-ms")
		b.ReportMetric(float64(etcdRSS)/1024, "etcd-rss-MiB")
		b.Logf("%d peers: start → programmed (median of %d) etcd %s, file %s (%.2f×; all: etcd %v, file %v)",
			benchPeers, rounds, etcdStart.Round(time.Millisecond), fileStart.Round(time.Millisecond), ratio, etcdStarts, fileStarts)
		b.Logf("one change → route: etcd p50 %s p99 %s max %s; file p50 %s p99 %s max %s",
			quantile(etcdLat, 0.5), quantile(etcdLat, 0.99), etcdLat[len(etcdLat)-1], quantile(fileLat, 0.5), quantile(fileLat, 0.99), fileLat[len(fileLat)-1])
		b.Logf("RSS with %d peers: etcd %.1f MiB, file %.1f MiB", benchPeers, float64(etcdRSS)/1024, float64(fileRSS)/1024)
	}
}
