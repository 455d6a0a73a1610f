package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/filetest"
	"github.com/routelet/routelet/internal/netnstest"
)

// TestDaemonRemovesStaleTemps: the temp files plugins killed mid-ADD
// leave in ipam/ (and its subdirectories) and workloads/ are removed by
// routeletd, at start and on every leak collection tick after, when they
// are unlocked regular files named .tmp-<digits> older than any ADD. A
// temp file whose writer still holds its lock stays until the lock is
// released; a young one, a symlink (its target untouched), a directory
// and other names stay.
func TestDaemonRemovesStaleTemps(t *testing.T) {
	tn := newTestNode(t, true)
	ipamDir := filepath.Join(tn.stateDir, "ipam")
	for _, d := range []string{ipamDir, filepath.Join(ipamDir, "addrs"), filepath.Join(ipamDir, "attachments")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	mk := func(path string, mtime time.Time) string { return filetest.Aged(t, path, "c1\neth0\n", mtime) }
	gone := func(paths ...string) func() error {
		return func() error {
			for _, p := range paths {
				if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("%s still there (%v)", p, err)
				}
			}
			return nil
		}
	}
	stays := func(what string, paths ...string) {
		t.Helper()
		for _, p := range paths {
			if _, err := os.Lstat(p); err != nil {
				t.Errorf("%s %s removed: %v", what, p, err)
			}
		}
	}

	// Left before the daemon starts: removed at start.
	atStart := mk(filepath.Join(ipamDir, "addrs", ".tmp-1001"), old)
	target := mk(filepath.Join(t.TempDir(), "target"), old)
	link := filepath.Join(ipamDir, "addrs", ".tmp-1002")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	tn.startDaemon()
	tn.waitReady()
	netnstest.WaitFor(t, 10*time.Second, "the stale temp file left before start removed", gone(atStart))

	// A live writer's temp file (locked), a young one and names that are
	// not temp files, then killed writers' ones: once those are gone, a
	// collection ran with all of them there.
	locked := mk(filepath.Join(ipamDir, "attachments", ".tmp-2001"), old)
	unlock := filetest.Locked(t, locked)
	young := mk(filepath.Join(ipamDir, "addrs", ".tmp-2002"), time.Now())
	other := mk(filepath.Join(ipamDir, ".tmp-x2003"), old)
	dir := filepath.Join(ipamDir, ".tmp-2004")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := []string{mk(filepath.Join(ipamDir, ".tmp-3001"), old), mk(filepath.Join(ipamDir, "addrs", ".tmp-3002"), old),
		mk(filepath.Join(ipamDir, "attachments", ".tmp-3003"), old), mk(filepath.Join(tn.stateDir, "workloads", ".tmp-3004"), old)}
	took := netnstest.WaitFor(t, 10*time.Second, "killed writers' temp files removed by the leak collection", gone(stale...))
	t.Logf("removed %s after they were made (device-check-period 200ms)", took.Round(time.Millisecond))
	stays("a live writer's temp file", locked)
	stays("a young temp file", young)
	stays("a symlink", link)
	stays("a symlink's target", target)
	stays("a directory", dir)
	stays("another name", other)

	// The writer dies: its file goes at the next collection.
	unlock()
	netnstest.WaitFor(t, 10*time.Second, "the temp file removed once its writer's lock is gone", gone(locked))
	stays("a young temp file", young)
	stays("a symlink", link)
	stays("a symlink's target", target)
}
