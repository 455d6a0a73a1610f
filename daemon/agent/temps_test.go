package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/state"
)

// TestStateDirTemps: an old unlocked temp file goes from the Store's
// directories, the IPAM directory's and the WireGuard directory (whose
// key stays); a young one in the IPAM
// directory (younger than ipam.StaleTempAge) stays.
func TestStateDirTemps(t *testing.T) {
	dir := t.TempDir()
	store, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ipamDir := filepath.Join(dir, "ipam")
	if err := os.MkdirAll(filepath.Join(ipamDir, "addrs"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	mk := func(path string, mtime time.Time) string {
		t.Helper()
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return path
	}
	gone := []string{
		mk(filepath.Join(store.WorkloadsDir(), ".tmp-1"), old),
		mk(filepath.Join(ipamDir, "addrs", ".tmp-2"), old),
	}
	wgDir := filepath.Join(dir, "wireguard")
	if err := os.Mkdir(wgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	gone = append(gone, mk(filepath.Join(wgDir, ".tmp-4"), old))
	key := mk(filepath.Join(wgDir, "private.key"), old)
	young := mk(filepath.Join(ipamDir, ".tmp-3"), time.Now().Add(-time.Minute))
	removed, err := StateDirTemps{Store: store, IPAMDir: ipamDir, WireGuardDir: wgDir}.RemoveStaleTemps()
	if err != nil {
		t.Fatalf("RemoveStaleTemps: %v", err)
	}
	slices.Sort(removed)
	slices.Sort(gone)
	if !slices.Equal(removed, gone) {
		t.Errorf("removed %q, want %q", removed, gone)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("the young IPAM temp file: %v, want it kept", err)
	}
	if _, err := os.Stat(key); err != nil {
		t.Errorf("the WireGuard key: %v, want it kept", err)
	}
	// No WireGuard directory (encryption never on) is no error.
	if _, err := (StateDirTemps{Store: store, IPAMDir: ipamDir, WireGuardDir: filepath.Join(dir, "none")}).RemoveStaleTemps(); err != nil {
		t.Errorf("RemoveStaleTemps without a WireGuard directory: %v", err)
	}
}
