package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore/kubernetes"
	"github.com/routelet/routelet/internal/k8stest"
	"github.com/routelet/routelet/internal/netnstest"
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
	mem      memBreakdown
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
	r.mem = readMem(b, tn, d)
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
	r.mem = readMem(b, tn, d)
	return r, api, tn
}

// memBreakdown is where a daemon's resident memory goes: the kernel's
// view (/proc/PID/smaps_rollup) and the Go runtime's (its /metrics).
type memBreakdown struct {
	rss, anon, file int64 // KiB: Rss, Anonymous, and Rss − Anonymous (the binary and libraries mapped from files)
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
	return fmt.Sprintf("RSS %.1f MiB = anon %.1f + file-backed %.1f; Go: heap in use %.1f, free heap kept %.1f, released %.1f, stacks %.1f, next GC at %.1f, mapped %.1f; GOGC %s",
		float64(m.rss)/1024, float64(m.anon)/1024, float64(m.file)/1024, mib(m.heapInuse), mib(m.heapIdleKept), mib(m.heapReleased),
		mib(m.stacks), mib(m.nextGC), mib(m.sys), m.gogc)
}

// The Node informer child of BenchmarkNodes1000: the test binary run
// again in the bench node with informerChildEnv set ("transform" or
// "whole") and the kubeconfig in informerKubeconfigEnv.
const (
	informerChildEnv      = "ROUTELET_BENCH_INFORMER_CHILD"
	informerKubeconfigEnv = "ROUTELET_BENCH_KUBECONFIG"
)

// TestInformerChild is the informer child (skipped otherwise): the
// Kubernetes datastore's Node informer, with its transform or keeping whole
// Nodes, at the daemon's default GC percent; once synced and settled it
// prints "synced N" and waits for SIGTERM, so the parent can read its RSS.
func TestInformerChild(t *testing.T) {
	mode := os.Getenv(informerChildEnv)
	if mode == "" {
		t.Skip("run by BenchmarkNodes1000")
	}
	debug.SetGCPercent(config.DefaultGoGCPercent)
	rc, err := kubernetes.ClientConfig(os.Getenv(informerKubeconfigEnv))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (k8sruntime.Object, error) {
			return cs.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Nodes().Watch(ctx, o)
		},
	}, cs), &corev1.Node{}, 0, cache.Indexers{})
	if mode == "transform" {
		if err := inf.SetTransform(kubernetes.Transform); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	time.Sleep(2 * time.Second) // settle as the daemon is let settle before its RSS is read
	fmt.Printf("synced %d\n", len(inf.GetStore().List()))
	<-ctx.Done()
}

// informerRSS runs the informer child in tn against kubeconfig's API
// server, in mode "transform" or "whole", and returns its RSS in KiB once
// it has synced want Nodes.
func informerRSS(b *testing.B, tn *testNode, kubeconfig, mode string, want int) int64 {
	b.Setenv(informerChildEnv, mode)
	b.Setenv(informerKubeconfigEnv, kubeconfig)
	b.Setenv(netnstest.PrebuiltEnv, binDir) // the child's TestMain copies the binaries instead of building them
	out := &netnstest.Buffer{}
	p, err := netnstest.StartIn(tn.node.NS, out, os.Args[0], "-test.run=^TestInformerChild$")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Stop(10 * time.Second) }()
	netnstest.Eventually(b, 2*time.Minute, "informer child synced", func() bool { return strings.Contains(out.String(), fmt.Sprintf("synced %d\n", want)) })
	return rssKiB(b, p.Cmd.Process.Pid)
}

// BenchmarkNodes1000 compares the Kubernetes datastore (a real
// kube-apiserver with 1,000 Nodes of 50 images each) with the file
// datastore (1,000 node records) in one run: daemon start → all 1,000 peer
// routes in the kernel; one peer's change (annotation patch, or record
// rewrite) → its route updated, p50/p99 over 100 changes; the daemon's
// RSS and where it goes; and the RSS of a child process running the Node
// informer with and without the transform, whose difference is what the
// transform saves the daemon. Run with -benchtime=1x.
func BenchmarkNodes1000(b *testing.B) {
	needRoot(b)
	k8stest.Binaries(b)
	for it := 0; it < b.N; it++ {
		f := benchFile(b)
		k, api, tn := benchKubernetes(b)
		withT := informerRSS(b, tn, api.Kubeconfig, "transform", benchPeers+1)
		withoutT := informerRSS(b, tn, api.Kubeconfig, "whole", benchPeers+1)
		b.Logf("file:       all peers %s, change p50 %s p99 %s, RSS %.1f MiB", f.allPeers, f.p50, f.p99, float64(f.rssKiB)/1024)
		b.Logf("kubernetes: all peers %s, change p50 %s p99 %s, RSS %.1f MiB", k.allPeers, k.p50, k.p99, float64(k.rssKiB)/1024)
		b.Logf("kubernetes/file: all peers %.2fx, p99 %.2fx, RSS %.2fx", ratio(k.allPeers, f.allPeers), ratio(k.p99, f.p99), float64(k.rssKiB)/float64(f.rssKiB))
		b.Logf("file memory:       %s", f.mem)
		b.Logf("kubernetes memory: %s", k.mem)
		b.Logf("Node informer alone (child process): RSS with transform %.1f MiB, keeping whole Nodes %.1f MiB; daemon without the transform ≈ %.1f MiB",
			float64(withT)/1024, float64(withoutT)/1024, float64(k.rssKiB+withoutT-withT)/1024)
		b.ReportMetric(k.allPeers.Seconds(), "k8s-all-peers-s")
		b.ReportMetric(f.allPeers.Seconds(), "file-all-peers-s")
		b.ReportMetric(float64(k.p99.Microseconds())/1000, "k8s-p99-ms")
		b.ReportMetric(float64(f.p99.Microseconds())/1000, "file-p99-ms")
		b.ReportMetric(float64(k.rssKiB)/1024, "k8s-rss-MiB")
		b.ReportMetric(float64(k.rssKiB+withoutT-withT)/1024, "k8s-untransformed-rss-MiB")
		b.ReportMetric(float64(f.rssKiB)/1024, "file-rss-MiB")
	}
}

// ratio is x/y.
func ratio(x, y time.Duration) float64 { return float64(x) / float64(y) }

// mib converts bytes to MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
