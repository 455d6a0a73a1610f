package kubernetes

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
