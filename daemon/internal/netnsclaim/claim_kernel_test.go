package netnsclaim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// askEnv makes this test binary a client: it prints what the socket named
// answers.
const askEnv = "ROUTELET_NETNSCLAIM_ASK"

func TestMain(m *testing.M) {
	if name := os.Getenv(askEnv); name != "" {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err == nil {
			err = unix.Connect(fd, &unix.SockaddrUnix{Name: name})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "ask:", err)
			os.Exit(1)
		}
		_, _ = io.Copy(os.Stdout, os.NewFile(uintptr(fd), name))
		os.Exit(0)
	}
	if code, ok := netnstest.SquatMain(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
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
			sq := netnstest.Squat(t, n, "@"+Name, false)
			c, err := takeIn(t, n)
			if err != nil {
				t.Fatalf("Take with a squatter: %v", err)
			}
			h := c.Squatter
			if h == nil || !strings.HasPrefix(c.Name, "@routeletd/") {
				t.Fatalf("Take with a squatter: name %s, squatter %v", c.Name, h)
			}
			if (viaProc && h.UID != -1) || (!viaProc && h.UID != 65534) || len(h.Procs) != 1 || h.Procs[0].PID != sq.PID() || h.Procs[0].EUID != 65534 {
				t.Errorf("squatter = %+v, want uid 65534, pid %d", *h, sq.PID())
			}
			self := "pid " + strconv.Itoa(os.Getpid())
			for _, when := range []string{"while the squatter holds the name", "after the squatter is gone"} {
				if _, err := takeIn(t, n); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), c.Name) || !strings.Contains(err.Error(), self) {
					t.Errorf("second Take %s: %v, want ErrRunning naming %s and %s", when, err, c.Name, self)
				}
				sq.Stop()
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

// dialIn runs Dial inside n and returns what the holder answered.
func dialIn(t *testing.T, n ns.NetNS) (string, error) {
	t.Helper()
	var got []byte
	var err error
	if derr := n.Do(func(ns.NetNS) error {
		c, err := Dial()
		if err != nil {
			return err
		}
		defer c.Close()
		got, err = io.ReadAll(c)
		return err
	}); derr != nil {
		err = derr
	}
	return string(got), err
}

// TestDialKernel: Dial finds the claim that answers, on @routeletd or,
// while an unprivileged squatter listens on that name, on the fallback
// name; the squatter is never dialled for good. With no claim it is
// ErrNotHeld, and an unprivileged client gets no answer.
func TestDialKernel(t *testing.T) {
	n := netnstest.NewT(t).NetNS
	if _, err := dialIn(t, n); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Dial in an empty namespace: %v, want ErrNotHeld", err)
	}
	sq := netnstest.Squat(t, n, "@"+Name, true)
	if _, err := dialIn(t, n); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Dial with only a squatter listening: %v, want ErrNotHeld", err)
	}
	c, err := takeIn(t, n)
	if err != nil || c.Squatter == nil {
		t.Fatalf("Take with a squatter: %+v, %v", c, err)
	}
	c.Answer([]byte("fallback"))
	if got, err := dialIn(t, n); err != nil || got != "fallback" {
		t.Errorf("Dial with a squatter on @%s and the claim on %s: %q, %v; want the claim's answer", Name, c.Name, got, err)
	}
	c.Release()
	sq.Stop()

	c, err = takeIn(t, n)
	if err != nil || c.Name != "@"+Name {
		t.Fatalf("Take in a free namespace: %+v, %v", c, err)
	}
	defer c.Release()
	c.Answer([]byte("claim"))
	if got, err := dialIn(t, n); err != nil || got != "claim" {
		t.Errorf("Dial: %q, %v; want the claim's answer", got, err)
	}
	ask := netnstest.Unprivileged(t, askEnv+"=@"+Name)
	var out []byte
	var askErr error
	if err := n.Do(func(ns.NetNS) error { out, askErr = ask.Output(); return nil }); err != nil {
		t.Fatal(err)
	}
	if askErr != nil || len(out) != 0 {
		t.Errorf("an unprivileged client got %q (%v), want no answer and a clean close", out, askErr)
	}
}
