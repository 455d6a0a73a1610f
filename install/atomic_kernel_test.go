package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netnstest"
)

// inPrivateMount runs script with sh in a new, private mount namespace
// (mounts made there vanish with it and never reach the host) and returns
// its combined output.
func inPrivateMount(t *testing.T, script string, env ...string) string {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "mounts a tmpfs in a private mount namespace")
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux): ", err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("private mount namespace script failed: %v\n%s", err, out)
	}
	return string(out)
}

// installFixture makes a bin dir d, the old plugin (fakePlugin("old"), which
// installScript copies into the tmpfs it mounts on d) and a new plugin
// holding newPlugin, and returns d and installScript's D, OLD and SRC
// settings for them.
func installFixture(t *testing.T, newPlugin string) (d string, env []string) {
	t.Helper()
	base := t.TempDir()
	d = filepath.Join(base, "bin")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	old, src := filepath.Join(base, "old"), filepath.Join(base, "routelet")
	writeFile(t, old, fakePlugin("old"))
	writeFile(t, src, newPlugin)
	return d, []string{"D=" + d, "OLD=" + old, "SRC=" + src}
}

// TestPrivilegedInstallReadOnlyDir: a read-only bin dir (a tmpfs remounted
// read-only in a private mount namespace) is a clear error and leaves the
// installed plugin as it was.
func TestPrivilegedInstallReadOnlyDir(t *testing.T) {
	d, env := installFixture(t, fakePlugin("new"))
	out := inPrivateMount(t, installScript, append(env, "SIZE=1m", `PRE=mount -o remount,ro `+d)...)
	installer, exit, listing, content := afterInstall(t, out)
	if exit == "0" {
		t.Fatalf("install into a read-only dir succeeded:\n%s", out)
	}
	if want := `CNI bin dir "` + d + `" is not writable`; !strings.Contains(installer, want) {
		t.Errorf("installer output %q does not say %q", installer, want)
	}
	if strings.TrimSpace(listing) != "routelet" || content != fakePlugin("old") {
		t.Errorf("read-only dir changed: listing %q, routelet %q", listing, content)
	}
}

// TestPrivilegedInstallDiskFull: a bin dir too full for the new plugin (a
// small tmpfs in a private mount namespace) is a clear error; the old plugin
// stays whole and no partial file is left.
func TestPrivilegedInstallDiskFull(t *testing.T) {
	_, env := installFixture(t, fakePlugin("new")+"# "+strings.Repeat("x", 256<<10)+"\n")
	out := inPrivateMount(t, installScript, append(env, "SIZE=64k", "PRE=:")...)
	installer, exit, listing, content := afterInstall(t, out)
	if exit == "0" {
		t.Fatalf("install of 256 KiB into a 64 KiB tmpfs succeeded:\n%s", out)
	}
	if !strings.Contains(installer, "disk full") || !strings.Contains(installer, "left as it was") {
		t.Errorf("installer output %q does not say the disk is full and the old plugin kept", installer)
	}
	if strings.TrimSpace(listing) != "routelet" || content != fakePlugin("old") {
		t.Errorf("full dir changed: listing %q, routelet %q", listing, content)
	}
}
