package readlimit

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// endless is a reader that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestAll: up to the limit the bytes come back; past it, and on an
// endless stream, the error names the stream and the limit.
func TestAll(t *testing.T) {
	got, err := All(strings.NewReader("12345"), "x", 5)
	if err != nil || string(got) != "12345" {
		t.Fatalf("All at the limit = %q, %v", got, err)
	}
	for _, r := range []io.Reader{strings.NewReader("123456"), endless{}} {
		_, err := All(r, "stdin", 5)
		var tl *TooLargeError
		if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) {
			t.Fatalf("All over the limit: err %v, want a TooLargeError", err)
		}
		if want := "read stdin: more than 5 bytes (the limit for this file)"; err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
}

// TestFile: a missing file keeps its os error; /dev/zero is refused at
// the limit, naming the path.
func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := File(p, 1<<20); err != nil || string(got) != "abc" {
		t.Fatalf("File = %q, %v", got, err)
	}
	if _, err := File(p+"-missing", 1<<20); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	_, err := File("/dev/zero", 1<<20)
	if want := "read /dev/zero: more than 1 MiB (the limit for this file)"; err == nil || err.Error() != want {
		t.Errorf("File(/dev/zero) error %v, want %q", err, want)
	}
}

// TestCheckFile: a small regular file passes; a device, a FIFO and a
// file over the limit are errors naming the path.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(p, 6); err != nil {
		t.Errorf("CheckFile at the limit: %v", err)
	}
	if err := CheckFile(p, 5); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), p) {
		t.Errorf("CheckFile over the limit: %v, want a TooLargeError naming %s", err, p)
	}
	if err := CheckFile("/dev/zero", 1<<20); err == nil || !strings.Contains(err.Error(), "/dev/zero: not a regular file") {
		t.Errorf("CheckFile(/dev/zero) = %v", err)
	}
	if err := CheckFile(p+"-missing", 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CheckFile(missing) = %v", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{1 << 20: "1 MiB", 64 << 10: "64 KiB", 1000: "1000 bytes", 3 << 20: "3 MiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
