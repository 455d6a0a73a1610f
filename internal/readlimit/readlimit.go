// Package readlimit reads files and streams with a size limit, so that a
// path such as /dev/zero, an endless pipe or a huge file given where a
// small file is expected ends in a clear error naming the file and the
// limit instead of in memory exhaustion.
package readlimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is wrapped by the error of a read that hit its limit.
var ErrTooLarge = errors.New("larger than the limit")

// TooLargeError names what was read and the limit it exceeded.
type TooLargeError struct {
	Name  string // the file or stream, as the caller named it
	Limit int64  // bytes
}

// Error reads "read /dev/zero: more than 1 MiB (the limit for this file)".
func (e *TooLargeError) Error() string {
	return fmt.Sprintf("read %s: more than %s (the limit for this file)", e.Name, Size(e.Limit))
}

// Unwrap makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// File reads path whole, at most limit bytes; a longer file (or an
// endless one) is a *TooLargeError after reading limit+1 bytes. Opening
// follows what os.Open follows: it is for paths an operator names.
func File(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return All(f, path, limit)
}

// CheckFile fails unless path (symlinks followed) is a regular file of
// at most limit bytes: for a file a library reads whole on its own (a
// TLS certificate, a kubeconfig), so /dev/zero, a FIFO or a huge file is
// an error naming it before the library starts reading.
func CheckFile(path string, limit int64) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("read %s: not a regular file (mode %s)", path, fi.Mode())
	}
	if fi.Size() > limit {
		return &TooLargeError{Name: path, Limit: limit}
	}
	return nil
}

// All reads r to its end, at most limit bytes; name names r in the
// errors.
func All(r io.Reader, name string, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if n > limit {
		return nil, &TooLargeError{Name: name, Limit: limit}
	}
	return buf.Bytes(), nil
}

// Size writes n bytes the way the errors do: "1 MiB", "64 KiB", "100 bytes".
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
