package agent

import "time"

// schedule holds the loop's periodic work: every tick runs on the loop
// goroutine when due. A tick's run reports whether the loop should make a
// pass (process hints, apply) afterwards.
type schedule struct {
	ticks []*tick
}

type tick struct {
	name   string
	period time.Duration
	next   time.Time
	run    func() bool
}

// add schedules run every period, first at now+period.
func (s *schedule) add(name string, period time.Duration, now time.Time, run func() bool) {
	s.ticks = append(s.ticks, &tick{name: name, period: period, next: now.Add(period), run: run})
}

// wait returns how long until the next tick is due (at most a minute when
// nothing is scheduled).
func (s *schedule) wait(now time.Time) time.Duration {
	d := time.Minute
	for _, t := range s.ticks {
		d = min(d, t.next.Sub(now))
	}
	return max(d, 0)
}

// runDue runs every tick that is due at now, in the order added, and
// reports whether any asked for a pass. A tick that fell more than one
// period behind (the loop was busy) runs once, not once per missed period.
func (s *schedule) runDue(now time.Time) bool {
	pass := false
	for _, t := range s.ticks {
		if now.Before(t.next) {
			continue
		}
		t.next = t.next.Add(t.period)
		if !now.Before(t.next) {
			t.next = now.Add(t.period)
		}
		if t.run() {
			pass = true
		}
	}
	return pass
}

// due lists the names of the ticks due at now (for tests and logs).
func (s *schedule) due(now time.Time) []string {
	var out []string
	for _, t := range s.ticks {
		if !now.Before(t.next) {
			out = append(out, t.name)
		}
	}
	return out
}
