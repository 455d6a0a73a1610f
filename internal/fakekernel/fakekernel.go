// Package fakekernel is what the in-memory kernels of the routestest, overlay,
// ipsettest and firewall packages share: every call counted by name, and chosen
// calls failed with a given error.
package fakekernel

import (
	"slices"
	"sync"
)

// Calls counts calls by name and fails chosen ones. The zero value is
// ready to use. It has its own lock, so a fake may use it with or without
// its own lock held.
type Calls struct {
	mu       sync.Mutex
	counts   map[string]int
	failures []failure
}

// failure is an injected error for one call.
type failure struct {
	name string
	at   int // fires when counts[name] reaches at
	err  error
}

// Enter counts a call of name and returns the error injected for it, if
// any (each injected error is returned once).
func (c *Calls) Enter(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[name]++
	for i, f := range c.failures {
		if f.name == name && f.at == c.counts[name] {
			c.failures = slices.Delete(c.failures, i, i+1)
			return f.err
		}
	}
	return nil
}

// Do runs fn as a call of name with mu held: counted, and failed with the
// injected error, fn not run, when one is due.
func (c *Calls) Do(mu sync.Locker, name string, fn func() error) error {
	mu.Lock()
	defer mu.Unlock()
	if err := c.Enter(name); err != nil {
		return err
	}
	return fn()
}

// Get is Do for a call that returns a value: get's result, or the zero
// value and the injected error when one is due.
func Get[T any](c *Calls, mu sync.Locker, name string, get func() (T, error)) (T, error) {
	var out T
	err := c.Do(mu, name, func() (err error) {
		out, err = get()
		return err
	})
	return out, err
}

// FailOn makes the nth next call of name (1 = the very next one) return
// err.
func (c *Calls) FailOn(name string, nth int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, failure{name: name, at: c.counts[name] + nth, err: err})
}

// Fail queues err for name: errors queued for one name are returned by its
// next calls, one per call, in order.
func (c *Calls) Fail(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.counts[name]
	for _, f := range c.failures {
		if f.name == name {
			at = max(at, f.at)
		}
	}
	c.failures = append(c.failures, failure{name: name, at: at + 1, err: err})
}

// Count returns how many calls of name were made (failed ones included).
func (c *Calls) Count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[name]
}

// Sum returns how many calls of any of names were made.
func (c *Calls) Sum(names ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, name := range names {
		n += c.counts[name]
	}
	return n
}

// Total returns how many calls were made, not counting the names in
// except.
func (c *Calls) Total(except ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name, k := range c.counts {
		if !slices.Contains(except, name) {
			n += k
		}
	}
	return n
}

// Reset zeroes the counts; an error injected for a later call stays due
// that many calls from now.
func (c *Calls) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.failures {
		c.failures[i].at -= c.counts[c.failures[i].name]
	}
	clear(c.counts)
}
