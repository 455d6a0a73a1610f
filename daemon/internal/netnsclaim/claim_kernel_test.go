package netnsclaim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// squatEnv makes this test binary a squatter: it binds the abstract
// socket named, prints "bound" and holds it until stdin closes.
const squatEnv = "ROUTELET_NETNSCLAIM_SQUAT"

func TestMain(m *testing.M) {
	if name := os.Getenv(squatEnv); name != "" {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrUnix{Name: name})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "squat:", err)
			os.Exit(1)
		}
		fmt.Println("bound")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// squat runs a copy of this binary as uid 65534 in n, holding @name; it
// returns the process's pid and a stop function (also run at cleanup).
func squat(t *testing.T, n ns.NetNS, name string) (int, func()) {
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
	cmd.Dir, cmd.Env, cmd.Stderr = "/", []string{squatEnv + "=@" + name}, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}, Pdeathsig: syscall.SIGKILL}
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
	stop := func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }
	t.Cleanup(stop)
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "bound\n" {
		t.Fatalf("squatter did not bind @%s: %q, %v", name, line, err)
	}
	return cmd.Process.Pid, stop
}

// takeIn runs Take inside n.
func takeIn(t *testing.T, n ns.NetNS) (*Claim, error) {
	t.Helper()
	var c *Claim
	var err error
	if derr := n.Do(func(ns.NetNS) error { c, err = Take(); return nil }); derr != nil {
		t.Fatal(derr)
	}
	return c, err
}

// TestTakeKernel: in a fresh namespace, a squatter of uid 65534 on
// @routeletd is passed by (its uid from sock_diag, or from /proc when
// sock_diag is unavailable) and a fallback name is bound; a second claim
// then refuses, naming the first, while the squatter holds the name and
// after it is gone; without any squatter, the first claim takes
// @routeletd and the second refuses.
func TestTakeKernel(t *testing.T) {
	for _, viaProc := range []bool{false, true} {
		t.Run(fmt.Sprintf("proc=%v", viaProc), func(t *testing.T) {
			n := netnstest.NewT(t).NetNS
			if viaProc {
				diag = func(func(string) bool) ([]socket, error) { return nil, errors.New("no sock_diag") }
				t.Cleanup(func() { diag = diagSockets })
			}
			pid, stop := squat(t, n, Name)
			c, err := takeIn(t, n)
			if err != nil {
				t.Fatalf("Take with a squatter: %v", err)
			}
			h := c.Squatter
			if h == nil || !strings.HasPrefix(c.Name, "@routeletd/") {
				t.Fatalf("Take with a squatter: name %s, squatter %v", c.Name, h)
			}
			if (viaProc && h.UID != -1) || (!viaProc && h.UID != 65534) || len(h.Procs) != 1 || h.Procs[0].PID != pid || h.Procs[0].EUID != 65534 {
				t.Errorf("squatter = %+v, want uid 65534, pid %d", *h, pid)
			}
			self := "pid " + strconv.Itoa(os.Getpid())
			for _, when := range []string{"while the squatter holds the name", "after the squatter is gone"} {
				if _, err := takeIn(t, n); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), c.Name) || !strings.Contains(err.Error(), self) {
					t.Errorf("second Take %s: %v, want ErrRunning naming %s and %s", when, err, c.Name, self)
				}
				stop()
			}
			c.Release()

			c, err = takeIn(t, n)
			if err != nil || c.Name != "@routeletd" || c.Squatter != nil {
				t.Fatalf("Take in a free namespace: %+v, %v", c, err)
			}
			defer c.Release()
			if _, err := takeIn(t, n); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "@routeletd") || !strings.Contains(err.Error(), self) {
				t.Errorf("second Take in a free namespace: %v, want ErrRunning naming @routeletd and %s", err, self)
			}
		})
	}
}
