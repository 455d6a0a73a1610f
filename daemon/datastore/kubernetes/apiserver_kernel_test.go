package kubernetes

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/routelet/routelet/internal/k8stest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/peers"
)

// TestPrivilegedWireGuardAnnotationsAPIServer: against a real
// kube-apiserver, this node's WireGuard key and port are patched onto its
// Node as routelet.io/wireguard-public-key and routelet.io/wireguard-port
// (the API server accepts the keys and values), and a peer Node's reach
// the datastore's record through the informer and its transform.
func TestPrivilegedWireGuardAnnotationsAPIServer(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "runs etcd and kube-apiserver as processes the test owns")
	c := k8stest.Start(t, k8stest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	const keySelf, keyB = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
	b := node("b", "192.0.2.2", "10.244.2.0/24")
	b.Annotations = map[string]string{AnnotationWireGuardPublicKey: keyB, AnnotationWireGuardPort: "51900"}
	for _, n := range []*corev1.Node{node("self", "192.0.2.1", "10.244.1.0/24"), b} {
		n.Spec.PodCIDR = n.Spec.PodCIDRs[0] // as node IPAM sets both
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("create node %s: %v", n.Name, err)
		}
	}
	nc, err := NewNodeClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Client: nc, NodeName: "self", Backoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Publish(peers.Record{Name: "self", HostIPv4: "192.0.2.1", WireGuardPublicKey: keySelf, WireGuardPort: "51821"}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, time.Minute, "the WireGuard annotations on Node self", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
		return err == nil && n.Annotations[AnnotationWireGuardPublicKey] == keySelf && n.Annotations[AnnotationWireGuardPort] == "51821"
	})
	netnstest.Eventually(t, time.Minute, "node b's WireGuard key and port in its record", func() bool {
		recs, _, err := d.Peers()
		return err == nil && len(recs) == 1 && recs[0].Name == "b" && recs[0].WireGuardPublicKey == keyB && recs[0].WireGuardPort == "51900"
	})
}

// TestPrivilegedBGPAnnotationsAPIServer: against a real kube-apiserver,
// this node's AS is patched onto its Node as routelet.io/bgp-as beside
// the operator's routelet.io/bgp-peers, which no patch touches; that
// annotation is this node's BGP peers, and changing it on the API server
// wakes the watch; a peer Node's AS reaches its record.
func TestPrivilegedBGPAnnotationsAPIServer(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "runs etcd and kube-apiserver as processes the test owns")
	c := k8stest.Start(t, k8stest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	const tor = "192.0.2.254,as=65000;2001:db8::fe,as=65000,route-reflector"
	self := node("self", "192.0.2.1", "10.244.1.0/24")
	self.Annotations = map[string]string{AnnotationBGPPeers: tor}
	b := node("b", "192.0.2.2", "10.244.2.0/24")
	b.Annotations = map[string]string{AnnotationBGPAS: "65010"}
	for _, n := range []*corev1.Node{self, b} {
		n.Spec.PodCIDR = n.Spec.PodCIDRs[0]
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("create node %s: %v", n.Name, err)
		}
	}
	nc, err := NewNodeClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Client: nc, NodeName: "self", Backoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var hints atomic.Int32
	if err := d.Watch(ctx, func() { hints.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(peers.Record{Name: "self", HostIPv4: "192.0.2.1", BGPAS: "64512"}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, time.Minute, "bgp-as on Node self beside bgp-peers", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
		return err == nil && n.Annotations[AnnotationBGPAS] == "64512" && n.Annotations[AnnotationBGPPeers] == tor
	})
	netnstest.Eventually(t, time.Minute, "node b's AS in its record", func() bool {
		recs, _, err := d.Peers()
		return err == nil && len(recs) == 1 && recs[0].Name == "b" && recs[0].BGPAS == "65010"
	})
	if specs, err := d.OwnBGPPeers(); err != nil || !slices.Equal(specs, []string{"192.0.2.254,as=65000", "2001:db8::fe,as=65000,route-reflector"}) {
		t.Fatalf("OwnBGPPeers = %q, %v", specs, err)
	}
	before := hints.Load()
	patch := []byte(`{"metadata":{"annotations":{"` + AnnotationBGPPeers + `":"192.0.2.253,as=65001"}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "self", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, time.Minute, "a hint and the new spec after the operator's change", func() bool {
		specs, err := d.OwnBGPPeers()
		return hints.Load() > before && err == nil && slices.Equal(specs, []string{"192.0.2.253,as=65001"})
	})
	n, err := cs.CoreV1().Nodes().Get(ctx, "self", metav1.GetOptions{})
	if err != nil || n.Annotations[AnnotationBGPAS] != "64512" {
		t.Fatalf("Node self after the operator's change: %v, %v", n.Annotations, err)
	}
}
