package ipam

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/filetest"
)

// TestRemoveStaleTemps: killed writers' temp files go from the IPAM
// directory and each subdirectory, beside a working allocator and without
// its lock; a locked one, a young one and the allocator's own files stay;
// a subdirectory that is a symlink is refused and its target untouched; a
// directory not made yet is no error.
func TestRemoveStaleTemps(t *testing.T) {
	a := newTest(t, "10.0.0.0/29")
	att := Attachment{ContainerID: "c1", IfName: "eth0"}
	if _, err := a.Allocate(t.Context(), att, nil); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	mk := func(path string, mtime time.Time) string { return filetest.Aged(t, path, "x", mtime) }
	var stale []string
	for _, sub := range []string{".", addrsSubdir, attachmentsSubdir, blocksSubdir} {
		stale = append(stale, mk(filepath.Join(a.dir, sub, ".tmp-77"), old))
	}
	locked := mk(filepath.Join(a.dir, addrsSubdir, ".tmp-78"), old)
	filetest.Locked(t, locked)
	young := mk(filepath.Join(a.dir, attachmentsSubdir, ".tmp-79"), time.Now().Add(-time.Minute))
	removed, err := RemoveStaleTemps(a.dir, StaleTempAge)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	slices.Sort(stale)
	if !slices.Equal(removed, stale) {
		t.Errorf("removed %v, want %v", removed, stale)
	}
	for _, p := range []string{locked, young} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if got, err := a.Get(t.Context(), att); err != nil || len(got) != 1 {
		t.Errorf("the allocation after the sweep: %v, %v", got, err)
	}

	// veth-locks/ a symlink to a directory holding an old temp file.
	elsewhere := t.TempDir()
	target := mk(filepath.Join(elsewhere, ".tmp-80"), old)
	if err := os.Symlink(elsewhere, filepath.Join(a.dir, "veth-locks")); err != nil {
		t.Fatal(err)
	}
	if _, err := RemoveStaleTemps(a.dir, StaleTempAge); err == nil {
		t.Error("a symlinked subdirectory is no error")
	}
	if _, err := os.Lstat(target); err != nil {
		t.Errorf("the symlinked directory's file was removed: %v", err)
	}
}
