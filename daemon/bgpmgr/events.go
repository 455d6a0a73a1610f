package bgpmgr

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/netwatch"
)

// Changes carries the speaker's change hints (bgp.Config.OnChange) to the
// manager and the loop, both made after the speaker: routeletd makes one,
// passes its Notify as the speaker's OnChange and the Changes itself as
// Config.Changes, and calls SetWake with the loop's NotifyApply once the
// loop exists. A hint makes the next Apply read the speaker's sessions
// and learned routes; hints before SetWake are kept for the first Apply.
// The zero value is ready; it is safe for concurrent use.
type Changes struct {
	pending atomic.Bool
	mu      sync.Mutex
	wake    func()
}

// Notify records a change and asks the loop for a pass (any goroutine).
func (c *Changes) Notify() {
	c.pending.Store(true)
	c.mu.Lock()
	wake := c.wake
	c.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// SetWake sets what Notify calls after recording the change (the loop's
// NotifyApply).
func (c *Changes) SetWake(wake func()) {
	c.mu.Lock()
	c.wake = wake
	c.mu.Unlock()
}

// take reports whether a change was notified since the last take.
func (c *Changes) take() bool { return c.pending.Swap(false) }

// Interest is what the manager owns in the netlink event stream: the
// uplink's link events and the deletions of the BGP route protocol's
// routes on it (main table).
func (m *Manager) Interest() netwatch.Interest {
	return netwatch.Interest{
		Names:     []string{m.cfg.Iface},
		Protocols: []int{m.cfg.RouteProtocol}, Tables: []int{0, unix.RT_TABLE_MAIN}, RouteDeletesOnly: true,
	}
}

// Events returns the manager's netwatch.Handler: each event that matters
// records a hint and calls wake (the loop's NotifyApply); the repair
// happens in Apply on the loop goroutine. Relevant: a link event of the
// uplink (down and up again, its routes gone: re-read), the deletion of a
// learned route the manager wants (the echo of its own deletes is not).
// Lost events (Rescan) re-read the uplink's routes.
func (m *Manager) Events(wake func()) netwatch.Handler { return events{m, wake} }

type events struct {
	m    *Manager
	wake func()
}

// OnLink implements netwatch.Handler.
func (e events) OnLink(ev netwatch.LinkEvent) {
	if ev.Name == e.m.cfg.Iface && len(e.m.routes.Families()) > 0 {
		e.m.routes.MarkDirty()
		e.wake()
	}
}

// OnRoute implements netwatch.Handler: a wanted route deleted from the
// uplink is put back (routeset.Set.Deleted: reported to OnDrift, the
// uplink's routes re-read).
func (e events) OnRoute(ev netwatch.RouteEvent) {
	if ev.Deleted && e.m.routes.Deleted(ev.Iface, ev.Dst, e.m.cfg.OnDrift) {
		e.wake()
	}
}

// OnNeigh implements netwatch.Handler: the manager owns no neighbours.
func (events) OnNeigh(netwatch.NeighEvent) {}

// Rescan implements netwatch.Handler.
func (e events) Rescan() {
	e.m.routes.MarkDirty()
	e.m.cfg.Changes.pending.Store(true)
	e.wake()
}
