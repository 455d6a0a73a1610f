package wgmgr

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/internal/dirwatch"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/pkg/wireguard"
)

// Interest is what the manager owns in the netlink event stream: the
// device's link events, the deletions of its route protocol's routes on
// it (main table), and, as a host owner that ignores every other link,
// the address events of the device.
func (m *Manager) Interest() netwatch.Interest {
	dev := m.cfg.Device
	return netwatch.Interest{
		Names:     []string{dev},
		Protocols: []int{m.cfg.RouteProtocol}, Tables: []int{0, unix.RT_TABLE_MAIN}, RouteDeletesOnly: true,
		Host: true, OwnProtocols: []int{m.cfg.RouteProtocol},
		HostIgnores: func(name, _ string) bool { return name != dev },
	}
}

// Events returns the manager's netwatch.Handler: each event that matters
// records a hint and calls wake (the loop's NotifyApply); the repair
// happens in Apply on the loop goroutine. Relevant: a link event of the
// device (created, deleted, down, renamed, MTU changed: the device
// re-checks itself, its routes are re-read), an address change on it (a
// device check), the deletion of a route the manager wants on it (the
// echo of its own deletes is not). Lost events (Rescan) queue the full
// check.
func (m *Manager) Events(wake func()) netwatch.Handler { return events{m, wake} }

type events struct {
	m    *Manager
	wake func()
}

// OnLink implements netwatch.Handler.
func (e events) OnLink(ev netwatch.LinkEvent) {
	if e.m.dev.OnLinkUpdate(ev.Name) || ev.Name == e.m.cfg.Device {
		e.m.routes.MarkDirty()
		e.wake()
	}
}

// OnRoute implements netwatch.Handler: a wanted route deleted from the
// device is put back (routeset.Set.Deleted: reported to OnDrift, the
// device's routes re-read).
func (e events) OnRoute(ev netwatch.RouteEvent) {
	if ev.Deleted && e.m.routes.Deleted(ev.Iface, ev.Dst, e.m.cfg.OnDrift) {
		e.wake()
	}
}

// OnNeigh implements netwatch.Handler: the device has no neighbours.
func (events) OnNeigh(netwatch.NeighEvent) {}

// OnHostChange implements netwatch.HostHandler: an address or link
// change on the device (every other link is ignored).
func (e events) OnHostChange() {
	e.m.dev.QueueCheck()
	e.wake()
}

// Rescan implements netwatch.Handler.
func (e events) Rescan() {
	e.m.QueueCheck()
	e.wake()
}

var _ netwatch.HostHandler = events{}

// Watch watches the key directory (<StateDir>/wireguard) until ctx is
// done: a change of the key file (`routeletd wireguard rotate-key`, an
// operator's copy) makes the next Apply read it again, and wake (the
// loop's NotifyApply) asks for that Apply. A lost watch (an fsnotify
// error, the directory removed and made again) counts as a change; the
// periodic check reads the key file too.
func (m *Manager) Watch(ctx context.Context, wake func()) error {
	changed := func() { m.KeyChanged(); wake() }
	isKey := func(name string) bool { return name == wireguard.KeyFile }
	if err := dirwatch.WatchNames(ctx, KeyDir(m.cfg.StateDir), isKey, func(string) { changed() }, changed, m.log); err != nil {
		return fmt.Errorf("wireguard key watch: %w", err)
	}
	return nil
}
