package k8stest

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestPrivilegedNodePodCIDRsRoundTrip starts etcd and kube-apiserver on
// loopback, creates a Node with spec.podCIDRs as kube-controller-manager's
// node IPAM would set them, and reads them back through a fresh client.
func TestPrivilegedNodePodCIDRsRoundTrip(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.244.1.0/24", "fd00:10:244:1::/64"}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec:       corev1.NodeSpec{PodCIDR: want[0], PodCIDRs: want},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	cs2, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs2.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if !slices.Equal(got.Spec.PodCIDRs, want) || got.Spec.PodCIDR != want[0] {
		t.Errorf("node-a podCIDRs = %v (podCIDR %q), want %v", got.Spec.PodCIDRs, got.Spec.PodCIDR, want)
	}
	// A request without the admin token is refused: authentication is on.
	anon := *c.Config
	anon.BearerToken = ""
	cs3, err := kubernetes.NewForConfig(&anon)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs3.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err == nil {
		t.Errorf("anonymous get of node-a succeeded; want forbidden or unauthorized")
	}
}
