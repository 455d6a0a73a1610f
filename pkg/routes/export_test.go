package routes

import "time"

// Hooks for the tests of package routes_test: those run the RouteTable on
// the fakes of routestest, a package that imports this one, so they cannot
// be internal tests.

// UsualConfig is usualConfig.
func UsualConfig(v int) Config { return usualConfig(v) }

// FakeClock is a Clock the test moves by hand (Advance).
type FakeClock = fakeClock

// NewFakeClock returns a FakeClock showing now.
func NewFakeClock(now time.Time) *FakeClock { return &fakeClock{now: now} }

// LivenessEvery is how many kernel operations pass between two liveness
// calls.
const LivenessEvery = livenessEvery

// Contested is the number of CIDRs more than one interface wants.
func (rt *RouteTable) Contested() int { return rt.contested }
