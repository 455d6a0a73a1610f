package main

import (
	"context"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netnstest"
)

// snapshot maps every path under dir (relative, dir itself as ".") to its
// kind and content, never following a link: what a test compares before
// and after to see that nothing was touched.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link " + l
		case d.IsDir():
			out[rel] = "dir"
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = "file " + string(data)
		default:
			out[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cleanupIn runs `routeletd cleanup` in the node on stateDir; its output
// and whether it succeeded.
func (tn *testNode) cleanupIn(stateDir string) (string, error) {
	return netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
		"--state-dir="+stateDir, "--node-name=node-a")
}

// realStateDir fills the node's state directory as routelet does: a pod
// added through the plugin (workload record, IPAM claim, attachment, block
// hint, veth lock directory), then a daemon run (routeletd.lock,
// daemon.json, this node's record, the peer ledger).
func (tn *testNode) realStateDir() *pod {
	p := tn.addPod("c1")
	d := tn.startDaemon()
	tn.waitReady()
	if err := d.stop(tn.t); err != nil {
		tn.t.Fatal(err)
	}
	return p
}

// TestCleanupRefusesSymlinkStateDir: a state directory that is a symlink
// is refused (exit 1, naming it); neither the directory it points to nor
// the kernel is touched.
func TestCleanupRefusesSymlinkStateDir(t *testing.T) {
	tn := newTestNode(t, true)
	p := tn.realStateDir()
	link := filepath.Join(t.TempDir(), "state-link")
	if err := os.Symlink(tn.stateDir, link); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, tn.stateDir)
	out, err := tn.cleanupIn(link)
	if err == nil || !strings.Contains(out, link) || !strings.Contains(out, "symlink") {
		t.Errorf("cleanup of a symlinked state dir: %v, want exit 1 naming %s as a symlink:\n%s", err, link, out)
	}
	if after := snapshot(t, tn.stateDir); !maps.Equal(before, after) {
		t.Errorf("the link's target changed:\nbefore %q\nafter  %q", before, after)
	}
	if _, err := tn.nl.LinkByName(p.iface); err != nil {
		t.Errorf("refused cleanup deleted the pod's veth %s: %v", p.iface, err)
	}
}

// TestCleanupRefusesForeignDir: a directory routelet never made, however
// much it looks like one (nodes/, workloads/, ipam/ with arbitrary files),
// is refused (exit 1, naming it) and nothing in it is deleted, nor is
// anything created in it.
func TestCleanupRefusesForeignDir(t *testing.T) {
	tn := newTestNode(t, true)
	dir := filepath.Join(t.TempDir(), "home")
	for p, content := range map[string]string{
		"notes.txt":                 "mine",
		"nodes/node-a.json":         `{"name": "node-a"}`,
		"nodes/photo.jpg":           "\xff\xd8",
		"workloads/c1_eth0.json":    `{"containerID": "c1", "ifName": "eth0"}`,
		"workloads/todo":            "buy milk",
		"ipam/addrs/10.244.7.5":     "not a claim",
		"ipam/attachments/a.json":   "[]",
		"ipam/blocks/10.244.7.0_24": "not a hint",
		"ipam/readme":               "hello",
		"daemon.json":               `{"ready": true}`,
		"workloads/.tmp-notdigitsx": "x",
	} {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, dir)
	out, err := tn.cleanupIn(dir)
	if err == nil || !strings.Contains(out, dir) || !strings.Contains(out, "routelet did not make it") {
		t.Errorf("cleanup of a foreign dir: %v, want exit 1 naming %s:\n%s", err, dir, out)
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Errorf("the foreign dir changed:\nbefore %q\nafter  %q", before, after)
	}
}

// TestCleanupLeavesForeignFiles: in a real state directory, cleanup
// removes what routelet wrote (records, IPAM files, daemon files) and
// leaves what it did not — a foreign file, a record-named file that is no
// record, a symlink (not followed: its target stays) — reporting each; the
// directories holding them stay, the emptied ones go.
func TestCleanupLeavesForeignFiles(t *testing.T) {
	tn := newTestNode(t, true)
	tn.realStateDir()
	outside := filepath.Join(t.TempDir(), "outside.json")
	if err := os.WriteFile(outside, []byte(`{"version": 1, "containerID": "x", "ifName": "eth0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := map[string]string{
		"workloads/notes.txt":    "mine",
		"workloads/fake.json":    `{"hello": "world"}`,
		"ipam/addrs/10.244.7.99": "garbage",
	}
	for p, content := range foreign {
		if err := os.WriteFile(filepath.Join(tn.stateDir, p), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(tn.stateDir, "workloads", "link.json")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, tn.stateDir)
	for _, want := range []string{"daemon.json", "routeletd.lock", "nodes/node-a.json", "workloads/c1_eth0.json", "ipam/lock", "ipam/attachments/c1_eth0.json"} {
		if _, ok := before[want]; !ok {
			t.Fatalf("the state dir routelet made has no %s: %q", want, slices.Sorted(maps.Keys(before)))
		}
	}

	out, err := tn.cleanupIn(tn.stateDir)
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	after := snapshot(t, tn.stateDir)
	// routeletd.lock stays with them: the directory is still routelet's.
	want := map[string]string{".": "dir", "workloads": "dir", "ipam": "dir", "ipam/addrs": "dir",
		"workloads/link.json": "link " + outside, "routeletd.lock": "file "}
	for p, content := range foreign {
		want[p] = "file " + content
	}
	if !maps.Equal(after, want) {
		t.Errorf("after cleanup the state dir holds\n%q\nwant only what routelet did not write (and their directories)\n%q", after, want)
	}
	for p := range foreign {
		if !strings.Contains(out, filepath.Join(tn.stateDir, p)) {
			t.Errorf("cleanup's output does not report leaving %s:\n%s", p, out)
		}
	}
	if !strings.Contains(out, filepath.Join(tn.stateDir, "workloads", "link.json")) {
		t.Errorf("cleanup's output does not report leaving the symlink:\n%s", out)
	}
	// Run again: nothing more to remove, and no refusal.
	if out, err := tn.cleanupIn(tn.stateDir); err != nil {
		t.Fatalf("second cleanup: %v\n%s", err, out)
	}
	if again := snapshot(t, tn.stateDir); !maps.Equal(again, want) {
		t.Errorf("the second cleanup changed the state dir:\n%q\nwant\n%q", again, want)
	}
	if data, err := os.ReadFile(outside); err != nil || !strings.Contains(string(data), `"containerID": "x"`) {
		t.Errorf("the symlink's target changed: %q, %v", data, err)
	}
}
