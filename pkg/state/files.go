package state

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/readlimit"
)

// tempPrefix starts the name of every temp file a writer creates. Listings
// ignore dotfiles, so a temp file left behind by a crashed writer is never
// taken for a record.
const tempPrefix = ".tmp-"

// MaxRecordSize bounds what ReadFileNoFollow reads, and any other reader
// of a record (routeletd nodes add --from): records are a few hundred
// bytes, so anything larger is corrupt or hostile.
const MaxRecordSize = 1 << 20

// maxPlainName keeps a generated name, plus any suffix a caller adds, well
// inside NAME_MAX (255 bytes).
const maxPlainName = 200

// AttachmentName returns the file name stem used for the attachment
// (containerID, ifName): "<containerID>_<ifName>", or, when that would be too
// long for a file name, "h-" and the hex SHA-256 of both. The caller must have
// validated both parts. pkg/ipam uses the same names for its attachment files.
func AttachmentName(containerID, ifName string) string {
	plain := containerID + "_" + ifName
	if len(plain) <= maxPlainName {
		return plain
	}
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifName))
	return "h-" + hex.EncodeToString(sum[:])
}

// EnsureDir creates path as a 0700 directory when it is missing. An existing
// path must be a real directory: a symlink or a file is refused, naming path.
// Only the last component is created; its parent must exist.
func EnsureDir(path string) error {
	err := os.Mkdir(path, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory %s: %w", path, err)
	}
	return checkDir(path)
}

// checkDir fails unless path is a directory that is not a symlink.
func checkDir(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("check directory %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("directory %s is a symlink, refusing to follow it", path)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (mode %s)", path, fi.Mode())
	}
	return nil
}

// validateFileName accepts a single, plain path component.
func validateFileName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("invalid file name %q", name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("invalid file name %q: contains '/' or NUL", name)
	case len(name) > 255:
		return fmt.Errorf("invalid file name %q: longer than 255 bytes", name)
	}
	return nil
}

// WriteFileAtomic writes data to dir/name through a temp file in dir, fsync,
// rename and directory fsync, with mode 0600. name must be a plain file name
// (no '/', not "." or ".."). The rename replaces whatever is at dir/name,
// a symlink included, without following it, so a planted link can never
// redirect the write.
func WriteFileAtomic(dir, name string, data []byte) error {
	return WriteFileAtomicFunc(dir, name, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFileAtomicFunc is WriteFileAtomic for content that write streams
// to the temp file, so a large file is never held whole in memory; an
// error from write leaves dir/name as it was.
func WriteFileAtomicFunc(dir, name string, write func(w io.Writer) error) (err error) {
	if err := validateFileName(name); err != nil {
		return err
	}
	if err := checkDir(dir); err != nil {
		return err
	}
	// CreateTemp opens with O_CREATE|O_EXCL and mode 0600.
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	// Held until the rename is done, so RemoveStaleTemps never takes the
	// temp file of a live writer, however slow its fsync.
	_ = unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	renamed := false
	defer func() {
		if err != nil && !renamed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	path := filepath.Join(dir, name)
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	renamed = true
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err = SyncDir(dir); err != nil {
		return err
	}
	return nil
}

// isTempName reports whether name is one os.CreateTemp makes from the
// writers' pattern: tempPrefix followed by decimal digits.
func isTempName(name string) bool {
	digits := strings.TrimPrefix(name, tempPrefix)
	if digits == name || digits == "" {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// RemoveStaleTemps removes from dir the temp files that writers killed
// mid-write left behind: regular files named like a writer's temp file
// (".tmp-" and digits), not locked by a live writer and last modified at
// least minAge ago (a writer locks its file right after creating it; the
// age covers that instant). Symlinks, directories and other names are left
// alone and nothing is followed: dir itself must not be a symlink, and
// each file is opened, checked and unlinked relative to dir's descriptor.
// It returns the paths removed; errors are joined and do not stop the
// scan. A missing dir is an error matching fs.ErrNotExist.
func RemoveStaleTemps(dir string, minAge time.Duration) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("remove stale temp files: %s is not a directory or is a symlink, refusing to follow it", dir)
		}
		return nil, fmt.Errorf("remove stale temp files: open %s: %w", dir, err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("remove stale temp files: list %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !isTempName(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		ok, err := removeStaleTemp(fd, e.Name(), path, minAge)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// removeStaleTemp unlinks name in the directory dirfd when it is a
// regular file (opened without following a symlink) that no writer holds
// locked and that is at least minAge old, and is still that file when it
// is unlinked. path names it in errors.
func removeStaleTemp(dirfd int, name, path string, minAge time.Duration) (bool, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return false, nil // gone, or a symlink by now
	}
	if err != nil {
		return false, fmt.Errorf("open temp file %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("stat temp file %s: %w", path, err)
	}
	mtime := time.Unix(st.Mtim.Unix())
	if st.Mode&unix.S_IFMT != unix.S_IFREG || time.Since(mtime) < minAge {
		return false, nil
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // a live writer's
		}
		return false, fmt.Errorf("lock temp file %s: %w", path, err)
	}
	// Unlink only the file checked: the name may have been replaced since.
	var now unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return false, nil
	}
	if err := unix.Unlinkat(dirfd, name, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("remove stale temp file %s: %w", path, err)
	}
	return true, nil
}

// RemoveStaleTemps removes killed writers' temp files (see the function
// RemoveStaleTemps) from the state directory, workloads/ and nodes/.
func (s *Store) RemoveStaleTemps(minAge time.Duration) ([]string, error) {
	var removed []string
	var errs []error
	for _, dir := range []string{s.root, s.dir(workloadsSubdir), s.dir(nodesSubdir)} {
		r, err := RemoveStaleTemps(dir, minAge)
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// SyncDir fsyncs a directory so that a rename, link or unlink in it is durable.
func SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory %s for sync: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// ReadFileNoFollow reads dir/name refusing symlinks. It opens with O_NOFOLLOW
// and O_NONBLOCK (a planted FIFO must not hang the reader), then insists on a
// regular file no larger than MaxRecordSize. A missing file yields an error
// that matches fs.ErrNotExist.
func ReadFileNoFollow(dir, name string) ([]byte, error) {
	return ReadFileNoFollowMax(dir, name, MaxRecordSize)
}

// ReadFileNoFollowMax is ReadFileNoFollow for a file that may be larger
// than a record: at most limit bytes.
func ReadFileNoFollowMax(dir, name string, limit int) ([]byte, error) {
	if err := validateFileName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("read %s: is a symlink, refusing to follow it", path)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: not a regular file (mode %s)", path, fi.Mode())
	}
	return readlimit.All(f, path, int64(limit))
}

// ErrReplaced: the file AppendFile was to extend is not the one its
// caller wrote (missing, a symlink, another file, or shorter).
var ErrReplaced = errors.New("not the file last written")

// Lstat returns dir/name's FileInfo, not following a symlink.
func Lstat(dir, name string) (fs.FileInfo, error) {
	if err := validateFileName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	return fi, nil
}

// AppendFile appends data to dir/name in one write and syncs it. The file
// must be the one written describes (Lstat after the caller wrote it:
// the same file, no shorter), else the error wraps ErrReplaced and
// nothing is written. It never follows a symlink or blocks on a FIFO.
func AppendFile(dir, name string, written fs.FileInfo, data []byte) error {
	if err := validateFileName(name); err != nil {
		return err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("append to %s: %w", path, ErrReplaced)
	}
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, written) || fi.Size() < written.Size() {
		return fmt.Errorf("append to %s: %w", path, ErrReplaced)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// removeFile deletes dir/name; a missing file is success (the goal is
// reached). Unlink never follows a symlink, it removes the link itself.
func removeFile(dir, name string) error {
	if err := validateFileName(name); err != nil {
		return err
	}
	path := filepath.Join(dir, name)
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return SyncDir(dir)
}

// dirScan reads many small files of one directory through the
// directory's descriptor, each with one openat, fstat and read into a
// buffer it reuses: what a scan of every record costs per file, where
// ReadFileNoFollow also pays for the runtime's poller and a second read to
// see the end.
type dirScan struct {
	fd  int
	dir string
	buf []byte
}

// openDirScan opens dir for a dirScan; Close releases it.
func openDirScan(dir string) (*dirScan, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &dirScan{fd: fd, dir: dir}, nil
}

// Close releases the directory.
func (d *dirScan) Close() error { return unix.Close(d.fd) }

// read returns name's bytes under ReadFileNoFollow's rules (no symlink, a
// regular file, at most MaxRecordSize). The slice is valid until the next
// read.
func (d *dirScan) read(name string) ([]byte, error) {
	if err := validateFileName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(d.dir, name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("read %s: is a symlink, refusing to follow it", path)
		}
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("read %s: not a regular file", path)
	}
	if st.Size > MaxRecordSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, MaxRecordSize)
	}
	// One byte more than the size, so that a file that grew since the
	// fstat is read on to its end rather than cut.
	want := int(st.Size) + 1
	if cap(d.buf) < want {
		d.buf = make([]byte, 0, max(want, 4096))
	}
	b := d.buf[:0]
	for {
		if len(b) == cap(b) {
			if len(b) > MaxRecordSize {
				return nil, fmt.Errorf("read %s: larger than %d bytes", path, MaxRecordSize)
			}
			b = slices.Grow(b, 4096)
		}
		asked := cap(b) - len(b)
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		b = b[:len(b)+n]
		// A read of a regular file comes back short only at its end;
		// the size fstat saw must have been reached as well.
		if n == 0 || n < asked && len(b) >= int(st.Size) {
			break
		}
	}
	d.buf = b[:0]
	return b, nil
}
