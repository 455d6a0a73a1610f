package kubernetes

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/routelet/routelet/daemon/datastore/datastoretest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/peers"
)

const waitLong = 30 * time.Second

// node returns a Node with podCIDRs and an InternalIP.
func node(name, ip string, cidrs ...string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{PodCIDRs: cidrs},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

// fakeNodes is a fake clientset's Nodes as a NodeClient, telling the
// informer (as the clientset does) that it cannot serve a streaming list.
type fakeNodes struct{ NodeClient }

// IsWatchListSemanticsUnSupported is true: the fake answers only a plain
// list.
func (fakeNodes) IsWatchListSemanticsUnSupported() bool { return true }

// open starts a datastore for node "self" on client, closed at cleanup.
func open(t *testing.T, client *fake.Clientset) *Datastore {
	t.Helper()
	d, err := New(Options{Client: fakeNodes{client.CoreV1().Nodes()}, NodeName: "self", Backoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// peersNow returns the datastore's peers, failing t on an error.
func peersNow(t *testing.T, d *Datastore) []peers.Record {
	t.Helper()
	recs, bad, err := d.Peers()
	if err != nil || len(bad) > 0 {
		t.Fatalf("Peers: %v %v", bad, err)
	}
	return recs
}

// names returns the records' names.
var names = datastoretest.Names

// TestLocalBlocksWaitForPodCIDRs: without podCIDRs LocalBlocks keeps
// waiting and says why; once the Node gets them it returns them.
func TestLocalBlocksWaitForPodCIDRs(t *testing.T) {
	client := fake.NewClientset(node("self", "192.0.2.1"))
	d := open(t, client)
	var mu sync.Mutex
	var reasons []string
	type result struct {
		blocks []netip.Prefix
		err    error
	}
	done := make(chan result, 1)
	go func() {
		b, err := d.LocalBlocks(context.Background(), func(r string) {
			mu.Lock()
			reasons = append(reasons, r)
			mu.Unlock()
		})
		done <- result{b, err}
	}()
	netnstest.Eventually(t, waitLong, "a waiting reason naming spec.podCIDRs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(reasons, "waiting for spec.podCIDRs on node self")
	})
	select {
	case r := <-done:
		t.Fatalf("LocalBlocks returned %v, %v before the Node had podCIDRs", r.blocks, r.err)
	default:
	}
	n := node("self", "192.0.2.1", "10.244.1.0/24", "fd00:10:244:1::/64")
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		want := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}
		if r.err != nil || !slices.Equal(r.blocks, want) {
			t.Fatalf("LocalBlocks = %v, %v; want %v", r.blocks, r.err, want)
		}
	case <-time.After(waitLong):
		t.Fatal("LocalBlocks did not return after the Node got podCIDRs")
	}
}

// TestLocalBlocksRefusesBadPodCIDR: a podCIDR that cannot be a pod block
// is an error naming it.
func TestLocalBlocksRefusesBadPodCIDR(t *testing.T) {
	d := open(t, fake.NewClientset(node("self", "192.0.2.1", "127.0.0.0/24")))
	_, err := d.LocalBlocks(context.Background(), func(string) {})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.0/24") {
		t.Fatalf("LocalBlocks error = %v, want one naming 127.0.0.0/24", err)
	}
}

// patches counts the patch actions on nodes (subresource "" or "status").
func patches(client *fake.Clientset, sub string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" && a.GetSubresource() == sub {
			n++
		}
	}
	return n
}

// TestPublishPatchesOnce: our values land as annotations in one patch;
// publishing the same values again, or another Node changing, sends none;
// a changed value is patched, a value gone is removed; an annotation
// someone deletes is put back.
func TestPublishPatchesOnce(t *testing.T) {
	client := fake.NewClientset(node("self", "192.0.2.1", "10.244.1.0/24"))
	d := open(t, client)
	ctx := context.Background()
	self := peers.Record{Name: "self", HostIPv4: "192.0.2.1", HostIPv6: "2001:db8::1", VTEPMAC: "66:00:00:00:00:01", TunnelIPv4: "10.244.1.0",
		WireGuardPublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", WireGuardPort: "51821"}
	if err := d.Publish(self); err != nil {
		t.Fatal(err)
	}
	annotations := func() map[string]string {
		n, err := client.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations
	}
	want := map[string]string{AnnotationHostIPv4: "192.0.2.1", AnnotationHostIPv6: "2001:db8::1", AnnotationVTEPMAC: "66:00:00:00:00:01", AnnotationTunnelIPv4: "10.244.1.0",
		"routelet.io/wireguard-public-key": "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", "routelet.io/wireguard-port": "51821"}
	netnstest.Eventually(t, waitLong, "the annotations on Node self", func() bool { return mapsEqual(annotations(), want) })
	// The informer sees the patched Node; nothing more is sent.
	netnstest.Eventually(t, waitLong, "the informer to hold the patched Node", func() bool {
		n, err := d.cached("self")
		return err == nil && mapsEqual(n.annotations(), want)
	})
	if err := d.Publish(self); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node("other", "192.0.2.2", "10.244.2.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "the informer to see Node other", func() bool { return len(peersNow(t, d)) == 1 })
	d.wake()
	time.Sleep(200 * time.Millisecond) // give a wrong extra patch a chance to be sent; nothing to wait for
	if n := patches(client, ""); n != 1 {
		t.Fatalf("%d annotation patches, want 1: %v", n, client.Actions())
	}

	// A new WireGuard key (a rotation) at the default port.
	self.VTEPMAC, self.TunnelIPv4 = "66:00:00:00:00:02", ""
	self.WireGuardPublicKey, self.WireGuardPort = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=", ""
	if err := d.Publish(self); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{AnnotationHostIPv4: "192.0.2.1", AnnotationHostIPv6: "2001:db8::1", AnnotationVTEPMAC: "66:00:00:00:00:02",
		AnnotationWireGuardPublicKey: "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="}
	netnstest.Eventually(t, waitLong, "the changed annotations", func() bool { return mapsEqual(annotations(), want) })

	// Someone removes our annotations: they are put back.
	n, err := client.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations = map[string]string{"other.example/key": "x"}
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want["other.example/key"] = "x"
	netnstest.Eventually(t, waitLong, "the annotations put back beside the foreign one", func() bool { return mapsEqual(annotations(), want) })
}

// mapsEqual compares two string maps.
func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestReadySetsNetworkUnavailableFalse: ready patches nodes/status once,
// with a strategic merge patch and no get of the subresource, merging
// with the other conditions; set to True by someone else, or lost with
// the Node, it is set to False again.
func TestReadySetsNetworkUnavailableFalse(t *testing.T) {
	n := node("self", "192.0.2.1", "10.244.1.0/24")
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	client := fake.NewClientset(n)
	d := open(t, client)
	d.SetReady(false, "initial sync in progress")
	d.SetReady(true, "")
	ctx := context.Background()
	get := func() *corev1.Node {
		n, err := client.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	netnstest.Eventually(t, waitLong, "NetworkUnavailable=False", func() bool { return NetworkAvailable(get()) })
	netnstest.Eventually(t, waitLong, "the informer to see it", func() bool {
		n, err := d.cached("self")
		return err == nil && n.networkAvailable
	})
	d.SetReady(true, "")
	d.wake()
	time.Sleep(200 * time.Millisecond) // give a wrong extra patch a chance to be sent
	if got := patches(client, "status"); got != 1 {
		t.Fatalf("%d nodes/status patches, want 1", got)
	}
	for _, a := range client.Actions() {
		if a.GetSubresource() == "status" && a.GetVerb() != "patch" {
			t.Fatalf("%s on nodes/status: RBAC allows only patch there", a.GetVerb())
		}
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" && p.GetPatchType() != "application/strategic-merge-patch+json" {
			t.Fatalf("nodes/status patch type %s", p.GetPatchType())
		}
	}
	if got := get(); len(got.Status.Conditions) != 2 {
		t.Fatalf("conditions %v: the patch must merge, not replace", got.Status.Conditions)
	}

	// A cloud node controller marks the network unavailable: put back.
	cur := get()
	for i := range cur.Status.Conditions {
		if cur.Status.Conditions[i].Type == corev1.NodeNetworkUnavailable {
			cur.Status.Conditions[i].Status, cur.Status.Conditions[i].Reason = corev1.ConditionTrue, "NoRouteCreated"
		}
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "NetworkUnavailable=False again", func() bool { return NetworkAvailable(get()) })
	// The Node is deleted and registered again: set on the new one.
	if err := client.CoreV1().Nodes().Delete(ctx, "self", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node("self", "192.0.2.1", "10.244.1.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "NetworkUnavailable=False on the new Node", func() bool { return NetworkAvailable(get()) })
}

// TestPeersFollowNodes: a new Node with podCIDRs becomes a peer (host IP
// from the InternalIP, then from our annotation once set), a Node without
// podCIDRs is none, a deleted Node is gone; changed is called for each.
func TestPeersFollowNodes(t *testing.T) {
	client := fake.NewClientset(node("self", "192.0.2.1", "10.244.1.0/24"), node("nocidr", "192.0.2.9"))
	d := open(t, client)
	var changes atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.Watch(ctx, func() { changes.Add(1) }); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "the first list", func() bool { _, _, err := d.Peers(); return err == nil })
	if got := peersNow(t, d); len(got) != 0 {
		t.Fatalf("peers %v, want none (self and a Node without podCIDRs)", got)
	}
	nodes := client.CoreV1().Nodes()
	b := node("b", "192.0.2.2", "10.244.2.0/24", "fd00:10:244:2::/64")
	b.Status.Addresses = append(b.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8::2"})
	before := changes.Load()
	if _, err := nodes.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "Node b as a peer", func() bool { return len(peersNow(t, d)) == 1 })
	got := peersNow(t, d)[0]
	if got.Name != "b" || got.HostIPv4 != "192.0.2.2" || got.HostIPv6 != "2001:db8::2" ||
		!slices.Equal(got.Blocks, []string{"10.244.2.0/24", "fd00:10:244:2::/64"}) {
		t.Fatalf("peer %+v", got)
	}
	netnstest.Eventually(t, waitLong, "changed called", func() bool { return changes.Load() > before })

	b.Annotations = map[string]string{AnnotationHostIPv4: "198.51.100.2", AnnotationVTEPMAC: "66:00:00:00:00:02",
		"routelet.io/wireguard-public-key": "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", "routelet.io/wireguard-port": "51900"}
	before = changes.Load()
	if _, err := nodes.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "the annotation in the peer", func() bool {
		r := peersNow(t, d)
		return len(r) == 1 && r[0].HostIPv4 == "198.51.100.2" && r[0].VTEPMAC == "66:00:00:00:00:02" &&
			r[0].WireGuardPublicKey == "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=" && r[0].WireGuardPort == "51900"
	})
	netnstest.Eventually(t, waitLong, "changed for the annotation", func() bool { return changes.Load() > before })

	// kubelet's status updates change nothing routelet reads: no wake-up.
	// A change that does, after one, is delivered after it (in order):
	// exactly one call in all.
	cur, err := nodes.Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before = changes.Load()
	cur.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	cur.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}}}
	if cur, err = nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cur.Annotations[AnnotationTunnelIPv4] = "10.244.2.0"
	if _, err := nodes.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "the tunnel annotation in the peer", func() bool {
		r := peersNow(t, d)
		return len(r) == 1 && r[0].TunnelIPv4 == "10.244.2.0" && changes.Load() > before
	})
	time.Sleep(200 * time.Millisecond) // give a wrong extra call a chance to land
	if got := changes.Load() - before; got != 1 {
		t.Fatalf("changed called %d times for a status update and an annotation change, want 1", got)
	}
	before = changes.Load()
	if err := nodes.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "Node b gone", func() bool { return len(peersNow(t, d)) == 0 })
	netnstest.Eventually(t, waitLong, "changed called", func() bool { return changes.Load() > before })
}

// TestListErrorKeepsPeers: after the watch breaks and every re-list fails,
// the peers stay as they were (never "all gone"), the failures are
// counted, and once the API answers again a change is seen.
func TestListErrorKeepsPeers(t *testing.T) {
	client := fake.NewClientset(node("self", "192.0.2.1", "10.244.1.0/24"), node("b", "192.0.2.2", "10.244.2.0/24"), node("c", "192.0.2.3", "10.244.3.0/24"))
	var failing atomic.Bool
	var lists atomic.Int32
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			lists.Add(1)
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	// The watches, so the test can break one; a broken watch means a re-list.
	var mu sync.Mutex
	var watcher *watch.RaceFreeFakeWatcher
	real := client.WatchReactionChain[0] // the tracker's own
	client.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if failing.Load() {
			return true, nil, errors.New("connection refused")
		}
		_, w, err := real.React(a)
		if err != nil {
			return true, nil, err
		}
		fw := watch.NewRaceFreeFake()
		go func() {
			for ev := range w.ResultChan() {
				fw.Action(ev.Type, ev.Object)
			}
		}()
		mu.Lock()
		watcher = fw
		mu.Unlock()
		return true, fw, nil
	})
	d := open(t, client)
	netnstest.Eventually(t, waitLong, "peers b and c", func() bool {
		_, _, err := d.Peers()
		return err == nil && slices.Equal(names(peersNow(t, d)), []string{"b", "c"})
	})
	netnstest.Eventually(t, waitLong, "the watch", func() bool { mu.Lock(); defer mu.Unlock(); return watcher != nil })
	failing.Store(true)
	mu.Lock()
	watcher.Stop()
	mu.Unlock()
	netnstest.Eventually(t, waitLong, "failed re-lists", func() bool { return lists.Load() >= 2 })
	if got := names(peersNow(t, d)); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("peers after failed lists: %v, want b and c kept", got)
	}
	if got := counter(t, d, "list-watch"); got < 1 {
		t.Fatalf("routelet_kubernetes_api_errors_total{op=list-watch} = %v, want > 0", got)
	}
	if h := d.Health(); h.RequestErrors["list-watch"] < 1 || h.Reachable != nil || h.Liveness {
		t.Fatalf("health after failed lists: %+v; want the failed list-watches counted", h)
	}
	// The API comes back with c deleted: the re-list applies it.
	if err := client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("nodes"), "", "c"); err != nil {
		t.Fatal(err)
	}
	failing.Store(false)
	netnstest.Eventually(t, 2*time.Minute, "c gone after the API returned", func() bool {
		return slices.Equal(names(peersNow(t, d)), []string{"b"})
	})
}

// counter reads routelet_kubernetes_api_errors_total{op}.
func counter(t *testing.T, d *Datastore, op string) float64 {
	t.Helper()
	c, err := d.apiErrors.GetMetricWithLabelValues(op)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.ToFloat64(c)
}

// TestTransformKeepsWhatRouteletReads: of a Node the cache keeps its
// name, uid, resourceVersion and times, its record (routelet.io/
// annotations, podCIDRs, InternalIPs), its routelet.io/ annotations and
// whether NetworkUnavailable is routelet's False; managedFields, labels,
// foreign annotations, images, taints, other addresses and conditions are
// dropped, and the input is left as it was.
func TestTransformKeepsWhatRouteletReads(t *testing.T) {
	n := node("b", "192.0.2.2", "10.244.2.0/24")
	n.UID, n.ResourceVersion = "uid-b", "42"
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	n.Labels = map[string]string{"kubernetes.io/hostname": "b"}
	n.Annotations = map[string]string{AnnotationHostIPv4: "198.51.100.2", AnnotationTunnelIPv6: "", "node.alpha.kubernetes.io/ttl": "0",
		AnnotationWireGuardPublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", AnnotationWireGuardPort: "51821",
		AnnotationBGPAS: "64512", AnnotationBGPPeers: "192.0.2.254,as=65000"}
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Message: "kubelet is posting ready status"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: ConditionReason, Message: "up"}}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "b"})
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	orig := n.DeepCopy()
	out, err := Transform(n)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*cachedNode)
	if want := (metav1.ObjectMeta{Name: "b", UID: "uid-b", ResourceVersion: "42"}); !reflect.DeepEqual(got.ObjectMeta, want) {
		t.Fatalf("metadata %+v, want %+v", got.ObjectMeta, want)
	}
	if want := Record(n); !reflect.DeepEqual(got.record, want) || got.record.HostIPv4 != "198.51.100.2" ||
		got.record.WireGuardPublicKey != "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=" || got.record.WireGuardPort != "51821" ||
		got.record.BGPAS != "64512" {
		t.Fatalf("record %+v, want %+v", got.record, want)
	}
	if want := map[string]string{AnnotationHostIPv4: "198.51.100.2", AnnotationTunnelIPv6: "",
		AnnotationWireGuardPublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", AnnotationWireGuardPort: "51821",
		AnnotationBGPAS: "64512"}; !mapsEqual(got.annotations(), want) {
		t.Fatalf("annotations %v, want %v", got.annotations(), want)
	}
	if got.bgpPeers != "192.0.2.254,as=65000" {
		t.Fatalf("bgp-peers annotation %q not kept", got.bgpPeers)
	}
	if !got.networkAvailable {
		t.Fatal("NetworkUnavailable=False with routelet's reason not kept")
	}
	if !reflect.DeepEqual(n, orig) {
		t.Fatal("transform changed its input")
	}
	if again, _ := Transform(got); again != out {
		t.Fatal("a transformed Node is transformed again")
	}
	if len(Annotations) > len(got.annotation) || len(Annotations) > 16 {
		t.Fatalf("%d annotation keys, room for %d (and 16 bits of annotated)", len(Annotations), len(got.annotation))
	}
}

// TestBGPAnnotations: this node's BGP AS is published as
// routelet.io/bgp-as (removed when it has none) and a peer's reaches its
// record; the operator's routelet.io/bgp-peers on our Node is this node's
// BGP peers, left alone by every patch, and a change of it (only ours)
// wakes the watchers.
func TestBGPAnnotations(t *testing.T) {
	self := node("self", "192.0.2.1", "10.244.1.0/24")
	self.Annotations = map[string]string{AnnotationBGPPeers: "192.0.2.254,as=65000; 2001:db8::fe,as=65000,route-reflector;"}
	b := node("b", "192.0.2.2", "10.244.2.0/24")
	b.Annotations = map[string]string{AnnotationBGPAS: "65010", AnnotationBGPPeers: "198.51.100.1,as=65100"}
	client := fake.NewClientset(self, b)
	d := open(t, client)
	var hints atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.Watch(ctx, func() { hints.Add(1) }); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, waitLong, "the first list", func() bool { _, _, err := d.Peers(); return err == nil })
	if recs := peersNow(t, d); len(recs) != 1 || recs[0].BGPAS != "65010" {
		t.Fatalf("peers %+v, want b with AS 65010", recs)
	}
	wantPeers := []string{"192.0.2.254,as=65000", "2001:db8::fe,as=65000,route-reflector"}
	if specs, err := d.OwnBGPPeers(); err != nil || !slices.Equal(specs, wantPeers) {
		t.Fatalf("OwnBGPPeers = %q, %v; want %q", specs, err, wantPeers)
	}

	annotations := func() map[string]string {
		n, err := client.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations
	}
	rec := peers.Record{Name: "self", HostIPv4: "192.0.2.1", BGPAS: "64512"}
	if err := d.Publish(rec); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{AnnotationHostIPv4: "192.0.2.1", AnnotationBGPAS: "64512", AnnotationBGPPeers: self.Annotations[AnnotationBGPPeers]}
	netnstest.Eventually(t, waitLong, "bgp-as beside the operator's bgp-peers", func() bool { return mapsEqual(annotations(), want) })
	rec.BGPAS = ""
	if err := d.Publish(rec); err != nil {
		t.Fatal(err)
	}
	delete(want, AnnotationBGPAS)
	netnstest.Eventually(t, waitLong, "bgp-as removed, bgp-peers kept", func() bool { return mapsEqual(annotations(), want) })

	update := func(name string, change func(*corev1.Node)) {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(n)
		if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Neither a label on our Node nor another Node's bgp-peers wakes anyone.
	netnstest.Eventually(t, waitLong, "the informer to hold the patched Node", func() bool {
		n, err := d.cached("self")
		return err == nil && n.annotations()[AnnotationBGPAS] == ""
	})
	time.Sleep(100 * time.Millisecond)
	before := hints.Load()
	update("self", func(n *corev1.Node) { n.Labels = map[string]string{"example/x": "y"} })
	update("b", func(n *corev1.Node) { n.Annotations[AnnotationBGPPeers] = "198.51.100.2,as=65100" })
	time.Sleep(200 * time.Millisecond) // give a wrong hint a chance; nothing to wait for
	if n := hints.Load(); n != before {
		t.Errorf("%d hints after a label on our Node and another Node's bgp-peers, want none", n-before)
	}
	update("self", func(n *corev1.Node) { n.Annotations[AnnotationBGPPeers] = "192.0.2.253,as=65001" })
	netnstest.Eventually(t, waitLong, "a hint after our bgp-peers changed", func() bool { return hints.Load() > before })
	if specs, err := d.OwnBGPPeers(); err != nil || !slices.Equal(specs, []string{"192.0.2.253,as=65001"}) {
		t.Errorf("OwnBGPPeers = %q, %v; want the new spec", specs, err)
	}
	before = hints.Load()
	update("self", func(n *corev1.Node) { delete(n.Annotations, AnnotationBGPPeers) })
	netnstest.Eventually(t, waitLong, "a hint after our bgp-peers went", func() bool { return hints.Load() > before })
	if specs, err := d.OwnBGPPeers(); err != nil || len(specs) != 0 {
		t.Errorf("OwnBGPPeers without the annotation = %q, %v; want none", specs, err)
	}
}

// TestSplitBGPPeers: specs are split at ';', trimmed, empty ones dropped.
func TestSplitBGPPeers(t *testing.T) {
	for in, want := range map[string][]string{
		"":                            nil,
		" ; ;":                        nil,
		"10.0.0.1,as=1":               {"10.0.0.1,as=1"},
		" 10.0.0.1,as=1 ;\n::2,as=2 ": {"10.0.0.1,as=1", "::2,as=2"},
	} {
		if got := SplitBGPPeers(in); !slices.Equal(got, want) {
			t.Errorf("SplitBGPPeers(%q) = %q, want %q", in, got, want)
		}
	}
}
