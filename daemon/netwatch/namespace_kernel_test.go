package netwatch

import (
	"context"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestStartBindsNamespaceKernel: a watcher started in a namespace names an
// interface index it has no link notification for (a neighbour event can
// arrive before its link's) from that namespace, whichever thread asks:
// its pumps and handlers run on threads of the process's own namespace.
func TestStartBindsNamespaceKernel(t *testing.T) {
	n := netnstest.NewT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := New(nil)
	var index int
	err := n.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nwns0"}, PeerName: "nwns1"}); err != nil {
			return err
		}
		l, err := netlink.LinkByName("nwns0")
		if err != nil {
			return err
		}
		index = l.Attrs().Index
		return w.Start(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Forget the name Start listed, as if the link's notification had not
	// been handled yet, and ask from this goroutine, outside the namespace.
	w.names.del(index)
	if got := w.names.get(index); got != "nwns0" {
		t.Fatalf("index %d named %q outside the watcher's namespace, want nwns0 (its name there)", index, got)
	}
}
