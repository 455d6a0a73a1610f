package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// squatEnv, set in the environment of this test binary, makes it bind the
// abstract socket it names ("listen:@x" also listens on it), print
// "bound", and hold it until its stdin closes (see squatMain).
const squatEnv = "ROUTELET_TEST_SQUAT"

// squatMain is the squatter process: run as an unprivileged user by
// startSquatter.
func squatMain(spec string) int {
	listen := false
	if s, ok := strings.CutPrefix(spec, "listen:"); ok {
		spec, listen = s, true
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrUnix{Name: spec})
	}
	if err == nil && listen {
		err = unix.Listen(fd, 8)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "squat:", err)
		return 1
	}
	fmt.Println("bound")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// squatter is an unprivileged process holding an abstract socket.
type squatter struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (s *squatter) pid() int { return s.cmd.Process.Pid }

// stop makes the squatter exit and waits for it.
func (s *squatter) stop() {
	s.stdin.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// startSquatter runs a copy of this test binary as uid and gid 65534
// inside the node, binding (and with listen, listening on) the abstract
// socket name; it returns once the socket is bound and stops the process
// at cleanup.
func (tn *testNode) startSquatter(name string, listen bool) *squatter {
	t := tn.t
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A directory uid 65534 may enter, holding a copy it may run.
	dir, err := os.MkdirTemp("", "routelet-squat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "squat")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := name
	if listen {
		spec = "listen:" + name
	}
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = []string{squatEnv + "=" + spec}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.node.NS.Do(func(ns.NetNS) error { return cmd.Start() }); err != nil {
		t.Fatal(err)
	}
	s := &squatter{cmd: cmd, stdin: stdin}
	t.Cleanup(s.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "bound\n" {
		t.Fatalf("squatter did not bind %s: %q, %v", name, line, err)
	}
	return s
}

// TestSquatterCannotStopDaemon: an unprivileged process (uid 65534) that
// binds routeletd's abstract socket @routeletd first, listening or not,
// stops neither routeletd nor `routeletd cleanup`; the daemon names it in
// a warning. A second routeletd in the namespace, on another state
// directory, still refuses, naming the first one, also after the
// squatter is gone.
func TestSquatterCannotStopDaemon(t *testing.T) {
	for _, listen := range []bool{false, true} {
		t.Run(fmt.Sprintf("listen=%v", listen), func(t *testing.T) {
			tn := newTestNode(t, true)
			tn.addVeth("calisq0", "psq0")
			tn.addRecord("sq", "calisq0", "/var/run/netns/x", "10.244.7.80/32")
			sq := tn.startSquatter("@routeletd", listen)

			d := tn.startDaemon()
			tn.waitReady()
			netnstest.Eventually(t, 5*time.Second, "the daemon's route", func() bool { return tn.hasRoute(v4, "10.244.7.80/32 calisq0 proto 80") })
			if log := d.log.String(); !strings.Contains(log, "uid 65534") || !strings.Contains(log, "pid "+strconv.Itoa(sq.pid())) {
				t.Errorf("the daemon's log does not name the squatter (uid 65534, pid %d):\n%s", sq.pid(), log)
			}

			second := func(what string) {
				t.Helper()
				other := filepath.Join(t.TempDir(), "other-state")
				code, out, exited := tn.runDaemonArgs(10*time.Second, nil, "--node-name=node-b", "--state-dir="+other,
					"--pod-cidr=10.244.8.0/24", "--encapsulation=none", "--health-addr=127.0.0.1:9098")
				first := "pid " + strconv.Itoa(d.proc.Cmd.Process.Pid)
				if !exited || code != 1 || !strings.Contains(out, "another routeletd is running in this network namespace") || !strings.Contains(out, first) {
					t.Errorf("second daemon with another state dir %s: exited %v with %d, want exit 1 naming the first (%s):\n%s", what, exited, code, first, out)
				}
			}
			second("while the squatter holds @routeletd")
			sq.stop()
			second("after the squatter is gone")
			if code, _, err := tn.get("/readyz"); err != nil || code != 200 {
				t.Errorf("first daemon /readyz = %d, %v", code, err)
			}

			if err := d.stop(t); err != nil {
				t.Fatal(err)
			}
			// cleanup, with another squatter in place.
			tn.startSquatter("@routeletd", listen)
			out, err := netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
				"--state-dir="+tn.stateDir, "--node-name=node-a")
			if err != nil {
				t.Fatalf("cleanup with @routeletd held by uid 65534: %v\n%s", err, out)
			}
			if tn.hasRoute(v4, "10.244.7.80/32 calisq0 proto 80") {
				t.Errorf("cleanup left the pod's route")
			}
		})
	}
}
