package main

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/routelet/routelet/daemon/datastore/kubernetes"
	"github.com/routelet/routelet/internal/k8stest"
	"github.com/routelet/routelet/pkg/state"
)

// benchChanges is how many single-peer changes the latency is taken over.
const benchChanges = 100

// benchNodeValues is peer i of the datastore benchmarks: host 172.16.x.y (behind
// the bench node's default route), block 10.128.0.0/9's i-th /24, VTEP
// MAC 02:00:00:00:hi:lo, tunnel address the block's first (or, changed,
// its second) address.
func benchNodeValues(i int, changed bool) (name, host, block, mac, tunnel string) {
	third := 128 + i/256
	fourth := i % 256
	block = fmt.Sprintf("10.%d.%d.0/24", third, fourth)
	tunnel = fmt.Sprintf("10.%d.%d.0", third, fourth)
	if changed {
		tunnel = fmt.Sprintf("10.%d.%d.1", third, fourth)
	}
	return fmt.Sprintf("peer-%04d", i), fmt.Sprintf("172.16.%d.%d", i/250, 1+i%250), block,
		fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), tunnel
}

// benchResult is one datastore's numbers.
type benchResult struct {
	allPeers time.Duration // daemon start → every peer's route in the kernel
	p50, p99 time.Duration // one peer's change → its route updated
	rssKiB   int64
}

// overlayRouteWatch counts routes on vxlan.calico and reports route
// updates, inside tn's node.
type overlayRouteWatch struct {
	ch   chan netlink.RouteUpdate
	done chan struct{}
}

// watchRoutes subscribes to tn's route updates.
func watchRoutes(b *testing.B, tn *testNode) *overlayRouteWatch {
	h, err := netns.GetFromPath(tn.node.NS.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	w := &overlayRouteWatch{ch: make(chan netlink.RouteUpdate, 1<<16), done: make(chan struct{})}
	b.Cleanup(func() { close(w.done) })
	if err := netlink.RouteSubscribeWithOptions(w.ch, w.done, netlink.RouteSubscribeOptions{Namespace: &h}); err != nil {
		b.Fatal(err)
	}
	return w
}

// waitAllPeers waits until tn holds a route on vxlan.calico for each of
// the benchPeers blocks and returns how long that took from t0.
func waitAllPeers(b *testing.B, tn *testNode, w *overlayRouteWatch, t0 time.Time) time.Duration {
	seen := map[string]bool{}
	deadline := time.After(5 * time.Minute)
	for len(seen) < benchPeers {
		select {
		case u := <-w.ch:
			if u.Type == unix.RTM_NEWROUTE && u.Protocol == 80 && u.Gw != nil && u.Dst != nil && u.Dst.IP[0] == 10 && u.Dst.IP[1] >= 128 {
				seen[u.Dst.String()] = true
			}
		case <-deadline:
			b.Fatalf("%d of %d peer routes after 5 minutes", len(seen), benchPeers)
		}
	}
	return time.Since(t0)
}

// measureChanges applies benchChanges single-peer changes with change(i)
// (which returns the moment it was sent) and returns the p50 and p99 of
// change → the route's RTM_NEWROUTE with the new gateway.
func measureChanges(b *testing.B, w *overlayRouteWatch, change func(i int) time.Time) (time.Duration, time.Duration) {
	var lat []time.Duration
	for i := range benchChanges {
		peer := i * (benchPeers / benchChanges)
		_, _, block, _, tunnel := benchNodeValues(peer, true)
		// Drain what earlier changes left.
		for len(w.ch) > 0 {
			<-w.ch
		}
		t0 := change(peer)
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case u := <-w.ch:
				if u.Type == unix.RTM_NEWROUTE && u.Dst != nil && u.Dst.String() == block && u.Gw != nil && u.Gw.Equal(net.ParseIP(tunnel)) {
					lat = append(lat, time.Since(t0))
					break wait
				}
			case <-deadline:
				b.Fatalf("no route %s via %s within 30s of the change", block, tunnel)
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)/2], lat[int(0.99*float64(len(lat)-1))]
}

// benchFile runs the file datastore with benchPeers node records.
func benchFile(b *testing.B) benchResult {
	tn := newTestNode(b, true)
	put := func(i int, changed bool) {
		name, host, block, mac, tunnel := benchNodeValues(i, changed)
		n := &state.Node{Version: state.RecordVersion, Name: name, HostIPv4: host, Blocks: []string{block}, VTEPMAC: mac, TunnelIPv4: tunnel,
			Updated: time.Now().UTC()}
		if err := tn.store.PutNode(n); err != nil {
			b.Fatal(err)
		}
	}
	for i := range benchPeers {
		put(i, false)
	}
	w := watchRoutes(b, tn)
	t0 := time.Now()
	d := tn.startDaemon("--log-level=info", "--encapsulation=vxlan", "--device-check-period=10s", "--resync-period=90s")
	var r benchResult
	r.allPeers = waitAllPeers(b, tn, w, t0)
	tn.waitReady()
	r.p50, r.p99 = measureChanges(b, w, func(i int) time.Time {
		t := time.Now()
		put(i, true)
		return t
	})
	time.Sleep(2 * time.Second) // let the work settle before reading RSS
	r.rssKiB = rssKiB(b, d.proc.Cmd.Process.Pid)
	return r
}

// benchNodeObject is peer i's Node as a kubelet and the controller
// manager leave it, with routelet's annotations and images images.
func benchNodeObject(i, images int) *corev1.Node {
	name, host, block, mac, tunnel := benchNodeValues(i, false)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "bench"},
			Annotations: map[string]string{kubernetes.AnnotationHostIPv4: host, kubernetes.AnnotationVTEPMAC: mac, kubernetes.AnnotationTunnelIPv4: tunnel,
				"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec:   corev1.NodeSpec{PodCIDR: block, PodCIDRs: []string{block}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}, {Type: corev1.NodeHostName, Address: name}}},
	}
	for j := range images {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team-%d/service-%d@sha256:%064x", j%7, j, i*1000+j), fmt.Sprintf("registry.example.com/team-%d/service-%d:v1.%d.%d", j%7, j, j, i%10)},
			SizeBytes: int64(50_000_000 + j*1_000_000),
		})
	}
	return n
}

// createNodes creates the bench's Node objects (status via the status
// subresource, as kubelet sets it), 8 at a time.
func createNodes(b *testing.B, cs *k8s.Clientset, images int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, benchPeers)
	sem := make(chan struct{}, 8)
	for i := range benchPeers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			n := benchNodeObject(i, images)
			created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err == nil {
				created.Status = n.Status
				_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// benchKubernetes runs the Kubernetes datastore against a real
// kube-apiserver in the bench node holding benchPeers Nodes with 50 images
// each.
func benchKubernetes(b *testing.B) (benchResult, *k8stest.Cluster, *testNode) {
	tn := newTestNode(b, true)
	api := k8stest.Start(b, k8stest.Options{NetNS: tn.node.NS})
	cfg := *api.Config
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := k8s.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	self := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDR: tn.podCIDR, PodCIDRs: []string{tn.podCIDR}}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), self, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	createNodes(b, cs, 50)
	w := watchRoutes(b, tn)
	t0 := time.Now()
	d := tn.startDaemon("--log-level=info", "--encapsulation=vxlan", "--device-check-period=10s", "--resync-period=90s",
		"--datastore=kubernetes", "--kubeconfig="+api.Kubeconfig)
	var r benchResult
	r.allPeers = waitAllPeers(b, tn, w, t0)
	tn.waitReady()
	r.p50, r.p99 = measureChanges(b, w, func(i int) time.Time {
		name, _, _, _, tunnel := benchNodeValues(i, true)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kubernetes.AnnotationTunnelIPv4, tunnel)
		t := time.Now()
		if _, err := cs.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		return t
	})
	time.Sleep(2 * time.Second) // let the work settle before reading RSS
	r.rssKiB = rssKiB(b, d.proc.Cmd.Process.Pid)
	return r, api, tn
}

// cacheHeap returns the Go heap (after GC) a Kubernetes datastore holds
// once it has listed the API server's Nodes, with or without its transform.
func cacheHeap(b *testing.B, api *k8stest.Cluster, noTransform bool) int64 {
	cs, err := k8s.NewForConfig(api.Config)
	if err != nil {
		b.Fatal(err)
	}
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	d, err := kubernetes.New(kubernetes.Options{Client: cs, NodeName: "node-a", NoTransform: noTransform})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		recs, _, err := d.Peers()
		if err == nil && len(recs) == benchPeers {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("datastore did not list %d peers: %d, %v", benchPeers, len(recs), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return heap() - before
}

// BenchmarkNodes1000 compares the Kubernetes datastore (a real
// kube-apiserver with 1,000 Nodes of 50 images each) with the file
// datastore (1,000 node records) in one run: daemon start → all 1,000 peer
// routes in the kernel; one peer's change (annotation patch, or record
// rewrite) → its route updated, p50/p99 over 100 changes; the daemon's
// RSS; and the Go heap of the Node cache with and without the informer's
// transform. Run with -benchtime=1x.
func BenchmarkNodes1000(b *testing.B) {
	needRoot(b)
	k8stest.Binaries(b)
	for it := 0; it < b.N; it++ {
		f := benchFile(b)
		k, api, _ := benchKubernetes(b)
		withT := cacheHeap(b, api, false)
		withoutT := cacheHeap(b, api, true)
		b.Logf("file:       all peers %s, change p50 %s p99 %s, RSS %.1f MiB", f.allPeers, f.p50, f.p99, float64(f.rssKiB)/1024)
		b.Logf("kubernetes: all peers %s, change p50 %s p99 %s, RSS %.1f MiB", k.allPeers, k.p50, k.p99, float64(k.rssKiB)/1024)
		b.Logf("kubernetes/file: all peers %.2fx, p99 %.2fx, RSS %.2fx", ratio(k.allPeers, f.allPeers), ratio(k.p99, f.p99), float64(k.rssKiB)/float64(f.rssKiB))
		b.Logf("Node cache heap: with transform %.1f MiB, without %.1f MiB (%.2fx)", mib(withT), mib(withoutT), float64(withoutT)/float64(withT))
		b.ReportMetric(k.allPeers.Seconds(), "k8s-all-peers-s")
		b.ReportMetric(f.allPeers.Seconds(), "file-all-peers-s")
		b.ReportMetric(float64(k.p99.Microseconds())/1000, "k8s-p99-ms")
		b.ReportMetric(float64(f.p99.Microseconds())/1000, "file-p99-ms")
		b.ReportMetric(float64(k.rssKiB)/1024, "k8s-rss-MiB")
		b.ReportMetric(float64(f.rssKiB)/1024, "file-rss-MiB")
		b.ReportMetric(mib(withT), "cache-MiB")
		b.ReportMetric(mib(withoutT), "cache-untransformed-MiB")
	}
}

// ratio is x/y.
func ratio(x, y time.Duration) float64 { return float64(x) / float64(y) }

// mib converts bytes to MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
