package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

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
