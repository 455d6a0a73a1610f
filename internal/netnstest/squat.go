package netnstest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// squatEnv, in the environment of a test binary, makes it the squatter
// Squat starts: it binds the abstract socket named ("listen:@x" also
// listens on it), prints "bound" and holds it until its stdin closes.
const squatEnv = "ROUTELET_TEST_SQUAT"

// SquatMain is the squatter process. A test binary whose tests call
// Squat calls it first in TestMain: in the squatter it returns the exit
// code and true (the binary exits with it); in the tests, false.
func SquatMain() (int, bool) {
	spec := os.Getenv(squatEnv)
	if spec == "" {
		return 0, false
	}
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
		return 1, true
	}
	fmt.Println("bound")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0, true
}

// Squatter is an unprivileged process (uid 65534) holding an abstract
// unix socket, as any local user can.
type Squatter struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// PID is the squatter's process ID.
func (s *Squatter) PID() int { return s.cmd.Process.Pid }

// Stop makes the squatter exit and waits for it (again: a no-op).
func (s *Squatter) Stop() {
	s.stdin.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Squat runs a copy of this test binary as uid 65534 in n, binding the
// abstract socket name ("@…") and, with listen, listening on it; it
// returns once the socket is bound and stops the process at cleanup. The
// binary's TestMain must call SquatMain.
func Squat(t testing.TB, n ns.NetNS, name string, listen bool) *Squatter {
	t.Helper()
	spec := name
	if listen {
		spec = "listen:" + name
	}
	cmd := Unprivileged(t, squatEnv+"="+spec)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Do(func(ns.NetNS) error { return cmd.Start() }); err != nil {
		t.Fatal(err)
	}
	s := &Squatter{cmd: cmd, stdin: stdin}
	t.Cleanup(s.Stop)
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "bound\n" {
		t.Fatalf("squatter did not bind %s: %q, %v", name, line, err)
	}
	return s
}

// Unprivileged returns a command running a copy of this test binary as
// uid and gid 65534 with env as its whole environment, from a directory
// that user may enter (removed at cleanup); it is killed when the test
// process dies.
func Unprivileged(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "routelet-squat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, err := os.ReadFile(self)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "squat"), data, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "squat"))
	cmd.Dir, cmd.Env, cmd.Stderr = "/", env, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}, Pdeathsig: syscall.SIGKILL}
	return cmd
}
