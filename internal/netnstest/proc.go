package netnstest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// ErrStillRunning is wrapped by Proc.Stop's error when the process outlived
// the wait after SIGTERM.
var ErrStillRunning = errors.New("still running")

// Proc is a long-running process, such as routeletd, started inside a named
// network namespace by StartIn.
type Proc struct {
	Cmd  *exec.Cmd
	name string        // base name of the binary, for messages
	done chan struct{} // closed once Cmd.Wait has returned
	err  error         // Cmd.Wait's result; read only after done is closed
}

// StartIn runs name with args inside n through `ip netns exec`, which execs
// name in place, so Cmd.Process is the process itself. Its stdout and
// stderr go to out (a *Buffer, or a file). It gets SIGKILL when this
// process dies, even by SIGKILL (it is started from a thread that lives as
// long as the process: StartPinned), so no crashed run leaves it behind.
func StartIn(n ns.NetNS, out io.Writer, name string, args ...string) (*Proc, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", Name(n), name}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartPinned(cmd); err != nil {
		return nil, fmt.Errorf("start %s in netns %s: %w", name, Name(n), err)
	}
	p := &Proc{Cmd: cmd, name: filepath.Base(name), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited and Err holds its status.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the exit status (Cmd.Wait's error) once Done is closed, nil
// before.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stop sends SIGTERM and waits up to timeout for the exit. It returns the
// exit status, or an error wrapping ErrStillRunning when the process is
// still running then; it is left running. Stopping an exited process
// returns its exit status again.
func (p *Proc) Stop(timeout time.Duration) error {
	// Signalling an exited process fails harmlessly; the status is kept.
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s did not stop within %s of SIGTERM: %w", p.name, timeout, ErrStillRunning)
	}
}

// StopOrKill is Stop, then SIGKILL when the process ignored SIGTERM for
// timeout. It returns the exit status, joined with the fact that SIGTERM
// was ignored if so.
func (p *Proc) StopOrKill(timeout time.Duration) error {
	err := p.Stop(timeout)
	if errors.Is(err, ErrStillRunning) {
		err = errors.Join(fmt.Errorf("%s ignored SIGTERM for %s", p.name, timeout), p.Kill())
	}
	return err
}

// Kill sends SIGKILL, as a crash or an OOM kill would, waits for the exit
// and returns the exit status.
func (p *Proc) Kill() error {
	_ = p.Cmd.Process.Kill()
	<-p.done
	return p.err
}

// Buffer is a bytes.Buffer that goroutines may write and read at once: the
// log of a Proc while the test reads it.
type Buffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
