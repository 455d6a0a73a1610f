package netnstest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProc: a process runs inside the namespace with its output in the
// buffer; Stop returns its exit status (again when repeated), reports one
// that ignores SIGTERM as still running, and StopOrKill and Kill end it.
func TestProc(t *testing.T) {
	n := NewT(t)
	want, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	log := &Buffer{}
	p, err := StartIn(n.NetNS, log, "sh", "-c", "readlink /proc/self/ns/net; exec sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	if p.Cmd.SysProcAttr == nil || p.Cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Error("process does not die with its parent")
	}
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(log.String(), "net:[") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := strings.TrimSpace(log.String()); got == want || !strings.HasPrefix(got, "net:[") {
		t.Errorf("process in netns %q, want a namespace other than the caller's %q", got, want)
	}
	if p.Err() != nil {
		t.Errorf("Err before exit: %v", p.Err())
	}
	for range 2 {
		var ee *exec.ExitError
		if err := p.Stop(5 * time.Second); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("Stop: %v, want death by SIGTERM", err)
		}
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Stop")
	}

	// stubborn starts a shell ignoring SIGTERM and returns once it says
	// so: "up" comes after the trap is set.
	stubborn := func() *Proc {
		t.Helper()
		out := &Buffer{}
		p, err := StartIn(n.NetNS, out, "sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.05; done")
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(out.String(), "up") {
			if time.Now().After(deadline) {
				t.Fatalf("shell did not set its trap within a minute: %q", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		return p
	}
	p = stubborn()
	if err := p.Stop(300 * time.Millisecond); !errors.Is(err, ErrStillRunning) {
		t.Errorf("Stop of a process ignoring SIGTERM: %v, want ErrStillRunning", err)
	}
	if err := p.StopOrKill(300 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "sh ignored SIGTERM for 300ms") {
		t.Errorf("StopOrKill: %v, want SIGTERM ignored", err)
	}
	p = stubborn()
	var ee *exec.ExitError
	if err := p.Kill(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Kill: %v, want death by SIGKILL", err)
	}
}
