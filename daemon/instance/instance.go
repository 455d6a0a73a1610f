// Package instance keeps routeletd one per network namespace and one per
// state directory: the daemon holds both claims while it runs, and the
// subcommands that change what it owns (cleanup, leave) take them too, so
// they refuse while a daemon runs. The daemon's claim also says who it is
// and what it runs with (Identity), so that the subcommands that look at
// the node (status, diagnose) find it without being told.
package instance

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/internal/netnsclaim"
)

// Stopped makes sure no routeletd runs in this network namespace or on
// stateDir (if it exists), and keeps it so until the returned release is
// called.
func Stopped(stateDir string, log *slog.Logger) (func(), error) {
	release, err := ClaimNetns(log, nil)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(stateDir); err == nil {
		unlock, err := Lock(stateDir)
		if err != nil {
			release()
			return nil, err
		}
		return func() { unlock(); release() }, nil
	}
	return release, nil
}

// ClaimNetns makes sure no other routeletd runs in this network namespace,
// whatever its state directory (two daemons would fight over the same
// routes), and keeps it so until the returned release is called. An
// unprivileged process holding routeletd's abstract socket does not stop
// it (see daemon/internal/netnsclaim): it is logged and passed by. Until
// then the claim answers root processes of the namespace with id (Find),
// or with nothing when id is nil (a subcommand holds it).
func ClaimNetns(log *slog.Logger, id *Identity) (func(), error) {
	var msg []byte
	if id != nil {
		var err error
		if msg, err = json.Marshal(id); err != nil {
			return nil, err
		}
	}
	c, err := netnsclaim.Take()
	if err != nil {
		return nil, err
	}
	if h := c.Squatter; h != nil {
		log.Warn("an unprivileged process holds routeletd's abstract socket: it is not a routeletd, ignoring it",
			"holder", h.String(), "uid", h.UID, "claimed", c.Name)
	}
	c.Answer(msg)
	return c.Release, nil
}

// LockFile in the state directory is held (flock) by the running daemon, so
// a second routeletd on the same state directory refuses to start instead of
// fighting the first. The kernel drops the lock when the process dies, so a
// restart after kill -9 is not blocked.
const LockFile = "routeletd.lock"

// lockRetry bounds how long a start waits for a lock someone else holds
// (a plugin STATUS probe holds it for microseconds; a daemon, for good).
const lockRetry = time.Second

// Lock takes the state directory's daemon lock and returns its
// release.
func Lock(stateDir string) (func(), error) {
	path := filepath.Join(stateDir, LockFile)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// The plugin's STATUS probes this lock with a brief shared flock; a
	// start that lands inside such a probe retries for a moment instead of
	// taking the prober for a second daemon.
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	for deadline := time.Now().Add(lockRetry); errors.Is(err, unix.EWOULDBLOCK) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another routeletd is running with state-dir %s (%s is locked)", stateDir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { unix.Close(fd) }, nil
}
