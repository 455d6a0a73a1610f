package cniconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestWrite: the list lands atomically with write events on its final
// name, other files in the directory are left alone, and an unchanged
// list is not written again.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	others := map[string]string{"05-other.conflist": `{"name":"x"}`, "99-loopback.conf": "{}", "notes.txt": "keep"}
	for n, c := range others {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/nonexistent", filepath.Join(dir, "dangling.conf")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for n := range others {
		if err := os.Chtimes(filepath.Join(dir, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	events := netnstest.WatchDir(t, dir)
	data, err := Render([]byte(DefaultTemplate), params)
	if err != nil {
		t.Fatal(err)
	}
	name := "10-routelet.conflist"
	changed, err := Write(dir, name, data)
	if err != nil || !changed {
		t.Fatalf("Write = %v, %v; want a write", changed, err)
	}
	got, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || string(got) != string(data) {
		t.Fatalf("written %q, %v; want %q", got, err, data)
	}
	fi, _ := os.Stat(filepath.Join(dir, name))
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode())
	}
	ev := events()
	// containerd 1.6 reloads on fsnotify's Write (IN_MODIFY) only; newer
	// watchers take IN_CLOSE_WRITE.
	if ev[name]&unix.IN_MODIFY == 0 || ev[name]&unix.IN_CLOSE_WRITE == 0 {
		t.Errorf("events on %s: %#x, want IN_MODIFY and IN_CLOSE_WRITE", name, ev[name])
	}
	for n, m := range ev {
		if n == name || n == "" {
			continue
		}
		if _, other := others[n]; other || n == "dangling.conf" {
			t.Errorf("event %#x on the other file %s", m, n)
		}
		if !strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".conf") || strings.HasSuffix(n, ".conflist") || strings.HasSuffix(n, ".json") {
			t.Errorf("temp file %q is one a runtime would load", n)
		}
	}
	checkOthers(t, dir, others, old)
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(others)+2 {
		t.Errorf("directory holds %v, want the other files, the link and %s only", entries, name)
	}

	// Unchanged: not written again, no event on it.
	if changed, err := Write(dir, name, data); err != nil || changed {
		t.Errorf("Write of unchanged content = %v, %v; want no write", changed, err)
	}
	if ev := events(); ev[name]&(unix.IN_MODIFY|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE) != 0 {
		t.Errorf("unchanged list written again: events %#x", ev[name])
	}
	if fi2, err := os.Stat(filepath.Join(dir, name)); err != nil || !os.SameFile(fi, fi2) {
		t.Errorf("unchanged list replaced: %v", err)
	}

	// Changed content: replaced, with write events again.
	data2, _ := Render([]byte(DefaultTemplate), Params{MTU: 1380, StateDir: params.StateDir, IfacePrefix: params.IfacePrefix})
	if changed, err := Write(dir, name, data2); err != nil || !changed {
		t.Fatalf("Write of new content = %v, %v", changed, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != string(data2) {
		t.Errorf("after the change: %q", got)
	}
	if ev := events(); ev[name]&unix.IN_MODIFY == 0 {
		t.Errorf("changed list: events %#x, want IN_MODIFY", ev[name])
	}
	checkOthers(t, dir, others, old)
}

// checkOthers fails unless each other file holds its content and mtime.
func checkOthers(t *testing.T, dir string, others map[string]string, mtime time.Time) {
	t.Helper()
	for n, c := range others {
		p := filepath.Join(dir, n)
		got, err := os.ReadFile(p)
		fi, serr := os.Stat(p)
		if err != nil || serr != nil || string(got) != c || !fi.ModTime().Equal(mtime) {
			t.Errorf("other file %s changed: %q %v %v", n, got, err, serr)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "dangling.conf")); err != nil || l != "/nonexistent" {
		t.Errorf("symlink changed: %q %v", l, err)
	}
}

// TestWriteErrors: a missing or read-only directory is an error naming
// the path, and leaves no file behind.
func TestWriteErrors(t *testing.T) {
	data, _ := Render([]byte(DefaultTemplate), params)
	missing := filepath.Join(t.TempDir(), "absent")
	if _, err := Write(missing, "10-routelet.conflist", data); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Write into a missing dir = %v, want an error naming it", err)
	}
	if os.Geteuid() == 0 {
		return // root writes into a 0555 directory anyway
	}
	ro := t.TempDir()
	if err := os.Chmod(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(ro, "10-routelet.conflist", data); err == nil || !strings.Contains(err.Error(), ro) {
		t.Errorf("Write into a read-only dir = %v, want an error naming it", err)
	}
	if e, _ := os.ReadDir(ro); len(e) != 0 {
		t.Errorf("read-only dir holds %v", e)
	}
}

// TestWriteOverEndlessFile: what is planted under the list's name (a
// link to /dev/zero, a FIFO nobody writes) is replaced at once: Write
// reads no more than the list's length of it and never blocks on it.
func TestWriteOverEndlessFile(t *testing.T) {
	data, _ := Render([]byte(DefaultTemplate), params)
	for _, plant := range []string{"zero link", "fifo"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "10-routelet.conflist")
		var err error
		if plant == "fifo" {
			err = unix.Mkfifo(path, 0o600)
		} else {
			err = os.Symlink("/dev/zero", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := Write(dir, "10-routelet.conflist", data)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Write over a %s: %v", plant, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Write over a %s still running after 5 s", plant)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(data) {
			t.Errorf("after Write over a %s: %q, %v; want the list", plant, got, err)
		}
	}
}

// TestEarlier lists the configs a runtime would pick before ours (libcni
// loads hidden files too, by extension alone).
func TestEarlier(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"05-flannel.conflist", "10-routelet.conflist", "00-x.txt", "87-podman.conflist", ".03-hidden.conf"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Earlier(dir, "10-routelet.conflist")
	if err != nil || strings.Join(got, ",") != ".03-hidden.conf,05-flannel.conflist" {
		t.Errorf("Earlier = %v, %v; want [.03-hidden.conf 05-flannel.conflist]", got, err)
	}
}

// TestResolveDir: a symlinked conf dir is followed; a file or a missing
// path is an error naming it.
func TestResolveDir(t *testing.T) {
	netd, links := t.TempDir(), t.TempDir()
	paths := map[string]string{"link": netd, "file": "", "absent": ""}
	for name, target := range paths {
		p := filepath.Join(links, name)
		switch name {
		case "link":
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		case "file":
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := ResolveDir(p)
		if target != "" && (err != nil || got != target) {
			t.Errorf("ResolveDir(%s) = %q, %v; want %s", p, got, err, target)
		}
		if target == "" && (err == nil || !strings.Contains(err.Error(), p)) {
			t.Errorf("ResolveDir(%s) = %q, %v; want an error naming it", p, got, err)
		}
	}
}
