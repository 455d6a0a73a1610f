// Package testproc runs the server processes tests start (etcd,
// kube-apiserver): in the test's namespace or one it created, killed with
// the test process, stopped by PID.
package testproc

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// Proc is one started process.
type Proc struct {
	cmd  *exec.Cmd
	Name string
	done chan struct{}
	err  error
}

// Start runs bin with args, inside netNS when it is set; out receives its
// output.
func Start(netNS ns.NetNS, out io.Writer, bin string, args ...string) (*Proc, error) {
	name := filepath.Base(bin)
	cmd := exec.Command(bin, args...)
	if netNS != nil {
		// `ip netns exec` execs bin in place: the PID is bin's own.
		cmd = exec.Command("ip", append([]string{"netns", "exec", netnstest.Name(netNS), bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Killed with the test process, so a crashed run leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := netnstest.StartPinned(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{cmd: cmd, Name: name, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether p has exited, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to p's PID, then SIGKILL after 30 s.
func (p *Proc) Stop(t testing.TB) {
	if done, _ := p.Exited(); done {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s (pid %d) ignored SIGTERM for 30s; killing it", p.Name, p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill sends SIGKILL to p's PID (a crash: no graceful shutdown) and waits
// until it has exited.
func (p *Proc) Kill() {
	if done, _ := p.Exited(); done {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// RequireBinaries skips t when one of paths is missing, or fails it when
// ROUTELET_REQUIRE_TEST_BINS=1 (set by a CI lane that builds them first).
func RequireBinaries(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			msg := fmt.Sprintf("test binary %s missing (%v): run `make test-bins` (go run ./hack/testbins) to build it from the Go module proxy", p, err)
			if os.Getenv("ROUTELET_REQUIRE_TEST_BINS") == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// DialerIn returns a DialContext that opens its TCP connections from inside
// the network namespace n (for clients in the test process talking to a
// server that listens only there).
func DialerIn(n ns.NetNS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := n.Do(func(ns.NetNS) error {
			var d net.Dialer
			var err error
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// FreePort returns a TCP port free on the host's loopback just now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
