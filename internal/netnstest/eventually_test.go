package netnstest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping the
// test that uses it.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

// Helper implements testing.TB.
func (r *recorder) Helper() {}

// Fatalf records the failure and ends the calling goroutine, as testing's does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = format
	for _, a := range args {
		if err, ok := a.(error); ok {
			r.failed += " " + err.Error()
		}
	}
	r.mu.Unlock()
	panic(r)
}

// run calls f with a recorder and returns what it recorded.
func run(t *testing.T, f func(tb testing.TB)) (failed string) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != any(r) {
				panic(p)
			}
		}()
		f(r)
	}()
	return r.failed
}

// TestWaitFor: a condition that comes true ends the wait without failing;
// one that never does fails after the timeout with the last reason given;
// WaitFor's timeout is never below SettleTimeout.
func TestWaitFor(t *testing.T) {
	calls := 0
	if failed := run(t, func(tb testing.TB) {
		waitFor(tb, time.Minute, "third call", func() error {
			if calls++; calls < 3 {
				return errors.New("not yet")
			}
			return nil
		})
	}); failed != "" || calls != 3 {
		t.Errorf("condition true on the third call: failed %q after %d calls", failed, calls)
	}
	failed := run(t, func(tb testing.TB) {
		waitFor(tb, 50*time.Millisecond, "never", func() error { return errors.New("saw 7, want 8") })
	})
	if !strings.Contains(failed, "saw 7, want 8") {
		t.Errorf("condition never true: failure %q, want it to carry the last reason", failed)
	}
	if got := Generous(time.Millisecond); got < SettleTimeout {
		t.Errorf("WaitFor's bound for 1ms is %s, want at least SettleTimeout (%s)", got, SettleTimeout)
	}
}
