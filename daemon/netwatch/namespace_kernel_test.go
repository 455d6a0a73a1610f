package netwatch

import (
	"context"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// startWithVeth makes a fresh namespace holding the veth pair name+"0" /
// name+"1", starts w in it (stopped when the test ends) and returns the
// namespace and name+"0"'s index. setup, when set, prepares the namespace
// before the veth is made (its sysctl defaults); register, when set,
// registers w's owners before it starts.
func startWithVeth(t *testing.T, w *Watcher, name string, setup func(*netnstest.NS), register func(*Watcher)) (*netnstest.NS, int) {
	t.Helper()
	n := netnstest.NewT(t)
	if setup != nil {
		setup(n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var index int
	err := n.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name + "0"}, PeerName: name + "1"}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(name + "0")
		if err != nil {
			return err
		}
		index = l.Attrs().Index
		if register != nil {
			register(w)
		}
		return w.Start(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, index
}

// TestStartBindsNamespaceKernel: a watcher started in a namespace names an
// interface index it has no link notification for (a neighbour event can
// arrive before its link's) from that namespace, whichever thread asks:
// its pumps and handlers run on threads of the process's own namespace.
func TestStartBindsNamespaceKernel(t *testing.T) {
	w := New(nil)
	_, index := startWithVeth(t, w, "nwns", nil, nil)
	// Forget the name Start listed, as if the link's notification had not
	// been handled yet, and ask from this goroutine, outside the namespace.
	w.names.del(index)
	if got := w.names.get(index); got != "nwns0" {
		t.Fatalf("index %d named %q outside the watcher's namespace, want nwns0 (its name there)", index, got)
	}
}
