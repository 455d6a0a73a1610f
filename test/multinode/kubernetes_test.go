package multinode

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	k8sds "github.com/routelet/routelet/daemon/datastore/kubernetes"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/k8stest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
)

// apiAddr is where kube-apiserver serves, in the router namespace: the
// router's address on the bridge, reachable from every node.
var apiAddr = netip.MustParseAddr("10.0.1.1")

// serviceAccountKubeconfig creates the ServiceAccount, ClusterRole and
// ClusterRoleBinding of install/kubernetes in api, asks the TokenRequest
// API for the account's token and writes a kubeconfig holding only that
// token (no admin credentials) into dir.
func serviceAccountKubeconfig(t *testing.T, api *k8stest.Cluster, admin *kubernetes.Clientset, dir string) string {
	t.Helper()
	ctx := context.Background()
	var sa *corev1.ServiceAccount
	for _, f := range []string{"00-serviceaccount.yaml", "01-rbac.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "install", "kubernetes", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := create(ctx, admin, obj); err != nil {
				t.Fatalf("%s: create %T: %v", f, obj, err)
			}
			if o, ok := obj.(*corev1.ServiceAccount); ok {
				sa = o
			}
		}
	}
	if sa == nil {
		t.Fatal("no ServiceAccount in install/kubernetes/00-serviceaccount.yaml")
	}
	tr, err := admin.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request for %s/%s: %v", sa.Namespace, sa.Name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: api.URL, CertificateAuthorityData: api.CA}
	kc.AuthInfos["routelet"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "routelet"}
	kc.CurrentContext = "test"
	path := filepath.Join(dir, "routelet.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// create creates one manifest object of the kinds serviceAccountKubeconfig
// reads, with server-side strict field validation.
func create(ctx context.Context, cs *kubernetes.Clientset, obj runtime.Object) error {
	strict := metav1.CreateOptions{FieldValidation: "Strict"}
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, strict)
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, strict)
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, strict)
	default:
		err = fmt.Errorf("unexpected kind %T", obj)
	}
	return err
}

// k8sNode is the Node object of spec as kube-controller-manager's node
// IPAM leaves it: spec.podCIDRs (v4 and v6) set, unless noCIDRs.
func k8sNode(spec cluster.NodeSpec, noCIDRs bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: spec.Name}}
	if !noCIDRs {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = spec.Block4, []string{spec.Block4, spec.Block6}
	}
	return n
}

// createNode creates n in the API server.
func createNode(t *testing.T, admin *kubernetes.Clientset, n *corev1.Node) {
	t.Helper()
	if _, err := admin.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("create Node %s: %v", n.Name, err)
	}
}

// deleteNode deletes Node name.
func deleteNode(t *testing.T, admin *kubernetes.Clientset, name string) {
	t.Helper()
	if err := admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Node %s: %v", name, err)
	}
}

// waitReadyFile waits until n's daemon.json says ready.
func waitReadyFile(t *testing.T, n *node) {
	t.Helper()
	netnstest.Eventually(t, netnstest.ReadyTimeout, "routeletd on "+n.Spec.Name+" ready", func() bool {
		st, err := n.Store.ReadDaemonStatus()
		return err == nil && st.Ready
	})
}

// wantAnnotations is what the daemon of spec publishes on its Node (VXLAN,
// dual stack).
func wantAnnotations(spec cluster.NodeSpec) map[string]string {
	return map[string]string{
		k8sds.AnnotationHostIPv4: hostAddr(spec.Host4), k8sds.AnnotationHostIPv6: hostAddr(spec.Host6),
		k8sds.AnnotationVTEPMAC: overlay.VTEPMAC(spec.Name, 4).String(), k8sds.AnnotationVTEPMACv6: overlay.VTEPMAC(spec.Name, 6).String(),
		k8sds.AnnotationTunnelIPv4: firstAddr(spec.Block4), k8sds.AnnotationTunnelIPv6: firstAddr(spec.Block6),
	}
}

// routeletAnnotations returns the routelet.io/ annotations of Node name.
func routeletAnnotations(admin *kubernetes.Clientset, name string) (map[string]string, *corev1.Node, error) {
	n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, k8sds.AnnotationPrefix) {
			out[k] = v
		}
	}
	return out, n, nil
}

// published checks that the Node of spec carries what its daemon
// publishes: the routelet.io/ annotations and NetworkUnavailable=False.
func published(admin *kubernetes.Clientset, spec cluster.NodeSpec) error {
	got, obj, err := routeletAnnotations(admin, spec.Name)
	if err != nil {
		return err
	}
	if want := wantAnnotations(spec); !maps.Equal(got, want) {
		return fmt.Errorf("annotations %v, want %v", got, want)
	}
	if !k8sds.NetworkAvailable(obj) {
		return fmt.Errorf("conditions %+v: no NetworkUnavailable=False with reason %s", obj.Status.Conditions, k8sds.ConditionReason)
	}
	return nil
}

// TestKubernetesDatastore runs the three nodes' routeletd with --datastore
// kubernetes against one real kube-apiserver (and etcd) in the router
// namespace, authenticated with the token of the manifests' ServiceAccount
// (so the manifests' ClusterRole is shown to be enough): a Node without
// podCIDRs keeps its daemon waiting until they arrive; each daemon
// publishes its annotations and NetworkUnavailable=False; pods reach each
// other across nodes over IPv4 and IPv6; a deleted Node's routes, ARP, FDB
// and allowlist entries go; an API server stopped for 30 s removes no
// route, and a Node created after it returns is programmed.
func TestKubernetesDatastore(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	work := t.TempDir()
	tc := buildCluster(t, cluster.Options{Nodes: specs})
	c := tc.c
	api := k8stest.Start(t, k8stest.Options{NetNS: c.Router, Addr: apiAddr})
	admin, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := serviceAccountKubeconfig(t, api, admin, work)

	a, b, cn := tc.node("a"), tc.node("b"), tc.node("c")
	createNode(t, admin, k8sNode(a.Spec, false))
	createNode(t, admin, k8sNode(b.Spec, false))
	createNode(t, admin, k8sNode(cn.Spec, true))
	for _, n := range tc.nodes {
		startDaemon(t, n, "--datastore=kubernetes", "--kubeconfig="+kubeconfig, "--encapsulation=vxlan", "--grace-period=1s",
			"--resync-period=5s") // full re-reads of the peers during the outage, too
	}
	waitReadyFile(t, a)
	waitReadyFile(t, b)

	// c has no podCIDRs yet: not ready, and says why; so does
	// `routeletd status` on c, from the running daemon.
	waitNotReady(t, cn, "waiting for spec.podCIDRs on node c")
	k8sFlags := []string{"--datastore=kubernetes", "--kubeconfig=" + kubeconfig, "--encapsulation=vxlan"}
	wantStatus(t, cn, k8sFlags, "routeletd is running", "NO: waiting for spec.podCIDRs on node c", "kubernetes: not read yet")
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q,%q]}}`, cn.Spec.Block4, cn.Spec.Block4, cn.Spec.Block6)
	if _, err := admin.CoreV1().Nodes().Patch(context.Background(), "c", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReadyFile(t, cn) // the same daemon, no restart

	for _, n := range tc.nodes {
		netnstest.WaitFor(t, time.Minute, "Node "+n.Spec.Name+": routelet.io/ annotations and NetworkUnavailable=False", func() error {
			return published(admin, n.Spec)
		})
	}
	ctx := context.Background()
	for _, n := range tc.nodes {
		if _, err := c.AddPod(ctx, n.Node, n.Spec.Name+"-pod0"); err != nil {
			t.Fatal(err)
		}
	}
	tc.checkAll("vxlan")
	if bad := tc.reachability(func(_, _ *node) bool { return true }); len(bad) > 0 {
		t.Fatalf("pods that should reach each other do not:\n%s", strings.Join(bad, "\n"))
	}
	// With the Kubernetes datastore (no nodes/), status and diagnose take
	// the peers from the running daemon: pods on different nodes
	// diagnose clean.
	diagnoseAcross(t, tc, k8sFlags)
	wantStatus(t, a, k8sFlags, "Ready:", "kubernetes: ok: 2 peer records, 2 valid peers", "Peers: 2 (2 ok, 0 with problems)")

	t.Run("a deleted Node's routes, ARP, FDB and allowlist entries go", func(t *testing.T) {
		tc := tc.in(t)
		deleteNode(t, admin, "c")
		for _, n := range []*node{a, b} {
			tc.waitDataplane(n, 30*time.Second, "after Node c was deleted", expected(n, "vxlan", withoutNode(tc.peersOf(n), cn)))
		}
		for _, set := range []string{"routelet-vxlan-peers", "routelet-vxlan-peers-v6"} {
			if got, want := a.setMembers(set), hostIPs(b, set); !slices.Equal(got, want) {
				t.Errorf("node a: %s = %v after Node c was deleted, want %v", set, got, want)
			}
		}
		for _, block := range []string{cn.Spec.Block4, cn.Spec.Block6} {
			if slices.Contains(append(a.setMembers("routelet-pools"), a.setMembers("routelet-pools-v6")...), block) {
				t.Errorf("node a: c's block %s still in the pools after Node c was deleted", block)
			}
		}
		// Created again (as a re-registering kubelet would, podCIDRs from
		// the node IPAM): c's daemon publishes again and every node has
		// every peer back.
		createNode(t, admin, k8sNode(cn.Spec, false))
		tc.checkAll("vxlan")
		netnstest.WaitFor(t, time.Minute, "the new Node c: annotations and NetworkUnavailable=False", func() error {
			return published(admin, cn.Spec)
		})
	})

	t.Run("API server stopped for 30s: no route removed, a change after it is applied", func(t *testing.T) {
		tc := tc.in(t)
		before := tc.dataplanes(tc.nodes)
		api.StopAPIServer(t)
		tc.keepDataplanes(tc.nodes, before, time.Now(), 30*time.Second, "the API server outage")
		if bad := tc.reachability(func(_, _ *node) bool { return true }); len(bad) > 0 {
			t.Errorf("pods lost each other during the outage:\n%s", strings.Join(bad, "\n"))
		}
		for _, n := range tc.nodes {
			if !n.metricAbove(`routelet_kubernetes_api_errors_total{op="list-watch"}`, 0) {
				t.Errorf("node %s: routelet_kubernetes_api_errors_total{op=\"list-watch\"} not counted during the outage", n.Spec.Name)
			}
		}
		api.StartAPIServer(t)
		// A new Node (a host without routelet's daemon, its values set by
		// hand) after the API server is back: every daemon programs it.
		d := &node{Node: &cluster.Node{Spec: cluster.NodeSpec{Name: "d", Host4: "10.0.1.77/24", Host6: "fd00:1::77/64", Gw4: "10.0.1.1",
			Block4: "10.244.77.0/24", Block6: "fd00:244:77::/120"}}}
		dn := k8sNode(d.Spec, false)
		dn.Annotations = wantAnnotations(d.Spec)
		createNode(t, admin, dn)
		for _, n := range tc.nodes {
			tc.waitDataplane(n, time.Minute, "after Node d was created past the outage", expected(n, "vxlan", append(tc.peersOf(n), d)))
		}
	})
}

// wantStatus runs `routeletd status` on n with the daemon's flags and
// fails t unless its text holds every one of wants.
func wantStatus(t *testing.T, n *node, flags []string, wants ...string) {
	t.Helper()
	args := append([]string{"status", "--node-name=" + n.Spec.Name, "--state-dir=" + n.StateDir}, flags...)
	out, err := routeletd(n, args...)
	if err != nil {
		t.Fatalf("routeletd status on %s: %v\n%s", n.Spec.Name, err, out)
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("routeletd status on %s lacks %q:\n%s", n.Spec.Name, want, out)
		}
	}
}

// diagnoseAcross diagnoses, on the source's node, each node's first pod
// to the next node's over IPv4 and IPv6 with the daemon's flags: every
// run exits 0 with the running daemon as its source.
func diagnoseAcross(t *testing.T, tc *testCluster, flags []string) {
	t.Helper()
	for i, n := range tc.nodes {
		m := tc.nodes[(i+1)%len(tc.nodes)]
		for _, v := range []int{4, 6} {
			src, dst := podRef(n, n, n.Pods[0], v), podRef(n, m, m.Pods[0], v)
			r := diagnoseMode(t, n, flags, src, dst)
			if r.code != 0 || r.rep.Source != statusapi.SourceDaemon {
				t.Errorf("diagnose %s → %s on %s: exit %d, source %q, failing %v:\n%s", src, dst, n.Spec.Name, r.code, r.rep.Source, r.failing(), r.out)
			}
		}
	}
}

// in returns c for subtest t (its waits fail t).
func (c *testCluster) in(t *testing.T) *testCluster {
	cc := *c
	cc.t = t
	return &cc
}

// withoutNode returns ns without x.
func withoutNode(ns []*node, x *node) []*node {
	return slices.DeleteFunc(slices.Clone(ns), func(n *node) bool { return n == x })
}

// hostIPs returns n's host address of the family of allowlist set (the
// "-v6" twin is IPv6), as the set lists it.
func hostIPs(n *node, set string) []string {
	if strings.HasSuffix(set, "-v6") {
		return []string{hostAddr(n.Spec.Host6)}
	}
	return []string{hostAddr(n.Spec.Host4)}
}

// metricAbove reports whether n's /metrics serves sample (name and
// labels) with a value above min.
func (n *node) metricAbove(sample string, min float64) bool {
	code, body, err := httpGet(n.CNI.NS, "http://127.0.0.1:9099/metrics")
	if err != nil || code != http.StatusOK {
		return false
	}
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f > min
			}
		}
	}
	return false
}
