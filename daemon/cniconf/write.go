package cniconf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/state"
)

// tempName is the name of dir/name's temp file: hidden and ending in
// ".tmp", so no runtime takes it for a network config (libcni loads only
// .conf, .conflist and .json files), and fixed, so a temp file a killed
// writer left is reused and removed by the next write instead of piling up.
func tempName(name string) string { return "." + name + ".tmp" }

// Write puts data into dir/name unless the file already holds exactly
// data, and reports whether it wrote. Nothing else in dir is created,
// changed or removed, except the hidden temp file it uses.
//
// How: the list goes to the temp file, is fsynced and renamed over
// dir/name (a runtime reading meanwhile sees the old list or the new one,
// never a part), the directory is fsynced, and then dir/name is opened
// again and the same bytes are written over themselves at offset 0 and
// fsynced. The rename alone is not enough: containerd 1.6 (Debian 12's)
// reloads its CNI config on write events in the directory and ignores
// create events, and a file renamed into the directory raises only
// IN_MOVED_TO, which fsnotify reports as a create. The rewrite in place
// raises IN_MODIFY and IN_CLOSE_WRITE on the final name, which every
// watcher takes as a write; it is safe because the bytes written equal
// the bytes already there, so a reader sees the complete list throughout,
// also when routeletd dies halfway. Writing in place without the rename
// would not be atomic when the length or content changes.
func Write(dir, name string, data []byte) (bool, error) {
	path := filepath.Join(dir, name)
	if holds(path, data) {
		return false, nil
	}
	tmp := filepath.Join(dir, tempName(name))
	if err := unix.Unlink(tmp); err != nil && !errors.Is(err, unix.ENOENT) {
		return false, fmt.Errorf("remove old temp file %s: %w", tmp, err)
	}
	if err := writeNew(tmp, data); err != nil {
		_ = unix.Unlink(tmp)
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = unix.Unlink(tmp)
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := state.SyncDir(dir); err != nil {
		return true, err
	}
	return true, rewriteInPlace(path, data)
}

// holds reports whether path is a regular file holding exactly data. It
// reads at most len(data)+1 bytes and never blocks on a FIFO, so whatever
// is planted under the name costs no more than the list itself.
func holds(path string, data []byte) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) {
		return false
	}
	cur := make([]byte, len(data)+1)
	n, _ := io.ReadFull(f, cur)
	return bytes.Equal(cur[:n], data)
}

// writeNew creates path (which must not exist; a symlink is never
// followed) with mode 0644 and data, fsynced.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer f.Close()
	// Runtimes read the file as root; 0644 lets an operator read it too,
	// whatever routeletd's umask.
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// rewriteInPlace writes data over path's identical content, for the
// write events (see Write). It writes only when path is still a regular
// file holding exactly data: whatever replaced it since is left alone.
func rewriteInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	cur := make([]byte, len(data)+1)
	n, _ := f.ReadAt(cur, 0)
	if !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) || !bytes.Equal(cur[:n], data) {
		return nil
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("rewrite %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// ResolveDir returns dir with symlinks resolved (the conf dir is often a
// link on distributions), failing unless it is an existing directory.
func ResolveDir(dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return real, nil
}

// Earlier lists the files in dir a runtime would load before name: CNI
// runtimes use the first network config in name order, so any of these
// wins over routelet's list.
func Earlier(dir, name string) ([]string, error) {
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if b := filepath.Base(f); b < name {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Writer writes one rendered list into dir/name each time it is notified,
// on a goroutine of its own (Run), retrying with back-off until a write
// succeeds.
type Writer struct {
	dir, name string
	data      []byte
	log       *slog.Logger
	kick      chan struct{}
}

// NewWriter returns a Writer of data to dir/name.
func NewWriter(dir, name string, data []byte, log *slog.Logger) *Writer {
	return &Writer{dir: dir, name: name, data: data, log: log, kick: make(chan struct{}, 1)}
}

// Notify asks for the list to be (re-)written; it never blocks.
func (w *Writer) Notify() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// retryMax bounds the back-off between failed writes.
const retryMax = 30 * time.Second

// Run writes the list after each Notify until ctx is done.
func (w *Writer) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		if !w.writeRetrying(ctx) {
			return
		}
	}
}

// writeRetrying writes the list, retrying failures with back-off; false
// when ctx ended first.
func (w *Writer) writeRetrying(ctx context.Context) bool {
	path := filepath.Join(w.dir, w.name)
	backoff := time.Second
	for {
		changed, err := Write(w.dir, w.name, w.data)
		switch {
		case err != nil:
			w.log.Error("cannot write CNI config, will retry", "path", path, "err", err, "retry_in", backoff)
		case changed:
			w.log.Info("CNI config written", "path", path)
		default:
			w.log.Info("CNI config already up to date", "path", path)
		}
		if err == nil {
			w.warnEarlier()
			return true
		}
		if !sleep(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, retryMax)
	}
}

// sleep waits d and reports true, or false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// warnEarlier logs the network configs in the directory that a runtime
// would pick before routelet's.
func (w *Writer) warnEarlier() {
	earlier, err := Earlier(w.dir, w.name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Warn("cannot list the CNI conf dir", "dir", w.dir, "err", err)
		return
	}
	if len(earlier) > 0 {
		w.log.Warn("runtimes use the first CNI config in name order, and these come before routelet's",
			"dir", w.dir, "name", w.name, "files", strings.Join(earlier, ","))
	}
}
