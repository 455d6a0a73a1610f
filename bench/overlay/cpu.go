package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc/stat's and /proc/PID/stat's times (USER_HZ,
// 100 on Linux).
const userHZ = 100

// machineCPU is a reading of /proc/stat's "cpu" line, in seconds.
type machineCPU struct {
	busy    float64 // user, nice, system, irq, softirq, steal
	softirq float64
}

// readMachineCPU reads the CPU time all CPUs of the machine spent so far
// (guest time is already inside user).
func readMachineCPU() (machineCPU, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 9 || fields[0] != "cpu" {
			continue
		}
		var m machineCPU
		for i, v := range fields[1:9] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return machineCPU{}, fmt.Errorf("/proc/stat: %q: %w", v, err)
			}
			m.busy += n / userHZ
			if i == 6 {
				m.softirq = n / userHZ
			}
		}
		return m, nil
	}
	return machineCPU{}, errors.New("/proc/stat: no cpu line")
}

// ksoftirqdPIDs returns the PIDs of the ksoftirqd/N kernel threads.
func ksoftirqdPIDs() ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err == nil && strings.HasPrefix(string(comm), "ksoftirqd/") {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, errors.New("no ksoftirqd threads in /proc")
	}
	return pids, nil
}

// taskSeconds returns the summed utime+stime of pids from /proc/PID/stat.
func taskSeconds(pids []int) (float64, error) {
	var sum float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// The fields after the command name, which sits in parentheses:
		// state is field 3, utime and stime fields 14 and 15.
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
		}
		for _, v := range f[11:13] {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %q: %w", pid, v, err)
			}
			sum += n / userHZ
		}
	}
	return sum, nil
}

// irqTimeAccounting reports whether the running kernel was built with
// CONFIG_IRQ_TIME_ACCOUNTING (from /proc/config.gz or
// /boot/config-<release>), and whether that could be found out.
//
// It decides how softirq time adds up: with IRQ time accounting, softirq
// work is charged to /proc/stat's softirq column only, never to the task it
// interrupted (ksoftirqd's is in the column too); with tick accounting
// (the option off), a tick that lands in softirq is charged both to the
// column and to the stime of the task it interrupted — the iperf3 process
// that sent the packet, or ksoftirqd.
func irqTimeAccounting() (on, known bool) {
	var u unix.Utsname
	var r io.Reader
	if err := unix.Uname(&u); err == nil {
		if b, err := os.ReadFile("/boot/config-" + unix.ByteSliceToString(u.Release[:])); err == nil {
			r = bytes.NewReader(b)
		}
	}
	if r == nil {
		f, err := os.Open("/proc/config.gz")
		if err != nil {
			return false, false
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return false, false
		}
		r = zr
	}
	s := bufio.NewScanner(r)
	for s.Scan() {
		if s.Text() == "CONFIG_IRQ_TIME_ACCOUNTING=y" {
			return true, true
		}
	}
	return false, s.Err() == nil
}

// attribution is how transfer() adds up the CPU time of a transfer.
type attribution struct {
	irqTime   bool
	ksoftirqd []int
}

// newAttribution finds the ksoftirqd threads and the kernel's accounting.
func newAttribution() (attribution, error) {
	pids, err := ksoftirqdPIDs()
	if err != nil {
		return attribution{}, err
	}
	on, known := irqTimeAccounting()
	if !known {
		// Tick accounting is the default of CONFIG_TICK_CPU_ACCOUNTING
		// kernels; counting the column as well would count twice there.
		on = false
	}
	return attribution{irqTime: on, ksoftirqd: pids}, nil
}

// String says what the attributable figure sums.
func (a attribution) String() string {
	if a.irqTime {
		return "both iperf3 processes' utime+stime + /proc/stat softirq (IRQ time accounting: softirq is charged to that column only; ksoftirqd's is in it)"
	}
	return "both iperf3 processes' utime+stime + the ksoftirqd threads' (tick accounting: softirq run on their tails is already in their stime, so /proc/stat's softirq column, which holds the same ticks, is not added)"
}

// attributable returns the transfer's CPU time from the iperf3 processes'
// time, and the deltas of the machine's softirq time and the ksoftirqd
// threads' time over it.
func (a attribution) attributable(iperf3, softirq, ksoftirqd float64) float64 {
	if a.irqTime {
		return iperf3 + softirq
	}
	return iperf3 + ksoftirqd
}
