package netnstest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// WireGuardRunDir is where wireguard-go puts its UAPI sockets and where
// wgctrl's userspace backend looks for them, whatever the network
// namespace. Several userspace WireGuard devices of the same name on one
// machine (one per simulated node) therefore need a directory of their own
// each, mounted on WireGuardRunDir in a mount namespace of their own:
// StartWithRunDir and DoWithRunDir.
const WireGuardRunDir = "/var/run/wireguard"

// runDirScript is run by sh with $0 the private directory and "$@" the
// command: it mounts the directory on WireGuardRunDir (in the mount
// namespace unshare made) and execs the command in place, so the process
// keeps the PID `ip netns exec` started with.
const runDirScript = `mkdir -p ` + WireGuardRunDir + ` && mount --bind "$0" ` + WireGuardRunDir + ` && exec "$@"`

// StartWithRunDir is StartIn with the process in a private mount
// namespace of its own (`unshare --mount --propagation private`) in which
// dir is bind-mounted on WireGuardRunDir: what it and its children (a
// WireGuard datapath it starts) put there lands in dir, and what other
// processes put in theirs stays out of its sight. ip, unshare and sh each
// exec the next in place, so Cmd.Process is name's process: a signal to
// its PID reaches it and nothing else. The mount never reaches the
// machine's own mount namespace; WireGuardRunDir itself may be created
// there (on Debian /var/run is /run, a tmpfs shared by all).
func StartWithRunDir(n ns.NetNS, out io.Writer, dir, name string, args ...string) (*Proc, error) {
	if err := checkRunDir(dir); err != nil {
		return nil, err
	}
	argv := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", runDirScript, dir, name}, args...)
	return StartIn(n, out, "unshare", argv...)
}

// checkRunDir makes sure dir is an absolute directory path, creating it.
func checkRunDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("wireguard run directory %q: not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("wireguard run directory: %w", err)
	}
	return nil
}

// CommandWithRunDir returns the command that runs name inside the network
// namespace n with dir mounted on WireGuardRunDir, as StartWithRunDir
// starts it, for callers that run it to completion (exec.Cmd.Run,
// CombinedOutput); ctx kills it.
func CommandWithRunDir(ctx context.Context, n ns.NetNS, dir, name string, args ...string) (*exec.Cmd, error) {
	if err := checkRunDir(dir); err != nil {
		return nil, err
	}
	argv := append([]string{"netns", "exec", Name(n), "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", runDirScript, dir, name}, args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// DoWithRunDir runs fn on an OS thread of its own that is in the network
// namespace n and in a private mount namespace in which dir is mounted on
// WireGuardRunDir: a wgctrl client created and used inside fn sees the
// WireGuard devices of n, the userspace ones through the sockets in dir.
// fn must not start goroutines that use the client. The thread is never
// used again (it is discarded when fn returns), and nothing of it
// reaches the caller's namespaces.
func DoWithRunDir(n ns.NetNS, dir string, fn func() error) error {
	if err := checkRunDir(dir); err != nil {
		return err
	}
	target, err := netns.GetFromPath(n.Path())
	if err != nil {
		return fmt.Errorf("netns %s: %w", Name(n), err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's end discards the thread with
		// its namespaces.
		runtime.LockOSThread()
		errc <- func() error {
			// CLONE_NEWNS takes the thread's filesystem attributes out of
			// the process's too; only this thread changes.
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make / private: %w", err)
			}
			if err := os.MkdirAll(WireGuardRunDir, 0o755); err != nil {
				return err
			}
			if err := unix.Mount(dir, WireGuardRunDir, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind %s on %s: %w", dir, WireGuardRunDir, err)
			}
			if err := netns.Set(target); err != nil {
				return fmt.Errorf("enter netns %s: %w", Name(n), err)
			}
			return fn()
		}()
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("in netns %s with %s on %s: %w", Name(n), dir, WireGuardRunDir, err)
	}
	return nil
}
