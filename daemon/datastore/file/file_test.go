package file

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/datastore/datastoretest"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

func newStore(t *testing.T) *state.Store {
	t.Helper()
	s, err := state.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// names returns the records' names.
var names = datastoretest.Names

// TestFileDatastore: blocks are --pod-cidr at once; this node's record is
// written by Publish, never returned as a peer, and re-written when it is
// removed or altered; peers come from nodes/, changed files re-read on
// their events, unreadable ones reported by a full read.
func TestFileDatastore(t *testing.T) {
	s := newStore(t)
	blocks := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}
	d := New(s, blocks, quiet)
	got, err := d.LocalBlocks(context.Background(), func(string) { t.Error("the file datastore waited") })
	if err != nil || !slices.Equal(got, blocks) {
		t.Fatalf("LocalBlocks = %v, %v; want %v", got, err, blocks)
	}
	self := peers.Record{Name: "node-a", HostIPv4: "192.0.2.10", Blocks: []string{"10.244.1.0/24"}, VTEPMAC: "66:00:00:00:00:0a"}
	if err := d.Publish(self); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GetNode("node-a"); err != nil || n.HostIPv4 != "192.0.2.10" || n.VTEPMAC != self.VTEPMAC {
		t.Fatalf("own record after Publish = %+v, %v", n, err)
	}
	if err := s.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.11", Blocks: []string{"10.244.2.0/24"}, Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.NodesDir(), "node-c.json"), []byte("{"), 0o600)
	ps, bad, err := d.Peers()
	if err != nil || !slices.Equal(names(ps), []string{"node-b"}) || len(bad) != 1 {
		t.Fatalf("Peers = %v, bad %v, %v; want [node-b] and one bad record", names(ps), bad, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 100)
	if err := d.Watch(ctx, func() { changed <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	// The operator removes our record and alters node-b's.
	if err := s.DeleteNode("node-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.12", Blocks: []string{"10.244.2.0/24"}, Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("no change hint within 10s")
		}
		ps, _, err = d.Peers()
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == 1 && ps[0].HostIPv4 == "192.0.2.12" {
			if _, err := s.GetNode("node-a"); err == nil {
				break
			}
		}
	}
	if slices.Contains(names(ps), "node-a") {
		t.Errorf("own record returned as a peer: %v", names(ps))
	}

}

// TestUnlistableNodesDir: a nodes/ that cannot be listed is an error, not
// "no peers".
func TestUnlistableNodesDir(t *testing.T) {
	s := newStore(t)
	d := New(s, nil, quiet)
	if err := os.RemoveAll(s.NodesDir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Peers(); err == nil {
		t.Error("Peers with nodes/ gone: no error")
	}
}

// TestFileDatastoreWireGuard: this node's WireGuard key and port reach its
// record (and a new key, published again after a rotation, replaces the
// old one); a peer's come back as they are in its record.
func TestFileDatastoreWireGuard(t *testing.T) {
	s := newStore(t)
	d := New(s, nil, quiet)
	self := peers.Record{Name: "node-a", HostIPv4: "192.0.2.10", WireGuardPublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", WireGuardPort: "51821"}
	if err := d.Publish(self); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GetNode("node-a"); err != nil || n.WireGuardPublicKey != self.WireGuardPublicKey || n.WireGuardPort != 51821 {
		t.Fatalf("own record after Publish = %+v, %v; want the WireGuard key at 51821", n, err)
	}
	self.WireGuardPublicKey, self.WireGuardPort = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=", ""
	if err := d.Publish(self); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GetNode("node-a"); err != nil || n.WireGuardPublicKey != self.WireGuardPublicKey || n.WireGuardPort != 0 {
		t.Fatalf("own record after publishing a new key = %+v, %v; want the new key at the default port", n, err)
	}
	if err := s.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.11", WireGuardPublicKey: "not a key", WireGuardPort: 70000, Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ps, _, err := d.Peers()
	if err != nil || len(ps) != 1 || ps[0].WireGuardPublicKey != "not a key" || ps[0].WireGuardPort != "70000" {
		t.Fatalf("Peers = %+v, %v; want node-b's WireGuard values as written (the validator judges them)", ps, err)
	}
}
