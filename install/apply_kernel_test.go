package install

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/routelet/routelet/internal/k8stest"
)

// TestPrivilegedManifestsApplyAndRBAC creates every manifest object in a
// real kube-apiserver with server-side strict field validation, then acts
// with the DaemonSet's service-account token: everything the Kubernetes
// datastore does to Nodes is allowed (nodes/status by a plain PATCH), and
// anything else — secrets, creating, replacing or deleting Nodes — is
// forbidden.
func TestPrivilegedManifestsApplyAndRBAC(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	strict := metav1.CreateOptions{FieldValidation: "Strict"}
	o := loadObjects(t)

	// kube-system is made by the API server shortly after it is ready.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := admin.CoreV1().ServiceAccounts(o.sa.Namespace).Create(ctx, o.sa, strict)
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("create service account %s/%s: %v", o.sa.Namespace, o.sa.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, o.role, strict); err != nil {
		t.Fatalf("create ClusterRole: %v", err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, o.binding, strict); err != nil {
		t.Fatalf("create ClusterRoleBinding: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(o.cm.Namespace).Create(ctx, o.cm, strict); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	if _, err := admin.AppsV1().DaemonSets(o.ds.Namespace).Create(ctx, o.ds, strict); err != nil {
		t.Fatalf("create DaemonSet: %v", err)
	}

	tr, err := admin.CoreV1().ServiceAccounts(o.sa.Namespace).CreateToken(ctx, o.sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", o.sa.Name, err)
	}
	sa, err := kubernetes.NewForConfig(c.TokenConfig(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, strict); err != nil {
		t.Fatalf("create node: %v", err)
	}

	// Allowed: what the datastore does.
	nodes := sa.CoreV1().Nodes()
	if _, err := nodes.Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("get node: %v", err)
	}
	if _, err := nodes.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list nodes: %v", err)
	}
	if w, err := nodes.Watch(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("watch nodes: %v", err)
	} else {
		w.Stop()
	}
	ann := []byte(`{"metadata":{"annotations":{"routelet.io/test":"1"}}}`)
	if _, err := nodes.Patch(ctx, "node-a", types.MergePatchType, ann, metav1.PatchOptions{FieldValidation: "Strict"}); err != nil {
		t.Errorf("patch node annotations: %v", err)
	}
	cond := []byte(`{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","reason":"RouteletIsUp","message":"routelet is running on this node","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	got, err := nodes.Patch(ctx, "node-a", types.StrategicMergePatchType, cond, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Errorf("patch nodes/status: %v", err)
	} else if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != corev1.NodeNetworkUnavailable {
		t.Errorf("conditions after the status patch: %+v", got.Status.Conditions)
	}

	// Forbidden: the rest.
	forbidden := map[string]error{}
	_, forbidden["list secrets"] = sa.CoreV1().Secrets(o.sa.Namespace).List(ctx, metav1.ListOptions{})
	_, forbidden["get secret"] = sa.CoreV1().Secrets("default").Get(ctx, "any", metav1.GetOptions{})
	_, forbidden["create node"] = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-x"}}, metav1.CreateOptions{})
	cur, _ := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	_, forbidden["update node"] = nodes.Update(ctx, cur, metav1.UpdateOptions{})
	forbidden["delete node"] = nodes.Delete(ctx, "node-a", metav1.DeleteOptions{})
	_, forbidden["get nodes/status"] = sa.CoreV1().RESTClient().Get().Resource("nodes").Name("node-a").SubResource("status").DoRaw(ctx)
	_, forbidden["list pods"] = sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	_, forbidden["list configmaps"] = sa.CoreV1().ConfigMaps(o.cm.Namespace).List(ctx, metav1.ListOptions{})
	_, forbidden["patch daemonset"] = sa.AppsV1().DaemonSets(o.ds.Namespace).Patch(ctx, o.ds.Name, types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	for what, err := range forbidden {
		// Forbidden, not unauthorized: the token is the account's (the
		// allowed calls above succeeded with it).
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with the DaemonSet's token: %v, want forbidden", what, err)
		}
	}

	// The objects as stored are the manifests' (strict validation dropped
	// nothing).
	ds, err := admin.AppsV1().DaemonSets(o.ds.Namespace).Get(ctx, o.ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" || !ds.Spec.Template.Spec.HostNetwork ||
		ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("stored DaemonSet differs from the manifest: %+v", ds.Spec.Template.Spec)
	}
}
