package ipam

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/routelet/routelet/pkg/state"
	"golang.org/x/sys/unix"
)

const lockFile = "lock"

// ipamLock is one held exclusive flock on <dir>/lock; fd is a raw descriptor
// (not an *os.File) so that a waiter can hand it to the goroutine blocked in
// flock(2) without the runtime poller in between.
type ipamLock struct {
	fd int
}

// lock takes the exclusive IPAM lock, waiting at most the configured timeout
// and never past ctx. flock(2) is used because the kernel drops it when the
// holder dies, so a crashed plugin can never wedge IPAM.
//
// The wait is a blocking flock in a goroutine, so the kernel wakes the next
// waiter the moment the holder lets go (no polling delay, no spinning crowd of
// plugins). If the wait is abandoned, that goroutine keeps the descriptor and
// closes it once its flock returns, which drops the lock it may just have
// taken; the descriptor is never closed under a running flock, so its number
// cannot be reused by accident.
//
// On success the holder's description (pid, operation, attachment, time) is
// written into the lock file; a waiter that times out reports it.
func (a *Allocator) lock(ctx context.Context, op string, att *Attachment) (*ipamLock, error) {
	path := filepath.Join(a.dir, lockFile)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ipam lock %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open ipam lock %s: %w", path, err)
	}
	err = flockRetry(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		err = a.waitLock(ctx, fd, path)
		if err != nil {
			return nil, err // fd now belongs to the waiting goroutine
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	desc := fmt.Sprintf("pid %d (%s", os.Getpid(), op)
	if att != nil {
		desc += " " + att.ContainerID + "/" + att.IfName
	}
	desc += ") since " + time.Now().UTC().Format(time.RFC3339Nano) + "\n"
	// Best effort: the holder line is only diagnostics for waiters.
	if _, err := unix.Pwrite(fd, []byte(desc), 0); err == nil {
		_ = unix.Ftruncate(fd, int64(len(desc)))
	}
	return &ipamLock{fd: fd}, nil
}

// waitLock blocks in flock(LOCK_EX) on fd until it is granted, the timeout
// passes or ctx ends. On a nil return the lock is held on fd; otherwise fd
// has been handed to a goroutine that closes it once flock returns, and the
// caller must not touch it.
func (a *Allocator) waitLock(ctx context.Context, fd int, path string) error {
	timeout := a.opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	start := time.Now()
	got := make(chan error, 1)
	go func() { got <- flockRetry(fd, unix.LOCK_EX) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case err := <-got:
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("lock %s: %w", path, err)
		}
		return nil
	case <-timer.C:
		waitErr = &LockTimeoutError{Path: path, Waited: time.Since(start).Round(time.Millisecond), Holder: readHolder(a.dir)}
	case <-ctx.Done():
		waitErr = fmt.Errorf("wait for ipam lock %s: %w", path, ctx.Err())
	}
	// Give up: whoever receives the flock result owns fd. Closing it drops
	// the lock in case it is granted after all.
	go func() {
		<-got
		unix.Close(fd)
	}()
	return waitErr
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

// unlock releases the lock and closes its descriptor.
func (l *ipamLock) unlock() {
	_ = flockRetry(l.fd, unix.LOCK_UN)
	_ = unix.Close(l.fd)
}

// readHolder returns the first line of the lock file: the description the
// current (or last) holder wrote.
func readHolder(dir string) string {
	data, err := state.ReadFileNoFollow(dir, lockFile)
	if err != nil {
		return ""
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return string(bytes.TrimSpace(line))
}
