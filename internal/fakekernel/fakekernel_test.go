package fakekernel

import (
	"errors"
	"sync"
	"testing"
)

// calls makes n calls of name and returns their errors.
func calls(c *Calls, name string, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = c.Enter(name)
	}
	return out
}

func TestFailOnAndFail(t *testing.T) {
	e1, e2, e3 := errors.New("e1"), errors.New("e2"), errors.New("e3")
	var c Calls
	c.Enter("a")
	c.FailOn("a", 2, e1) // the second next call of a
	c.Fail("b", e2)      // queued: the next two calls of b
	c.Fail("b", e3)
	if got := calls(&c, "a", 3); got[0] != nil || got[1] != e1 || got[2] != nil {
		t.Errorf("calls of a returned %v, want [nil e1 nil]", got)
	}
	if got := calls(&c, "b", 3); got[0] != e2 || got[1] != e3 || got[2] != nil {
		t.Errorf("calls of b returned %v, want [e2 e3 nil]", got)
	}
	if c.Count("a") != 4 || c.Count("b") != 3 || c.Sum("a", "b", "c") != 7 || c.Total("b") != 4 {
		t.Errorf("Count a %d b %d, Sum %d, Total without b %d; want 4 3 7 4", c.Count("a"), c.Count("b"), c.Sum("a", "b", "c"), c.Total("b"))
	}
}

func TestResetKeepsPendingFailuresDue(t *testing.T) {
	e := errors.New("e")
	var c Calls
	calls(&c, "a", 5)
	c.FailOn("a", 2, e)
	c.Reset()
	if c.Count("a") != 0 || c.Total() != 0 {
		t.Fatalf("after Reset: Count %d, Total %d; want 0", c.Count("a"), c.Total())
	}
	if got := calls(&c, "a", 2); got[0] != nil || got[1] != e {
		t.Errorf("calls after Reset returned %v, want [nil e]", got)
	}
}

func TestDoSkipsFnOnFailure(t *testing.T) {
	e := errors.New("e")
	var c Calls
	var mu sync.Mutex
	ran := 0
	fn := func() error { ran++; return nil }
	c.Fail("a", e)
	if err := c.Do(&mu, "a", fn); err != e || ran != 0 {
		t.Errorf("Do with a failure due = %v, fn ran %d times; want e, 0", err, ran)
	}
	if err := c.Do(&mu, "a", fn); err != nil || ran != 1 {
		t.Errorf("Do = %v, fn ran %d times; want nil, 1", err, ran)
	}
}
