package ipam

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

const (
	lockFile = "lock"

	// Polling bounds while another process holds the lock: start short (a
	// typical critical section is well under a millisecond of work), back off
	// to keep a crowd of waiting plugins from spinning.
	lockPollMin = 200 * time.Microsecond
	lockPollMax = 10 * time.Millisecond
)

// ipamLock is one held exclusive flock on <dir>/lock.
type ipamLock struct {
	f *os.File
}

// lock takes the exclusive IPAM lock, waiting at most the configured timeout
// (and never past ctx). flock(2) is used because the kernel drops it when the
// holder dies, so a crashed plugin can never wedge IPAM. On success the
// holder's description (pid, operation, attachment, time) is written into the
// lock file, which is what a waiter that times out reports as the holder.
func (a *Allocator) lock(ctx context.Context, op string, att *Attachment) (*ipamLock, error) {
	path := filepath.Join(a.dir, lockFile)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ipam lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open ipam lock %s: %w", path, err)
	}
	timeout := a.opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	wait := lockPollMin
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		now := time.Now()
		if !now.Before(deadline) {
			holder := readHolder(f)
			f.Close()
			return nil, &LockTimeoutError{Path: path, Waited: now.Sub(start).Round(time.Millisecond), Holder: holder}
		}
		// Jitter keeps waiters that started together from polling in step.
		sleep := wait/2 + rand.N(wait/2+1)
		if rest := deadline.Sub(now); sleep > rest {
			sleep = rest
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("wait for ipam lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, lockPollMax)
	}
	desc := fmt.Sprintf("pid %d (%s", os.Getpid(), op)
	if att != nil {
		desc += " " + att.ContainerID + "/" + att.IfName
	}
	desc += ") since " + time.Now().UTC().Format(time.RFC3339Nano) + "\n"
	// Best effort: the holder line is only diagnostics for waiters.
	if _, err := f.WriteAt([]byte(desc), 0); err == nil {
		_ = f.Truncate(int64(len(desc)))
	}
	return &ipamLock{f: f}, nil
}

// unlock releases the lock. Closing the last descriptor drops the flock; the
// explicit LOCK_UN makes the release independent of any duplicated fd.
func (l *ipamLock) unlock() {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
}

// readHolder returns the first line of the lock file: the description the
// current (or last) holder wrote.
func readHolder(f *os.File) string {
	buf := make([]byte, 512)
	n, _ := f.ReadAt(buf, 0)
	line, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	return string(bytes.TrimSpace(line))
}
