package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/routelet/routelet/internal/k8stest"
)

// TestKubernetesPodCIDROnNodeSubnetRefused: a Node whose spec.podCIDRs
// overlap the node's own connected subnet is refused as --pod-cidr would
// be: routeletd exits, naming the block, instead of routing the uplink's
// subnet to pods.
func TestKubernetesPodCIDROnNodeSubnetRefused(t *testing.T) {
	tn := newTestNode(t, true)
	api := k8stest.Start(t, k8stest.Options{NetNS: tn.node.NS})
	cs, err := k8s.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{PodCIDR: "192.0.2.0/25", PodCIDRs: []string{"192.0.2.0/25"}}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, exited := tn.runDaemonArgs(time.Minute, nil, "--node-name=node-a", "--state-dir="+tn.stateDir,
		"--datastore=kubernetes", "--kubeconfig="+api.Kubeconfig, "--health-addr=")
	if !exited {
		t.Fatalf("routeletd kept running with podCIDR 192.0.2.0/25 on the uplink's subnet 192.0.2.0/24:\n%s", out)
	}
	if code == 0 || !strings.Contains(out, "192.0.2.0/25") {
		t.Errorf("exit %d, output does not name 192.0.2.0/25:\n%s", code, out)
	}
}
