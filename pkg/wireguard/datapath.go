package wireguard

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/state"
)

// SocketDir is where wireguard-go's configuration sockets live
// (<SocketDir>/<device>.sock); wgctrl looks there whatever the network
// namespace.
const SocketDir = "/var/run/wireguard"

// TUNDevice is the character device the userspace implementation opens.
const TUNDevice = "/dev/net/tun"

// Bounds of the datapath's start and stop.
const (
	datapathStartTimeout = 5 * time.Second
	datapathStopTimeout  = 2 * time.Second
)

// DatapathMain is the datapath subcommand: it parses --device and --mtu
// from args, runs RunDatapath until SIGTERM or SIGINT or until the device
// closes, and returns the exit code (0, 1 on failure, 2 for bad
// arguments). Its log goes to stderr.
func DatapathMain(args []string) int {
	fs := flag.NewFlagSet(defaults.WireGuardDatapathCommand, flag.ContinueOnError)
	name := fs.String("device", defaults.DeviceWireGuard, "the TUN device to create and serve")
	mtu := fs.Int("mtu", DefaultMTU, "the device's MTU")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected argument %q\n", defaults.WireGuardDatapathCommand, fs.Arg(0))
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	signal.Ignore(syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := RunDatapath(ctx, *name, *mtu, log); err != nil {
		log.Error("wireguard datapath failed", "err", err)
		return 1
	}
	return 0
}

// RunDatapath is the userspace datapath: it creates the TUN device name
// with mtu, runs wireguard-go on it and serves its configuration socket
// (<SocketDir>/<name>.sock) until ctx is done, the device closes (its TUN
// link was deleted) or the socket is removed. On return the socket and the
// TUN device are gone.
func RunDatapath(ctx context.Context, name string, mtu int, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkName(name); err != nil {
		return fmt.Errorf("wireguard datapath: %w", err)
	}
	if err := checkMTU(mtu); err != nil {
		return fmt.Errorf("wireguard datapath: %w", err)
	}
	tdev, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return fmt.Errorf("wireguard datapath %s: create TUN device: %w", name, err)
	}
	if got, err := tdev.Name(); err != nil || got != name {
		tdev.Close()
		return fmt.Errorf("wireguard datapath %s: the TUN device came up as %q (%v)", name, got, err)
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), &device.Logger{
		Verbosef: func(format string, args ...any) { log.Debug(fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { log.Error(fmt.Sprintf(format, args...)) },
	})
	defer dev.Close() // deletes the TUN device
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		return fmt.Errorf("wireguard datapath %s: configuration socket: %w", name, err)
	}
	uapi, err := ipc.UAPIListen(name, f)
	f.Close()
	if err != nil {
		_ = os.Remove(socketPath(name))
		return fmt.Errorf("wireguard datapath %s: configuration socket: %w", name, err)
	}
	defer uapi.Close() // removes the socket; runs before the device closes
	errs := make(chan error, 1)
	go func() {
		for {
			c, err := uapi.Accept()
			if err != nil {
				errs <- err
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	log.Info("wireguard datapath running", "device", name, "mtu", mtu, "pid", os.Getpid(), "socket", socketPath(name))
	select {
	case <-ctx.Done():
		log.Info("wireguard datapath stopping: signalled", "device", name)
	case <-dev.Wait():
		log.Info("wireguard datapath stopping: the device closed (its TUN link was deleted)", "device", name)
	case err := <-errs:
		return fmt.Errorf("wireguard datapath %s: configuration socket gone: %w", name, err)
	}
	return nil
}

func socketPath(name string) string { return filepath.Join(SocketDir, name+".sock") }

// datapathProc is a datapath process this Device started.
type datapathProc struct {
	pid    int
	exited chan struct{} // closed once reaped
	err    error         // its exit status, once exited is closed
}

func (p *datapathProc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (d *Device) pidFile() string { return d.cfg.Name + ".pid" }
func (d *Device) logPath() string { return filepath.Join(d.cfg.RunDir, d.cfg.Name+".log") }

// pidFromFile returns the pid the pid file names, 0 when there is none.
func (d *Device) pidFromFile() int {
	b, err := state.ReadFileNoFollowMax(d.cfg.RunDir, d.pidFile(), 32)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// startDatapath starts the userspace datapath detached (a session of its
// own, stdin /dev/null, output appended to its log in RunDir, pid in its
// pid file) in the Device's network namespace, and waits until its TUN
// link is there and its configuration socket answers.
func (d *Device) startDatapath() (netlink.Link, error) {
	name := d.cfg.Name
	if _, err := os.Stat(TUNDevice); err != nil {
		if d.cfg.Impl == ImplAuto {
			return nil, fmt.Errorf("wireguard: kernel has none and %s is missing (%w: %v)", TUNDevice, ErrUnsupported, err)
		}
		return nil, fmt.Errorf("wireguard %s: the userspace implementation needs %s (%w: %v)", name, TUNDevice, ErrUnsupported, err)
	}
	if err := os.MkdirAll(d.cfg.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("wireguard %s: run directory: %w", name, err)
	}
	if err := state.EnsureDir(d.cfg.RunDir); err != nil {
		return nil, fmt.Errorf("wireguard %s: run directory: %w", name, err)
	}
	d.stopStale()
	logf, err := os.OpenFile(d.logPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wireguard %s: datapath log: %w", name, err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("wireguard %s: %w", name, err)
	}
	defer devnull.Close()
	argv := d.cfg.Datapath
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.inNetns(cmd.Start); err != nil {
		return nil, fmt.Errorf("wireguard %s: start the datapath %q: %w", name, strings.Join(argv, " "), err)
	}
	p := &datapathProc{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	d.datapath = p
	if err := state.WriteFileAtomic(d.cfg.RunDir, d.pidFile(), []byte(strconv.Itoa(p.pid)+"\n")); err != nil {
		d.log.Warn("wireguard: cannot write the datapath's pid file", "err", err)
	}
	d.log.Info("wireguard: started the userspace datapath", "pid", p.pid, "log", d.logPath())

	deadline := time.Now().Add(datapathStartTimeout)
	var why error
	for {
		link, err := d.lookupLink()
		switch {
		case err != nil:
			why = err
		case link == nil:
			why = errors.New("no TUN link yet")
		case linkKind(link) != kindTUN:
			why = fmt.Errorf("a link of kind %q holds the name", linkKind(link))
		default:
			if why = d.answers(); why == nil {
				return link, nil
			}
		}
		if p.done() {
			return nil, fmt.Errorf("wireguard %s: the datapath (pid %d) exited at start (%v); see %s", name, p.pid, p.err, d.logPath())
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			return nil, fmt.Errorf("wireguard %s: the datapath (pid %d) was not ready within %v (%v), killed; see %s",
				name, p.pid, datapathStartTimeout, why, d.logPath())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopStale ends the datapath of this device still running while its link
// is gone or dead (it is about to exit, or stopped answering): SIGTERM,
// then SIGKILL after datapathStopTimeout. A new datapath started beside it
// would have its socket removed from under it when the old one exits. The
// process is the pid file's only while its command line is a datapath's
// for this device.
func (d *Device) stopStale() {
	pid := d.pidFromFile()
	if pid == 0 || !isDatapath(pid, d.cfg.Name) {
		return
	}
	d.log.Warn("wireguard: stopping the old datapath", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(datapathStopTimeout)
	for isDatapath(pid, d.cfg.Name) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p := d.datapath; p != nil && p.pid == pid {
		select {
		case <-p.exited:
		case <-time.After(datapathStopTimeout):
		}
	}
}

// isDatapath reports whether process pid runs (not a zombie) with the
// datapath's command line for device name.
func isDatapath(pid int, name string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return false
	}
	args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	return DatapathArgs(args, name)
}

// DatapathArgs reports whether args (a command line, program first) run
// the datapath subcommand for device name.
func DatapathArgs(args []string, name string) bool {
	if len(args) < 2 || args[1] != defaults.WireGuardDatapathCommand {
		return false
	}
	rest := args[2:]
	for i, a := range rest {
		if a == "--device="+name || a == "-device="+name {
			return true
		}
		if (a == "--device" || a == "-device") && i+1 < len(rest) && rest[i+1] == name {
			return true
		}
	}
	return false
}
