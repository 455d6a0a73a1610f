package install

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPrivilegedChartApplies: the chart rendered with every value changed
// (customValues) into a namespace of its own server-side applies to a real
// kube-apiserver with strict field validation, and the stored DaemonSet
// carries the values.
func TestPrivilegedChartApplies(t *testing.T) {
	root := chartRoot(t)
	const ns = "routelet-system"
	o, docs := renderObjects(t, root, ns, customValues...)
	_, admin, dyn, mapper := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		got, err := applyStrict(ctx, dyn, mapper, d.data)
		if err != nil {
			t.Fatalf("server-side apply of the chart's %s: %v\n%s", d.file, err, d.data)
		}
		t.Logf("applied %s %s/%s", got.GetKind(), got.GetNamespace(), got.GetName())
	}
	ds, err := admin.AppsV1().DaemonSets(ns).Get(ctx, o.ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's DaemonSet after apply: %v", err)
	}
	spec := ds.Spec.Template.Spec
	if got := container(t, spec, "routeletd").Image; got != "registry.example.com/net/routelet:v0.1.0" {
		t.Errorf("stored routeletd image %q", got)
	}
	if len(spec.Tolerations) != 1 || spec.ServiceAccountName != o.sa.Name {
		t.Errorf("stored DaemonSet: tolerations %+v, service account %q", spec.Tolerations, spec.ServiceAccountName)
	}
	cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, o.cm.Name, metav1.GetOptions{})
	if err != nil || cm.Data["routeletd.yaml"] != o.cm.Data["routeletd.yaml"] {
		t.Errorf("stored ConfigMap: %v\n%s", err, cm.Data["routeletd.yaml"])
	}
}
