// Package filetest makes the files tests of the state directory's
// writers need: one of a given age, one a live writer holds locked.
package filetest

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Aged writes data to path (mode 0600) with mtime as its modification
// and access time, and returns path.
func Aged(t testing.TB, path string, data string, mtime time.Time) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return path
}

// Locked holds an exclusive flock on path, as a live writer holds its
// temp file, until the returned function is called or the test ends.
func Locked(t testing.TB, path string) (unlock func()) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }
}
