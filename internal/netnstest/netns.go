package netnstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RunDir is where named network namespaces are bind-mounted (as `ip netns` does).
const RunDir = "/var/run/netns"

// NewNamed creates a network namespace bind-mounted at RunDir/name, brings its
// loopback up and returns a handle on it. It fails when the name is taken.
// The caller's own thread and namespace are never changed.
func NewNamed(name string) (ns.NetNS, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("netns name %q: not a plain file name", name)
	}
	if err := ensureRunDir(); err != nil {
		return nil, err
	}
	path := filepath.Join(RunDir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, fmt.Errorf("netns %s: create mount point: %w", name, err)
	}
	f.Close()

	// Unshare on a dedicated locked thread, mount, then setns back. The
	// thread returns to the pool only once it is back in its own namespace;
	// otherwise it stays locked and the runtime discards it when the
	// goroutine ends. (The runtime cannot discard the main thread, which is
	// why going back matters rather than relying on the discard alone.)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		orig, err := os.Open(self)
		if err != nil {
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unix.Mount(self, path, "none", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind mount %s: %w", self, err)
		}
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(err, fmt.Errorf("return to own netns: %w", serr))
		} else {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}

	n, err := ns.GetNS(path)
	if err != nil {
		removePath(path)
		return nil, fmt.Errorf("netns %s: open: %w", name, err)
	}
	err = n.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		Remove(n)
		return nil, fmt.Errorf("netns %s: loopback up: %w", name, err)
	}
	return n, nil
}

// New creates a namespace named prefix followed by 8 random hex digits.
func New(prefix string) (ns.NetNS, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("netns name: %w", err)
	}
	return NewNamed(prefix + hex.EncodeToString(b))
}

// Name returns the file name under RunDir of a namespace made by this package.
func Name(n ns.NetNS) string { return filepath.Base(n.Path()) }

// Remove closes n, unmounts it and deletes its mount point. Links inside the
// namespace (pod ends of veths, the host ends on a node) go away with it once
// the last user is gone. Removing an already removed namespace is success.
func Remove(n ns.NetNS) error {
	if n == nil {
		return nil
	}
	path := n.Path()
	n.Close()
	return removePath(path)
}

// OwnedPrefix returns prefix followed by this process's PID and a dash.
// Namespaces named with it can be told apart from those of other runs going
// on at the same time, and found by RemoveStale once this process is gone.
func OwnedPrefix(prefix string) string { return fmt.Sprintf("%s%d-", prefix, os.Getpid()) }

// RemoveStale removes the namespaces under RunDir named prefix<pid>-… (see
// OwnedPrefix) whose process no longer exists: what crashed earlier runs left
// behind. Namespaces of live processes, including this one, are left alone,
// so concurrent runs never pull namespaces from under each other. It returns
// the names removed.
func RemoveStale(prefix string) ([]string, error) {
	if prefix == "" {
		return nil, errors.New("remove stale namespaces: empty prefix")
	}
	entries, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remove stale namespaces: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !StaleOwner(prefix, e.Name()) {
			continue
		}
		if err := removePath(filepath.Join(RunDir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// StaleOwner reports whether name is prefix<pid>-… or prefix<pid> and no
// process pid exists.
func StaleOwner(prefix, name string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	digits, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 {
		return false
	}
	err = unix.Kill(pid, 0)
	return errors.Is(err, unix.ESRCH)
}

// removePath unmounts and deletes one mount point. EINVAL (not mounted) and
// ENOENT (already gone) are success: the goal is that the path is gone.
func removePath(path string) error {
	if err := killProcessesIn(path); err != nil {
		return err
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// ensureRunDir creates RunDir and makes it a shared mount point, as
// `ip netns add` does, so namespaces mounted there stay visible to processes
// in other mount namespaces.
func ensureRunDir() error {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("netns dir %s: %w", RunDir, err)
	}
	err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("netns dir %s: make shared: %w", RunDir, err)
	}
	// Not a mount point yet: bind it onto itself first.
	if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns dir %s: bind onto itself: %w", RunDir, err)
	}
	if err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns dir %s: make shared: %w", RunDir, err)
	}
	return nil
}

// Exec runs a command with its network namespace set to n and returns its
// combined output. The child inherits the namespace of the locked thread
// that starts it.
func Exec(ctx context.Context, n ns.NetNS, name string, args ...string) (string, error) {
	var out []byte
	err := n.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.CommandContext(ctx, name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		return string(out), fmt.Errorf("%s %s in netns %s: %w: %s",
			name, strings.Join(args, " "), Name(n), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Ping sends count echo requests from inside n to dst, with ping's flags
// before dst (e.g. "-I", src or "-M", "do", "-s", "1372"), and fails unless
// at least one reply arrives within a second each. It returns ping's
// output; the error holds it too.
func Ping(ctx context.Context, n ns.NetNS, dst string, count int, flags ...string) (string, error) {
	return ping(ctx, n, dst, count, time.Second, flags)
}

// ping runs ping in n: count requests, each reply waited for up to wait.
func ping(ctx context.Context, n ns.NetNS, dst string, count int, wait time.Duration, flags []string) (string, error) {
	args := append([]string{"-n", "-c", fmt.Sprint(count), "-W", fmt.Sprint(int(wait / time.Second))}, flags...)
	return Exec(ctx, n, "ping", append(args, dst)...)
}

// Sysctl reads (value == "") or writes a sysctl such as
// "net/ipv4/conf/all/forwarding" inside n and returns its value.
func Sysctl(n ns.NetNS, key, value string) (string, error) {
	path := filepath.Join("/proc/sys", filepath.Clean("/"+key))
	var got string
	err := n.Do(func(ns.NetNS) error {
		if value != "" {
			if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
				return err
			}
		}
		b, err := os.ReadFile(path)
		got = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("sysctl %s in netns %s: %w", key, Name(n), err)
	}
	return got, nil
}

// killProcessesIn ends, with SIGKILL, every process still in the network
// namespace mounted at path (this process excepted), and waits up to 5 s
// for them to go. A test stops what it started before its namespaces go
// (cleanups run last in, first out); what is left is something a failed
// or crashed test leaked (a detached WireGuard datapath, say), which
// would otherwise keep the namespace, its links and their sockets alive.
func killProcessesIn(path string) error {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return nil // not mounted (any more): nothing can be in it
	}
	var left []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", p.Name(), "ns", "net"), &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			continue
		}
		if unix.Kill(pid, unix.SIGKILL) == nil {
			left = append(left, pid)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range left {
		for unix.Kill(pid, 0) == nil && !zombie(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("netns %s: process %d still there 5s after SIGKILL", path, pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// zombie reports whether pid has exited and waits for its parent to reap
// it (its state in /proc/<pid>/stat is Z).
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
