package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
)

// requireClean fails t if anything the demo makes is still there.
func requireClean(t *testing.T) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(netnstest.RunDir, nsPrefix+"*"))
	if len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if _, err := os.Lstat(workDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind (%v)", workDir, err)
	}
	if pids := daemonsOf(workDir); len(pids) > 0 {
		t.Errorf("routeletd processes left running: %v", pids)
	}
}

// daemonsOf returns the PIDs of processes whose command line mentions dir
// (the demo's daemons get their state dir under it).
func daemonsOf(dir string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(dir+"/")) && bytes.Contains(b, []byte("routeletd")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// fakePlugin writes an executable "routelet" running script into a new dir.
func fakePlugin(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "routelet"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDemo runs the whole demo with the real plugin and daemons: every pod
// reaches every pod on the other nodes over v4 and v6, the TCP transfer
// completes, and nothing is left afterwards.
func TestDemo(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "the demo creates network namespaces")
	var out bytes.Buffer
	// An empty plugin dir makes the demo build the plugin itself.
	err := run(context.Background(), &out, t.TempDir())
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	for _, want := range []string{"48/48 cross-node pings ok", "MB/s (v6)", "DEL left 0 pod routes", "cleaned up"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	requireClean(t)
}

// TestDemoPluginFailure: a plugin that fails ADD makes the demo fail with
// the plugin's message, and it still removes everything it made.
func TestDemoPluginFailure(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "the demo creates network namespaces")
	dir := fakePlugin(t, `cat >/dev/null; echo '{"cniVersion":"1.1.0","code":7,"msg":"demo test: bad config"}'; exit 1`)
	err := run(context.Background(), &bytes.Buffer{}, dir)
	if err == nil || !strings.Contains(err.Error(), "demo test: bad config") {
		t.Errorf("demo with a failing plugin: %v, want the plugin's error", err)
	}
	requireClean(t)
}

// TestDemoInterrupted: SIGINT while a plugin runs (the plugin sends it to
// the demo process) stops the demo, and it still removes everything it made.
func TestDemoInterrupted(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "the demo creates network namespaces")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir := fakePlugin(t, `kill -INT $PPID; exec sleep 30`)
	err := run(ctx, &bytes.Buffer{}, dir)
	if err == nil || ctx.Err() == nil {
		t.Errorf("demo after SIGINT: err %v, context %v; want both set", err, ctx.Err())
	}
	requireClean(t)
}

// TestDemoRemovesLeftovers: namespaces, state and still running processes
// (daemons) of a crashed run are removed at start.
func TestDemoRemovesLeftovers(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "the demo creates network namespaces")
	// A crashed run: a PID that is certainly gone (a reaped child) owns a
	// node namespace and a work dir.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	stale, err := netnstest.NewNamed(demoPrefix + pid + "-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnstest.Remove(stale) })
	// A daemon of the crashed run, still running in its namespace.
	orphan := exec.Command("ip", "netns", "exec", netnstest.Name(stale), "sleep", "300")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan error, 1)
	go func() { reaped <- orphan.Wait() }()
	t.Cleanup(func() { orphan.Process.Kill() })
	inNS := func() bool {
		a, err1 := os.Readlink(filepath.Join("/proc", strconv.Itoa(orphan.Process.Pid), "ns", "net"))
		var st syscall.Stat_t
		err2 := syscall.Stat(stale.Path(), &st)
		return err1 == nil && err2 == nil && a == "net:["+strconv.FormatUint(st.Ino, 10)+"]"
	}
	netnstest.Eventually(t, 5*time.Second, "the stand-in daemon to enter the stale namespace", inNS)
	staleDir := filepath.Join(workRoot, pid)
	if err := os.MkdirAll(filepath.Join(staleDir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	dir := fakePlugin(t, `cat >/dev/null; echo '{"cniVersion":"1.1.0","code":7,"msg":"demo test: stop here"}'; exit 1`)
	err = run(context.Background(), &out, dir)
	if err == nil || !strings.Contains(err.Error(), "demo test: stop here") {
		t.Errorf("demo after a crashed run: %v, want it to get as far as ADD", err)
	}
	if !strings.Contains(out.String(), "removed leftovers") || !strings.Contains(out.String(), netnstest.Name(stale)) {
		t.Errorf("demo output does not report the leftovers it removed:\n%s", out.String())
	}
	select {
	case <-reaped:
	case <-time.After(5 * time.Second):
		t.Errorf("process in the stale namespace still running 5s after the demo started")
	}
	if _, err := os.Stat(stale.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale namespace %s survived (%v)", stale.Path(), err)
	}
	if _, err := os.Stat(staleDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale work dir %s survived (%v)", staleDir, err)
	}
	requireClean(t)
}
