package install

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/routelet/routelet/internal/k8stest"
	"github.com/routelet/routelet/internal/netnstest"
)

// fieldManager names this test's server-side applies.
const fieldManager = "routelet-manifest-test"

// startAPIServer starts a real kube-apiserver for t and returns it with an
// admin client, a dynamic client and the REST mapper applyStrict needs.
func startAPIServer(t *testing.T) (*k8stest.Cluster, *kubernetes.Clientset, dynamic.Interface, *restmapper.DeferredDiscoveryRESTMapper) {
	t.Helper()
	c := k8stest.Start(t, k8stest.Options{})
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, admin, dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery()))
}

// applyStrict server-side applies one YAML document, as
// `kubectl apply --server-side --validate=strict` does: unknown or
// duplicate fields are errors, not warnings.
func applyStrict(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, doc []byte) (*unstructured.Unstructured, error) {
	js, err := yaml.ToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("to JSON: %w", err)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	gvk := u.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("no resource for %s: %w", gvk, err)
	}
	var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if ns := u.GetNamespace(); ns != "" {
		r = dyn.Resource(m.Resource).Namespace(ns)
	}
	force := true
	return r.Patch(ctx, u.GetName(), types.ApplyPatchType, js, metav1.PatchOptions{
		FieldManager: fieldManager, FieldValidation: "Strict", Force: &force,
	})
}

// TestPrivilegedManifestsApplyAndRBAC applies every manifest in
// install/kubernetes to a real kube-apiserver with server-side apply and
// strict field validation, as `kubectl apply --server-side` sends them,
// then acts with the DaemonSet's service-account token (TokenRequest,
// bound by the manifests' ClusterRoleBinding): what the Kubernetes
// datastore does — get, list, watch and patch Nodes, patch nodes/status
// with a plain PATCH — is allowed, and nothing else: no secrets, no
// creating, replacing or deleting Nodes, no reading nodes/status.
func TestPrivilegedManifestsApplyAndRBAC(t *testing.T) {
	c, admin, dyn, mapper := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	o := loadObjects(t)
	// kube-system is made by the API server shortly after it is ready.
	netnstest.WaitFor(t, 30*time.Second, "namespace "+o.sa.Namespace, func() error {
		_, err := admin.CoreV1().Namespaces().Get(ctx, o.sa.Namespace, metav1.GetOptions{})
		return err
	})
	// Strict validation is on: a misspelt field is refused, naming it.
	bad := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: routelet-strict-probe\n  namespace: kube-system\ndata: {}\nbinaryDta: {}\n")
	if _, err := applyStrict(ctx, dyn, mapper, bad); err == nil || !strings.Contains(err.Error(), "binaryDta") {
		t.Fatalf("apply of a misspelt field = %v; want a strict validation error naming it", err)
	}

	for _, d := range manifestDocs(t) {
		got, err := applyStrict(ctx, dyn, mapper, d.data)
		if err != nil {
			t.Fatalf("server-side apply of %s: %v\n%s", d.file, err, d.data)
		}
		t.Logf("applied %s %s/%s from %s", got.GetKind(), got.GetNamespace(), got.GetName(), d.file)
	}
	// The objects as stored are the manifests' (strict validation dropped
	// nothing).
	ds, err := admin.AppsV1().DaemonSets(o.ds.Namespace).Get(ctx, o.ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the DaemonSet after apply: %v", err)
	}
	if s := ds.Spec.Template.Spec; s.ServiceAccountName != o.sa.Name || s.PriorityClassName != "system-node-critical" ||
		!s.HostNetwork || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("stored DaemonSet differs from the manifest: %+v", ds.Spec)
	}

	// Nodes as kube-controller-manager's node IPAM leaves them, and a
	// secret the daemon must not read.
	for i, name := range []string{"node-a", "node-b"} {
		cidr := fmt.Sprintf("10.244.%d.0/24", i+1)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Secrets(o.sa.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "not-for-routelet"}, StringData: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The daemon's credentials: a token of the DaemonSet's service account,
	// as kubelet projects into the pod.
	tr, err := admin.CoreV1().ServiceAccounts(o.sa.Namespace).CreateToken(ctx, o.sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request for %s/%s: %v", o.sa.Namespace, o.sa.Name, err)
	}
	sa, err := kubernetes.NewForConfig(c.TokenConfig(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	nodes := sa.CoreV1().Nodes()

	// RBAC takes a moment to see the new binding: wait for the first grant.
	netnstest.WaitFor(t, 30*time.Second, "the service account listing nodes", func() error {
		l, err := nodes.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) != 2 {
			return fmt.Errorf("listed %d nodes, want 2", len(l.Items))
		}
		return nil
	})
	if n, err := nodes.Get(ctx, "node-b", metav1.GetOptions{}); err != nil || !slices.Equal(n.Spec.PodCIDRs, []string{"10.244.2.0/24"}) {
		t.Errorf("get node-b as the service account: %v, podCIDRs %v", err, n.Spec.PodCIDRs)
	}

	w, err := nodes.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch nodes as the service account: %v", err)
	}
	defer w.Stop()

	// Its own Node's annotations, by patch.
	ann := []byte(`{"metadata":{"annotations":{"routelet.io/host-ipv4":"192.0.2.10"}}}`)
	if _, err := nodes.Patch(ctx, "node-a", types.StrategicMergePatchType, ann, metav1.PatchOptions{}); err != nil {
		t.Errorf("patch node-a's annotations as the service account: %v", err)
	}
	if !watchSees(t, w, "node-a", func(n *corev1.Node) bool { return n.Annotations["routelet.io/host-ipv4"] == "192.0.2.10" }) {
		t.Error("the service account's watch did not deliver node-a's annotation")
	}

	// NetworkUnavailable=False on nodes/status, by a plain PATCH.
	now := metav1.Now().UTC().Format(time.RFC3339)
	cond := []byte(`{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","reason":"RouteletIsUp","message":"routelet is running on this node","lastTransitionTime":"` + now + `","lastHeartbeatTime":"` + now + `"}]}}`)
	if _, err := nodes.Patch(ctx, "node-a", types.StrategicMergePatchType, cond, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("patch node-a's status as the service account: %v", err)
	}
	if n, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil || !hasCondition(n, corev1.NodeNetworkUnavailable, corev1.ConditionFalse) {
		t.Errorf("node-a after the status patch: %v, conditions %+v", err, n.Status.Conditions)
	}

	// And nothing more.
	nodeB, err := admin.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		what string
		do   func() error
	}{
		{"get a secret", func() error {
			_, err := sa.CoreV1().Secrets(o.sa.Namespace).Get(ctx, "not-for-routelet", metav1.GetOptions{})
			return err
		}},
		{"list secrets in " + o.sa.Namespace, func() error {
			_, err := sa.CoreV1().Secrets(o.sa.Namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list secrets cluster-wide", func() error {
			_, err := sa.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list pods", func() error { _, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }},
		{"list configmaps", func() error {
			_, err := sa.CoreV1().ConfigMaps(o.cm.Namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"patch its DaemonSet", func() error {
			_, err := sa.AppsV1().DaemonSets(o.ds.Namespace).Patch(ctx, o.ds.Name, types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		}},
		{"create a node", func() error {
			_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-evil"}}, metav1.CreateOptions{})
			return err
		}},
		{"update a node", func() error { _, err := nodes.Update(ctx, nodeB, metav1.UpdateOptions{}); return err }},
		// Patch-only RBAC on the subresource: a get-then-patch of the
		// status would fail here, so the datastore must send a plain PATCH.
		{"get nodes/status", func() error {
			return sa.CoreV1().RESTClient().Get().Resource("nodes").Name("node-a").SubResource("status").Do(ctx).Error()
		}},
		{"delete a node", func() error { return nodes.Delete(ctx, "node-b", metav1.DeleteOptions{}) }},
	} {
		// Forbidden, not unauthorized: the token is the account's (the
		// allowed calls above succeeded with it).
		if err := f.do(); !apierrors.IsForbidden(err) {
			t.Errorf("the service account may %s: %v, want forbidden", f.what, err)
		}
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); err != nil {
		t.Errorf("node-b after the service account's delete: %v", err)
	}
}

// watchSees waits on w for an event on the Node name for which ok holds.
func watchSees(t *testing.T, w watch.Interface, name string, ok func(*corev1.Node) bool) bool {
	t.Helper()
	timeout := time.After(netnstest.SettleTimeout)
	for {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				return false
			}
			if n, isNode := ev.Object.(*corev1.Node); isNode && n.Name == name && ok(n) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// hasCondition reports whether n has condition typ with status st.
func hasCondition(n *corev1.Node, typ corev1.NodeConditionType, st corev1.ConditionStatus) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == typ && c.Status == st {
			return true
		}
	}
	return false
}
