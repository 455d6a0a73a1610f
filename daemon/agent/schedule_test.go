package agent

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/peers"
)

// TestSchedule: ticks run when due, in the order added, once however far
// behind the loop fell; wait names the earliest.
func TestSchedule(t *testing.T) {
	var ran []string
	s := &schedule{}
	s.add("fast", time.Second, t0, func() bool { ran = append(ran, "fast"); return false })
	s.add("slow", 10*time.Second, t0, func() bool { ran = append(ran, "slow"); return true })
	if d := s.wait(t0); d != time.Second {
		t.Errorf("wait at start %s, want 1s", d)
	}
	if s.runDue(t0.Add(500*time.Millisecond)) || len(ran) != 0 {
		t.Errorf("ran %v before anything was due", ran)
	}
	if pass := s.runDue(t0.Add(time.Second)); pass || !reflect.DeepEqual(ran, []string{"fast"}) {
		t.Errorf("at 1s: ran %v, pass %v; want [fast], no pass", ran, pass)
	}
	ran = nil
	// 25 s late: each runs once, and the next is a period after now.
	now := t0.Add(35 * time.Second)
	if pass := s.runDue(now); !pass || !reflect.DeepEqual(ran, []string{"fast", "slow"}) {
		t.Errorf("late: ran %v, pass %v; want [fast slow], a pass", ran, pass)
	}
	if d := s.wait(now); d != time.Second {
		t.Errorf("wait after a late run %s, want 1s", d)
	}
	if got := s.due(now.Add(10 * time.Second)); !reflect.DeepEqual(got, []string{"fast", "slow"}) {
		t.Errorf("due 10s later: %v", got)
	}
}

// checkingManager is a Manager and Checker that counts checks and the
// Applies that follow them.
type checkingManager struct {
	mu            sync.Mutex
	queued        bool
	checksApplied int
}

func (m *checkingManager) OnNodes([]peers.NodeInfo)   {}
func (m *checkingManager) OnWorkloads(Served)         {}
func (m *checkingManager) CheckPeriod() time.Duration { return 5 * time.Millisecond }
func (m *checkingManager) QueueCheck()                { m.mu.Lock(); m.queued = true; m.mu.Unlock() }
func (m *checkingManager) Apply() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queued {
		m.queued = false
		m.checksApplied++
	}
	return nil
}
func (m *checkingManager) count() int { m.mu.Lock(); defer m.mu.Unlock(); return m.checksApplied }

// TestCheckerTicksInTheLoop: a Checker manager's check is queued on the
// loop's schedule and carried out by the Apply of the same pass.
func TestCheckerTicksInTheLoop(t *testing.T) {
	f := newFixture(t)
	m := &checkingManager{}
	f.run(t, m)
	waitFor(t, "three checks applied", func() bool { return m.count() >= 3 })
}

// TestCheckTickAppliesOnlyItsManager: a check tick with nothing else to do
// applies the Checker alone; the route tables and the other managers are
// not applied again until something changes for them.
func TestCheckTickAppliesOnlyItsManager(t *testing.T) {
	f := newFixture(t)
	c, other := &checkingManager{}, &countingManager{}
	f.run(t, c, other)
	waitFor(t, "ready", func() bool { ok, _ := f.st.Ready(); return ok })
	// The watchers' start-up hints come within the first ticks.
	waitFor(t, "three checks applied", func() bool { return c.count() >= 3 })
	f.rt4.mu.Lock()
	tableApplies := f.rt4.applies
	f.rt4.mu.Unlock()
	otherApplies := other.count()
	checks := c.count()
	waitFor(t, "ten more checks applied", func() bool { return c.count() >= checks+10 })
	f.rt4.mu.Lock()
	defer f.rt4.mu.Unlock()
	if f.rt4.applies != tableApplies || other.count() != otherApplies {
		t.Errorf("over ten check ticks: %d table and %d other-manager applies, want none",
			f.rt4.applies-tableApplies, other.count()-otherApplies)
	}
}

// countingTemps is a TempCollector that counts its runs and fails the
// first ones.
type countingTemps struct {
	mu    sync.Mutex
	runs  int
	fails int
}

func (c *countingTemps) RemoveStaleTemps() ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs++
	if c.runs <= c.fails {
		return []string{"/state/ipam/.tmp-1"}, errors.New("injected")
	}
	return nil, nil
}

func (c *countingTemps) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.runs }

// TestTempCollectionTicksInTheLoop: the temp collector runs on the leak
// collection's tick, again after an error.
func TestTempCollectionTicksInTheLoop(t *testing.T) {
	f := newFixture(t)
	f.a.opts.TickPeriod = 5 * time.Millisecond
	c := &countingTemps{fails: 2}
	f.a.wl.temps = c
	f.run(t)
	waitFor(t, "four temp collections", func() bool { return c.count() >= 4 })
}
