package k8stest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/routelet/routelet/internal/netnstest"
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
	// A request without the admin certificate is refused: RBAC is on.
	anon := *c.Config
	anon.CertData, anon.KeyData = nil, nil
	cs3, err := kubernetes.NewForConfig(&anon)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs3.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err == nil {
		t.Errorf("anonymous get of node-a succeeded; want forbidden or unauthorized")
	}
}

// TestPrivilegedAPIServerInNetns runs etcd and kube-apiserver inside a fresh
// network namespace, reaches them from the test through DialerIn, and
// authenticates a service account's token from the TokenRequest API: the
// account is known (forbidden, not unauthorized) and RBAC gives it nothing.
func TestPrivilegedAPIServerInNetns(t *testing.T) {
	n := netnstest.NewT(t)
	c := Start(t, Options{NetNS: n.NetNS})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := cs.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "routelet-node"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service account: %v", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}
	saCS, err := kubernetes.NewForConfig(c.TokenConfig(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	_, err = saCS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("service account without roles lists nodes: %v, want forbidden", err)
	}
	if err != nil && !strings.Contains(err.Error(), "system:serviceaccount:default:routelet-node") {
		t.Errorf("forbidden error does not name the service account: %v", err)
	}
}
