// Package benchkit holds what the bench harnesses under bench/ share: CPU
// time read from /proc (a machine's, a set of tasks'), the load average
// they report beside their figures, the pod MTU, medians, and routelet's
// binaries, built when the caller has none; and Run, a bench's main.
package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// UserHZ is the unit of /proc/stat's and /proc/PID/stat's times (USER_HZ,
// 100 on Linux).
const UserHZ = 100

// Machine is a reading of /proc/stat's "cpu" line, in seconds.
type Machine struct {
	Busy    float64 // user, nice, system, irq, softirq, steal (guest time is inside user)
	Softirq float64
}

// ReadMachine reads the CPU time all CPUs of the machine spent so far.
func ReadMachine() (Machine, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return Machine{}, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 9 || fields[0] != "cpu" {
			continue
		}
		var m Machine
		for i, v := range fields[1:9] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return Machine{}, fmt.Errorf("/proc/stat: %q: %w", v, err)
			}
			m.Busy += n / UserHZ
			if i == 6 {
				m.Softirq = n / UserHZ
			}
		}
		return m, nil
	}
	return Machine{}, errors.New("/proc/stat: no cpu line")
}

// TaskSeconds returns the summed utime+stime of pids (all their threads)
// from /proc/PID/stat.
func TaskSeconds(pids []int) (float64, error) {
	var sum float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("task %d: %w", pid, err)
		}
		// The fields after the command name, which sits in parentheses:
		// state is field 3, utime and stime fields 14 and 15.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
		}
		for _, v := range f[11:13] {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %q: %w", pid, v, err)
			}
			sum += n / UserHZ
		}
	}
	return sum, nil
}

// Loadavg returns the first three fields of /proc/loadavg.
func Loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// PodMTU returns the MTU of eth0 in the pod namespace n.
func PodMTU(n ns.NetNS) (int, error) {
	mtu := 0
	err := n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return fmt.Errorf("pod eth0: %w", err)
		}
		mtu = l.Attrs().MTU
		return nil
	})
	return mtu, err
}

// Median returns the median of xs (the upper one for an even count).
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Binaries returns the plugin dir and routeletd path: binDir's when both
// exist, else built into built.
func Binaries(ctx context.Context, binDir, built string) (pluginDir, daemon string, err error) {
	pluginDir, daemon = binDir, filepath.Join(binDir, "routeletd")
	if _, err := os.Stat(filepath.Join(binDir, "routelet")); err != nil {
		pluginDir = built
		if err := netnstest.BuildRoutelet(ctx, built); err != nil {
			return "", "", err
		}
	}
	if _, err := os.Stat(daemon); err != nil {
		daemon = filepath.Join(built, "routeletd")
		if err := netnstest.BuildRouteletd(ctx, built); err != nil {
			return "", "", err
		}
	}
	return pluginDir, daemon, nil
}

// Run runs a bench's body until it returns or SIGINT/SIGTERM cancels its
// context, and exits 1 with the error, prefixed by the bench's name.
func Run(name string, body func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := body(ctx); err != nil {
		stop()
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
