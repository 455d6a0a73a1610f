package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/state"
)

// vethLocksDir holds the lock file of each host veth name an ADD, DEL or GC
// is working on, under the state directory. It lives in the plugin's ipam/
// directory, which `routeletd cleanup` removes with the rest of the state.
var vethLocksDir = filepath.Join("ipam", "veth-locks")

// daemonLockFile is the file in the state directory that the running
// routeletd holds an exclusive flock on (docs/design.md, "State directory").
const daemonLockFile = "routeletd.lock"

// vethLockWait bounds how long DEL and GC wait for an ADD or DEL of the same
// host veth name to finish.
const vethLockWait = 10 * time.Second

// vethLockPoll is how often a waiter retries the lock.
const vethLockPoll = 5 * time.Millisecond

// errVethBusy is returned (wrapped in a *vethBusyError) when the lock stays
// held by another ADD or DEL.
var errVethBusy = errors.New("host veth busy")

// vethBusyError names the busy lock and what its holder said it was doing.
type vethBusyError struct {
	path, holder string
}

// Error names the lock file and the holder.
func (e *vethBusyError) Error() string {
	if e.holder == "" {
		return fmt.Sprintf("%s is locked by another ADD or DEL", e.path)
	}
	return fmt.Sprintf("%s is locked by %s", e.path, e.holder)
}

// Unwrap makes errors.Is(err, errVethBusy) hold.
func (e *vethBusyError) Unwrap() error { return errVethBusy }

// vethLock is one held flock on <stateDir>/locks/<host veth name>.
type vethLock struct {
	fd   int
	path string
}

// lockVeth takes the exclusive lock of host veth name, retrying for at most
// wait (0: one try). op and who describe the holder for a waiter's error.
// flock is dropped by the kernel when the holder dies, so a killed plugin
// never wedges a pod. Every holder removes the lock file while it still
// holds it (see release), so no file outlives the operation; a lock taken
// on a file that is no longer at the path is therefore dropped and taken
// again on a new file.
func lockVeth(stateDir, name, op, who string, wait time.Duration) (*vethLock, error) {
	dir := filepath.Join(stateDir, vethLocksDir)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := state.EnsureDir(d); err != nil {
			return nil, err
		}
	}
	if err := state.ValidateIfName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	deadline := time.Now().Add(wait)
	for {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		err = flockRetry(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if samePath(fd, path) {
				desc := fmt.Sprintf("pid %d (%s %s) since %s\n", os.Getpid(), op, who, time.Now().UTC().Format(time.RFC3339Nano))
				if _, err := unix.Pwrite(fd, []byte(desc), 0); err == nil {
					_ = unix.Ftruncate(fd, int64(len(desc)))
				}
				return &vethLock{fd: fd, path: path}, nil
			}
			unix.Close(fd) // removed by its last holder: lock the new one
			continue
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !time.Now().Before(deadline) {
			return nil, &vethBusyError{path: path, holder: lockHolder(path)}
		}
		time.Sleep(vethLockPoll)
	}
}

// samePath reports whether fd is still the file at path.
func samePath(fd int, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// lockHolder is the first line of a lock file: what its holder wrote.
func lockHolder(path string) string {
	data, err := state.ReadFileNoFollow(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return ""
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return string(bytes.TrimSpace(line))
}

// release removes the lock file and then drops the lock: removed while still
// held, so a waiter that gets the lock on the old file sees that it is gone
// and starts over on a new one.
func (l *vethLock) release() {
	if err := unix.Unlink(l.path); err != nil && !errors.Is(err, unix.ENOENT) {
		slog.Warn("lock file not removed", "path", l.path, "err", err)
	}
	_ = flockRetry(l.fd, unix.LOCK_UN)
	_ = unix.Close(l.fd)
}

// lockErr turns a failure to take a host veth lock into a CNI error: busy is
// "try again later", anything else an I/O failure.
func lockErr(err error, hostIf string) *types.Error {
	if errors.Is(err, errVethBusy) {
		return cniErr(types.ErrTryAgainLater, "another ADD or DEL for host veth %s is in progress: %v; try again later", hostIf, err)
	}
	return cniErr(types.ErrIOFailure, "lock host veth %s: %v", hostIf, err)
}

// daemonRunning reports whether a routeletd holds its instance lock on
// stateDir. It tries a non-blocking shared flock on the lock file: getting
// it means nobody holds the daemon's exclusive one (the probe's own lock is
// dropped at once). The file is opened read-only and never created.
func daemonRunning(stateDir string) (bool, string, error) {
	path := filepath.Join(stateDir, daemonLockFile)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, path + " does not exist", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	err = flockRetry(fd, unix.LOCK_SH|unix.LOCK_NB)
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, "", nil
	case err != nil:
		return false, "", fmt.Errorf("probe %s: %w", path, err)
	}
	_ = flockRetry(fd, unix.LOCK_UN)
	return false, path + " is not locked", nil
}

// flockRetry is flock(2), retried when a signal interrupts it.
func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
