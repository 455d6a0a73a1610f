package cleanup

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/state"
	"github.com/routelet/routelet/pkg/wireguard"
)

// datapathStopWait is how long cleanup waits for the userspace datapath
// to exit, once after its link is gone and once after SIGTERM, before it
// sends SIGKILL.
const datapathStopWait = 5 * time.Second

// removeWireGuard deletes the WireGuard device name (only a link of kind
// wireguard, or tun: routelet's userspace device) and then stops the
// userspace datapath named by <stateDir>/wireguard/<name>.pid, when that
// process's command line is `… wireguard-datapath --device <name> …`
// (another process with that pid is never signalled). The datapath exits
// by itself when its link goes; cleanup waits for it, then sends SIGTERM,
// then SIGKILL, and after a SIGKILL removes the configuration socket it
// left in wireguard.SocketDir.
func removeWireGuard(stateDir, name string, rep *Report, log *slog.Logger) error {
	var errs []error
	l, err := netlink.LinkByName(name)
	switch {
	case nlutil.LinkNotFound(err):
	case err != nil:
		errs = append(errs, fmt.Errorf("cleanup: wireguard device %s: %w", name, err))
	default:
		kind := l.Type()
		if t, ok := l.(*netlink.Tuntap); ok && t.Mode != netlink.TUNTAP_MODE_TAP {
			kind = "tun"
		}
		if kind != "wireguard" && kind != "tun" {
			log.Warn("cleanup: leaving a link that is not a WireGuard device", "iface", name, "type", kind)
			break
		}
		if err := netlink.LinkDel(l); err != nil && !nlutil.LinkNotFound(err) {
			errs = append(errs, fmt.Errorf("cleanup: delete wireguard device %s: %w", name, err))
			break
		}
		log.Info("deleted wireguard device", "iface", name, "type", kind)
		rep.Links = append(rep.Links, name)
	}
	if err := stopDatapath(stateDir, name, rep, log); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopDatapath ends the userspace datapath of device name, if its pid
// file names one that runs.
func stopDatapath(stateDir, name string, rep *Report, log *slog.Logger) error {
	dir := filepath.Join(stateDir, wireguard.KeyDir)
	b, err := state.ReadFileNoFollowMax(dir, name+".pid", 32)
	if err != nil {
		return nil // no datapath was started here, or its file is not routelet's (then it stays and is reported)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !wireguard.IsDatapath(pid, name) {
		return nil
	}
	if waitGone(pid, name, datapathStopWait) {
		log.Info("the wireguard datapath exited with its device", "pid", pid)
		return nil
	}
	log.Info("stopping the wireguard datapath", "pid", pid, "device", name)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cleanup: stop the wireguard datapath (pid %d): %w", pid, err)
	}
	if waitGone(pid, name, datapathStopWait) {
		return nil
	}
	if !wireguard.IsDatapath(pid, name) {
		return nil
	}
	log.Warn("the wireguard datapath did not stop: killing it", "pid", pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("cleanup: kill the wireguard datapath (pid %d): %w", pid, err)
	}
	if !waitGone(pid, name, datapathStopWait) {
		return fmt.Errorf("cleanup: the wireguard datapath (pid %d) is still running after SIGKILL", pid)
	}
	// A killed datapath leaves its socket; it was this datapath's.
	sock := filepath.Join(wireguard.SocketDir, name+".sock")
	var st unix.Stat_t
	if unix.Lstat(sock, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		if err := unix.Unlink(sock); err == nil {
			rep.Paths = append(rep.Paths, sock)
		}
	}
	return nil
}

// waitGone waits up to d for process pid to stop being the datapath of
// name (exited, or reaped); it reports whether it did.
func waitGone(pid int, name string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for wireguard.IsDatapath(pid, name) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// scanWireGuard sorts <stateDir>/wireguard: the private key (its
// format: a key in base64 and a newline), the userspace datapaths' pid
// files (<device>.pid holding a pid) and logs (<device>.log), and temp
// files go; anything else stays.
func (p *plan) scanWireGuard(parent int, dir string) {
	p.scanDir(parent, dir, wireguard.KeyDir, false, func(n string, data []byte) bool {
		switch {
		case n == wireguard.KeyFile:
			s, ok := strings.CutSuffix(string(data), "\n")
			_, err := wireguard.ParseKey("key", s)
			return ok && err == nil
		case strings.HasSuffix(n, ".pid"):
			s, ok := strings.CutSuffix(string(data), "\n")
			pid, err := strconv.Atoi(s)
			return ok && err == nil && pid > 0 && state.ValidateIfName(strings.TrimSuffix(n, ".pid")) == nil
		}
		return false
	}, func(n string) bool {
		// A log may be larger than a record: its name decides.
		dev, ok := strings.CutSuffix(n, ".log")
		return ok && state.ValidateIfName(dev) == nil
	})
}
