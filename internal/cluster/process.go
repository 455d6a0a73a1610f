package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/defaults"
)

// DaemonPID returns the PID of the node's routeletd, 0 when none was
// started or it has exited.
func (n *Node) DaemonPID() int {
	if n.daemon == nil {
		return 0
	}
	select {
	case <-n.daemon.Done():
		return 0
	default:
		return n.daemon.Cmd.Process.Pid
	}
}

// Kill sends SIGKILL to the node's routeletd, as a crash or an OOM kill
// would, and waits for it to exit. Nothing else gets the signal: the
// dataplane, daemon.json (still saying ready) and any WireGuard datapath
// the daemon started stay. StartAfterKill starts it again.
func (n *Node) Kill() error {
	if n.daemon == nil {
		return fmt.Errorf("routeletd on %s: not started", n.Spec.Name)
	}
	err := n.daemon.Kill()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return nil
		}
	}
	return fmt.Errorf("routeletd on %s had exited before SIGKILL: %v", n.Spec.Name, err)
}

// StartAfterKill starts n's routeletd with Options.DaemonArgs after Kill
// and waits until the new daemon reports ready: daemon.json written by it
// (the killed one's still says ready).
func (c *Cluster) StartAfterKill(ctx context.Context, n *Node) error {
	since := time.Now()
	if err := c.startDaemon(n, c.opts.DaemonArgs); err != nil {
		return err
	}
	return n.WaitReadySince(ctx, since, netnstest.ReadyTimeout)
}

// WaitReadySince is WaitReady for a daemon.json written at since or later
// (any, for the zero time).
func (n *Node) WaitReadySince(ctx context.Context, since time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := n.Store.ReadDaemonStatus()
		if err == nil && st.Ready && !st.Updated.Before(since.Truncate(time.Millisecond)) {
			return nil
		}
		select {
		case <-n.daemon.Done():
			return fmt.Errorf("routeletd on %s exited before it was ready; log %s:\n%s", n.Spec.Name, n.LogPath, n.LogTail(20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("routeletd on %s not ready after %s; log tail:\n%s", n.Spec.Name, timeout, n.LogTail(20))
		}
	}
}

// DatapathPIDs returns the processes in the node's network namespace whose
// command line is `routeletd wireguard-datapath …` (the userspace
// WireGuard datapaths its daemons started), sorted.
func (n *Node) DatapathPIDs() ([]int, error) {
	var want unix.Stat_t
	if err := unix.Stat(n.CNI.NS.Path(), &want); err != nil {
		return nil, fmt.Errorf("node %s netns: %w", n.Spec.Name, err)
	}
	return processesIn(want.Ino, func(argv []string) bool {
		return len(argv) >= 2 && filepath.Base(argv[0]) == "routeletd" && argv[1] == defaults.WireGuardDatapathCommand
	}), nil
}

// processesIn returns the PIDs of the processes in the network namespace
// of inode netIno whose argv match accepts.
func processesIn(netIno uint64, match func(argv []string) bool) []int {
	procs, _ := os.ReadDir("/proc")
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", p.Name(), "ns", "net"), &st) != nil || st.Ino != netIno {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// StopDatapaths sends SIGKILL to each of the node's WireGuard datapaths
// (DatapathPIDs, by PID) and waits up to 5 s for them to be gone. They
// outlive routeletd by design, so this is how a run ends them.
func (n *Node) StopDatapaths() error {
	if n.CNI == nil || n.CNI.NS == nil {
		return nil
	}
	pids, err := n.DatapathPIDs()
	if err != nil {
		return err
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("node %s: WireGuard datapath %d still there 5s after SIGKILL", n.Spec.Name, pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// WireGuard runs fn with a wgctrl client that sees the node's WireGuard
// devices as its routeletd does: in the node's network namespace and, with
// Options.PrivateWireGuardRun, the node's WireGuardRunDir as
// /var/run/wireguard (netnstest.DoWithRunDir). fn runs on one OS thread
// and must not hand the client to other goroutines.
func (n *Node) WireGuard(fn func(*wgctrl.Client) error) error {
	run := func() error {
		c, err := wgctrl.New()
		if err != nil {
			return fmt.Errorf("wgctrl on %s: %w", n.Spec.Name, err)
		}
		defer c.Close()
		return fn(c)
	}
	if n.WireGuardRunDir == "" {
		return n.CNI.NS.Do(func(ns.NetNS) error { return run() })
	}
	return netnstest.DoWithRunDir(n.CNI.NS, n.WireGuardRunDir, run)
}

// PingStream is a ping running from a pod, one echo request per interval.
type PingStream struct {
	cmd  *exec.Cmd
	out  *netnstest.Buffer
	done chan struct{}
	err  error
}

// PingResult is what a PingStream counted.
type PingResult struct {
	Sent, Received int
	Lost           []int // icmp_seq of the requests never answered
	Output         string
}

// String is "received/sent (lost seq …)".
func (r PingResult) String() string {
	s := fmt.Sprintf("%d/%d answered", r.Received, r.Sent)
	if len(r.Lost) > 0 {
		s += fmt.Sprintf(", lost icmp_seq %v", r.Lost)
	}
	return s
}

// StartPingStream starts `ping -i interval -c count` from p to dst; each
// request waits up to a second for its reply. Wait returns the counts
// once all are sent, Stop ends the stream before.
func (p *Pod) StartPingStream(dst netip.Addr, interval time.Duration, count int) (*PingStream, error) {
	if interval < 10*time.Millisecond || count < 1 {
		return nil, fmt.Errorf("ping stream to %s: interval %s and count %d: want at least 10ms and 1", dst, interval, count)
	}
	args := []string{"netns", "exec", netnstest.Name(p.NS), "ping", "-n", "-W", "1",
		"-i", strconv.FormatFloat(interval.Seconds(), 'f', 3, 64), "-c", strconv.Itoa(count), dst.String()}
	s := &PingStream{cmd: exec.Command("ip", args...), out: &netnstest.Buffer{}, done: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := netnstest.StartPinned(s.cmd); err != nil {
		return nil, fmt.Errorf("ping stream to %s from %s: %w", dst, p.Name, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	return s, nil
}

var (
	pingReply   = regexp.MustCompile(`icmp_seq=(\d+) `)
	pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)
)

// Wait waits for the stream's last request (its reply or its second) and
// returns what it counted. Losing requests is no error; ping failing to
// run, or printing no summary, is.
func (s *PingStream) Wait() (PingResult, error) {
	<-s.done
	r := PingResult{Output: s.out.String()}
	m := pingSummary.FindStringSubmatch(r.Output)
	if m == nil {
		return r, fmt.Errorf("ping printed no summary (%v):\n%s", s.err, r.Output)
	}
	r.Sent, _ = strconv.Atoi(m[1])
	r.Received, _ = strconv.Atoi(m[2])
	seen := map[int]bool{}
	sc := bufio.NewScanner(strings.NewReader(r.Output))
	for sc.Scan() {
		if m := pingReply.FindStringSubmatch(sc.Text()); m != nil && !strings.Contains(sc.Text(), "Unreachable") {
			seq, _ := strconv.Atoi(m[1])
			seen[seq] = true
		}
	}
	for seq := 1; seq <= r.Sent; seq++ {
		if !seen[seq] {
			r.Lost = append(r.Lost, seq)
		}
	}
	return r, nil
}

// Stop ends the stream (SIGINT: ping prints its summary) and returns
// what it counted. The last request, sent less than an interval before,
// has had no time for its reply: unanswered, it is not counted as sent.
func (s *PingStream) Stop() (PingResult, error) {
	select {
	case <-s.done:
		return s.Wait()
	default:
		_ = s.cmd.Process.Signal(os.Interrupt)
	}
	r, err := s.Wait()
	if n := len(r.Lost); err == nil && n > 0 && r.Lost[n-1] == r.Sent {
		r.Lost, r.Sent = r.Lost[:n-1], r.Sent-1
	}
	return r, err
}

// Routeletd runs a routeletd subcommand (status, wireguard rotate-key, …)
// to completion in n's network namespace, with n's WireGuardRunDir on
// /var/run/wireguard as its daemon has it, and returns its combined
// output; the error holds it too.
func (c *Cluster) Routeletd(ctx context.Context, n *Node, args ...string) (string, error) {
	if n.WireGuardRunDir == "" {
		return netnstest.Exec(ctx, n.CNI.NS, c.opts.Daemon, args...)
	}
	cmd, err := netnstest.CommandWithRunDir(ctx, n.CNI.NS, n.WireGuardRunDir, c.opts.Daemon, args...)
	if err != nil {
		return "", err
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("routeletd %s on %s: %w: %s", strings.Join(args, " "), n.Spec.Name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
