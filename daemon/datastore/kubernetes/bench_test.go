package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/routelet/routelet/internal/netnstest"
)

// benchNodes is how many peer Nodes BenchmarkPeerChange1000 caches.
const benchNodes = 1000

// benchNode is peer i's Node with routelet's annotations; tunnel is its
// tunnel address annotation.
func benchNode(i int, tunnel string) *corev1.Node {
	n := node(fmt.Sprintf("peer-%04d", i), fmt.Sprintf("172.16.%d.%d", i/250, 1+i%250), fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256))
	n.Annotations = map[string]string{AnnotationHostIPv4: n.Status.Addresses[0].Address,
		AnnotationVTEPMAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), AnnotationTunnelIPv4: tunnel}
	return n
}

// BenchmarkPeerChange1000 is the datastore's cost of one peer change with
// 1,000 peer Nodes cached: a watch event of one Node whose tunnel
// annotation changed, through the informer and the datastore's handler to
// the daemon's wake-up, then the Peers call the daemon makes on it.
func BenchmarkPeerChange1000(b *testing.B) {
	objs := []*corev1.Node{node("self", "192.0.2.1", "10.244.1.0/24")}
	for i := range benchNodes {
		objs = append(objs, benchNode(i, "a"))
	}
	client := &watchClient{w: watch.NewFakeWithChanSize(16, false)}
	for _, o := range objs {
		client.list.Items = append(client.list.Items, *o)
	}
	d, err := New(Options{Client: client, NodeName: "self"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	woken := make(chan struct{}, 1)
	wake := func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	}
	if err := d.Watch(ctx, wake); err != nil {
		b.Fatal(err)
	}
	netnstest.Eventually(b, 30*time.Second, "all Nodes cached", func() bool {
		recs, _, err := d.Peers()
		return err == nil && len(recs) == benchNodes
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		n := benchNode(i%benchNodes, fmt.Sprintf("10.0.%d.%d", i/256%256, i%256))
		n.ResourceVersion = strconv.Itoa(i + 2)
		client.w.Modify(n)
		<-woken
		recs, _, err := d.Peers()
		if err != nil || len(recs) != benchNodes {
			b.Fatalf("Peers: %d records, %v", len(recs), err)
		}
	}
}

// watchClient is a NodeClient serving a fixed list, then the events sent
// on w.
type watchClient struct {
	list corev1.NodeList
	w    *watch.FakeWatcher
}

// IsWatchListSemanticsUnSupported is true: the client answers a plain list.
func (*watchClient) IsWatchListSemanticsUnSupported() bool { return true }

// List returns the list, at resource version 1.
func (c *watchClient) List(context.Context, metav1.ListOptions) (*corev1.NodeList, error) {
	l := c.list.DeepCopy()
	l.ResourceVersion = "1"
	return l, nil
}

// Watch returns w (one watch: the bench's informer never re-watches).
func (c *watchClient) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return c.w, nil
}

// Patch is refused: the bench publishes nothing.
func (c *watchClient) Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.Node, error) {
	return nil, errors.New("no patches in the bench")
}
