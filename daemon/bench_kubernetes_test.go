package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore/kubernetes"
	"github.com/routelet/routelet/internal/k8stest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// benchNodeObject is peer i's Node as a kubelet and the controller
// manager leave it, with routelet's annotations and images images.
func benchNodeObject(i, images int) *corev1.Node {
	p := benchPeer(i, false)
	name, host, block := p.Name, p.HostIPv4, p.Blocks[0]
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "bench"},
			Annotations: map[string]string{kubernetes.AnnotationHostIPv4: host, kubernetes.AnnotationVTEPMAC: p.VTEPMAC, kubernetes.AnnotationTunnelIPv4: p.TunnelIPv4,
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

// kubeBench is a node whose peers are benchPeers Nodes of 50 images each
// in a kube-apiserver (and etcd) running in its namespace; api is it. A
// change is a merge patch of the peer's annotations; a Node watch of the
// bench's own (protobuf, as the daemon's) says when the API server
// delivered each change.
func kubeBench(b *testing.B) (pb *peerBench, api *k8stest.Cluster) {
	tn := tmpfsNode(b)
	api = k8stest.Start(b, k8stest.Options{NetNS: tn.node.NS})
	cfg := *api.Config
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := k8s.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	self := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDR: tn.podCIDR, PodCIDRs: []string{tn.podCIDR}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, self, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pb = &peerBench{tn: tn, args: []string{"--datastore=kubernetes", "--kubeconfig=" + api.Kubeconfig}}
	pb.fill = func() {
		createNodes(b, cs, 50)
		pb.delivered = watchNodes(b, &cfg).delivered
	}
	pb.put = func(n *state.Node) time.Time {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q,%q:%q}}}`, kubernetes.AnnotationHostIPv4, n.HostIPv4,
			kubernetes.AnnotationVTEPMAC, n.VTEPMAC, kubernetes.AnnotationTunnelIPv4, n.TunnelIPv4)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		return time.Now()
	}
	return pb, api
}

// nodeEvents is a Node watch in the bench process: when each Node's
// tunnel address annotation took each value.
type nodeEvents struct {
	mu     sync.Mutex
	at     map[string]time.Time // "name tunnel" → when the event arrived
	err    error                // why the watch ended
	update chan struct{}        // closed (and replaced) at each event
}

// watchNodes watches Nodes from now on (from the list's resource
// version: no event for the Nodes already there) until b ends. The clock
// of an event starts once client-go decoded it, as the daemon's informer
// has to.
func watchNodes(b *testing.B, rc *rest.Config) *nodeEvents {
	c := *rc
	c.ContentType = k8sruntime.ContentTypeProtobuf
	c.AcceptContentTypes = k8sruntime.ContentTypeProtobuf
	cs, err := k8s.NewForConfig(&c)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	e := &nodeEvents{at: map[string]time.Time{}, update: make(chan struct{})}
	go func() {
		for ev := range w.ResultChan() {
			t := time.Now()
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			e.mu.Lock()
			key := n.Name + " " + n.Annotations[kubernetes.AnnotationTunnelIPv4]
			if _, dup := e.at[key]; !dup {
				e.at[key] = t
			}
			close(e.update)
			e.update = make(chan struct{})
			e.mu.Unlock()
		}
		e.mu.Lock()
		e.err = errors.New("the bench's Node watch ended")
		close(e.update)
		e.update = make(chan struct{})
		e.mu.Unlock()
	}()
	return e
}

// delivered returns when the event that gave Node name the tunnel address
// tunnel arrived, waiting up to timeout for it.
func (e *nodeEvents) delivered(name, tunnel string, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		e.mu.Lock()
		t, ok := e.at[name+" "+tunnel]
		err, update := e.err, e.update
		e.mu.Unlock()
		switch {
		case ok:
			return t, nil
		case err != nil:
			return time.Time{}, err
		}
		select {
		case <-update:
		case <-deadline:
			return time.Time{}, fmt.Errorf("no watch event of node %s with tunnel address %s within %s", name, tunnel, timeout)
		}
	}
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
// datastore (1,000 node records) in one run (comparePeers): daemon start →
// all 1,000 peer routes in the kernel; one peer's change (annotation
// patch, or record rewrite) → its route updated, p50/p99 over 100
// changes, from the patch's return (the file's rename) and, for
// Kubernetes, from the watch event; the daemon's CPU time per change; the
// daemon's RSS and where it goes; and the RSS of a child process running
// the Node informer with and without the transform, whose difference is
// what the transform saves the daemon. Run with -benchtime=1x.
func BenchmarkNodes1000(b *testing.B) {
	netnstest.SkipUnlessRoot(b, whyRoot)
	k8stest.Binaries(b)
	for it := 0; it < b.N; it++ {
		var api *k8stest.Cluster
		kube := func(b *testing.B) *peerBench {
			pb, a := kubeBench(b)
			api = a
			return pb
		}
		runs := comparePeers(b, 1, kube, fileBench)
		k, f := runs[0], runs[1]
		withT := informerRSS(b, k.pb.tn, api.Kubeconfig, "transform", benchPeers+1)
		withoutT := informerRSS(b, k.pb.tn, api.Kubeconfig, "whole", benchPeers+1)
		untransformed := k.mem.rss + withoutT - withT
		b.Logf("file:       all peers %s, change %s, CPU %s per change, RSS %.1f MiB", f.start, latencies(f.stored), f.cpu, float64(f.mem.rss)/1024)
		b.Logf("kubernetes: all peers %s, change from the patch's return %s, from the watch event %s, CPU %s per change, RSS %.1f MiB",
			k.start, latencies(k.stored), latencies(k.delivered), k.cpu, float64(k.mem.rss)/1024)
		b.Logf("kubernetes/file: all peers %.2fx, p99 from the event/file p99 %.2fx, CPU per change %.2fx, RSS %.2fx", ratio(k.start, f.start),
			ratio(quantile(k.delivered, 0.99), quantile(f.stored, 0.99)), ratio(k.cpu, f.cpu), float64(k.mem.rss)/float64(f.mem.rss))
		b.Logf("file memory:       %s", f.mem)
		b.Logf("kubernetes memory: %s", k.mem)
		b.Logf("Node informer alone (child process): RSS with transform %.1f MiB, keeping whole Nodes %.1f MiB; daemon without the transform ≈ %.1f MiB",
			float64(withT)/1024, float64(withoutT)/1024, float64(untransformed)/1024)
		b.ReportMetric(k.start.Seconds(), "k8s-all-peers-s")
		b.ReportMetric(f.start.Seconds(), "file-all-peers-s")
		b.ReportMetric(ms(quantile(k.stored, 0.5)), "k8s-p50-ms")
		b.ReportMetric(ms(quantile(k.stored, 0.99)), "k8s-p99-ms")
		b.ReportMetric(ms(quantile(k.delivered, 0.5)), "k8s-event-p50-ms")
		b.ReportMetric(ms(quantile(k.delivered, 0.99)), "k8s-event-p99-ms")
		b.ReportMetric(ms(quantile(f.stored, 0.5)), "file-p50-ms")
		b.ReportMetric(ms(quantile(f.stored, 0.99)), "file-p99-ms")
		b.ReportMetric(ms(k.cpu), "k8s-change-cpu-ms")
		b.ReportMetric(ms(f.cpu), "file-change-cpu-ms")
		b.ReportMetric(float64(k.mem.rss)/1024, "k8s-rss-MiB")
		b.ReportMetric(float64(untransformed)/1024, "k8s-untransformed-rss-MiB")
		b.ReportMetric(float64(f.mem.rss)/1024, "file-rss-MiB")
	}
}

// ratio is x/y.
func ratio(x, y time.Duration) float64 { return float64(x) / float64(y) }
