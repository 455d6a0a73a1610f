package netnstest

import (
	"errors"
	"testing"
	"time"
)

// pollEvery is how often WaitFor and Eventually look at their condition.
const pollEvery = 10 * time.Millisecond

// errNotYet is the reason Eventually reports for a condition that never held.
var errNotYet = errors.New("condition not met")

// WaitFor calls check every 10 ms until it returns nil and returns how long
// that took. When Generous(timeout) passes first it fails t, naming what and
// the last error check returned (which should say what was seen instead).
// Tests wait for conditions with it instead of sleeping.
func WaitFor(t testing.TB, timeout time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	return waitFor(t, Generous(timeout), what, check)
}

// waitFor is WaitFor with the timeout taken as it is.
func waitFor(t testing.TB, timeout time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(pollEvery)
	}
}

// Eventually is WaitFor for a condition that has nothing to say when it
// does not hold.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return WaitFor(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}
