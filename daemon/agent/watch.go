package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// WatchFiles watches dirs (workloads/, nodes/) and forwards each event to a
// until ctx is done. A watcher error (e.g. queue overflow) asks for a full
// re-read, since events may have been lost. When a watched directory itself
// is removed or renamed away, it is re-created (0700, as the plugin would)
// and watched again, followed by a full re-read; until that works the
// periodic resync still reads it.
func WatchFiles(ctx context.Context, a *Agent, workloadsDir, nodesDir string, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file watcher: %w", err)
	}
	dirs := []string{filepath.Clean(workloadsDir), filepath.Clean(nodesDir)}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	go func() {
		defer w.Close()
		lost := map[string]bool{} // watched dirs that went away
		var retry <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				path := filepath.Clean(ev.Name)
				if (path == dirs[0] || path == dirs[1]) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					log.Warn("record directory went away, re-creating and watching it again", "dir", path)
					lost[path] = true
					retry = time.After(0)
					continue
				}
				dir, name := filepath.Split(path)
				a.NotifyFile(filepath.Clean(dir) == dirs[1], name)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("file watcher error, re-reading all records", "err", err)
				a.NotifyRescan()
			case <-retry:
				retry = nil
				for d := range lost {
					w.Remove(d) // the old watch may linger on a renamed directory
					if err := state.EnsureDir(d); err != nil {
						continue
					}
					if err := w.Add(d); err != nil {
						continue
					}
					delete(lost, d)
					log.Info("watching record directory again", "dir", d)
				}
				a.NotifyRescan()
				if len(lost) > 0 {
					retry = time.After(time.Second)
				}
			}
		}
	}()
	return nil
}

// WatchNetlink subscribes to link, route and neighbour notifications of the
// calling process's network namespace and forwards them to a until ctx is
// done. Existing links are reported before it returns, so the first sync
// knows which workload interfaces exist and are up. A subscription whose
// socket fails (e.g. ENOBUFS when a burst overflows it) is re-established
// and a full re-read is requested, since events were lost.
func WatchNetlink(ctx context.Context, a *Agent, log *slog.Logger) error {
	names := &ifNames{byIndex: map[int]string{}}
	onLink := func(u netlink.LinkUpdate) {
		name := u.Attrs().Name
		if u.Header.Type == unix.RTM_DELLINK {
			names.del(u.Attrs().Index)
			a.NotifyLink(name, u.Link.Type(), false, false)
			return
		}
		if old, ok := names.peek(u.Attrs().Index); ok && old != name {
			a.NotifyLink(old, u.Link.Type(), false, false) // renamed: the old name is gone
		}
		names.set(u.Attrs().Index, name)
		a.NotifyLink(name, u.Link.Type(), linkUp(u.Link), true)
	}
	onRoute := func(u netlink.RouteUpdate) {
		if ev, ok := routeEvent(u, names); ok {
			a.NotifyRoute(ev)
		}
	}
	onNeigh := func(u netlink.NeighUpdate) {
		if ip, ok := netip.AddrFromSlice(u.IP); ok {
			a.NotifyNeigh(NeighEvent{Iface: names.get(u.LinkIndex), IP: ip.Unmap(), Deleted: u.Type == unix.RTM_DELNEIGH})
		}
	}
	onErr := func(what string) func(error) {
		return func(err error) {
			if ctx.Err() == nil {
				log.Warn("netlink subscription error", "subscription", what, "err", err)
			}
		}
	}
	// Bursts (hundreds of routes and neighbours programmed at start-up)
	// must fit in the socket buffer; forcing the size needs CAP_NET_ADMIN,
	// which the daemon has anyway.
	const rcvbuf = 8 << 20
	linkSub := func(ch chan netlink.LinkUpdate, done chan struct{}) error {
		return netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{
			ErrorCallback: onErr("link"), ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
	routeSub := func(ch chan netlink.RouteUpdate, done chan struct{}) error {
		return netlink.RouteSubscribeWithOptions(ch, done, netlink.RouteSubscribeOptions{
			ErrorCallback: onErr("route"), ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
	neighSub := func(ch chan netlink.NeighUpdate, done chan struct{}) error {
		return netlink.NeighSubscribeWithOptions(ch, done, netlink.NeighSubscribeOptions{
			ErrorCallback: onErr("neigh"), ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
	// Subscribe before listing, so no change between the two is missed.
	linkCh, linkDone, err := subscribe(linkSub, 256)
	if err != nil {
		return fmt.Errorf("subscribe to links: %w", err)
	}
	routeCh, routeDone, err := subscribe(routeSub, 1024)
	if err != nil {
		close(linkDone)
		return fmt.Errorf("subscribe to routes: %w", err)
	}
	neighCh, neighDone, err := subscribe(neighSub, 1024)
	if err != nil {
		close(linkDone)
		close(routeDone)
		return fmt.Errorf("subscribe to neighbours: %w", err)
	}
	links, err := netlink.LinkList()
	if err != nil {
		close(linkDone)
		close(routeDone)
		close(neighDone)
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		names.set(l.Attrs().Index, l.Attrs().Name)
		a.NotifyLink(l.Attrs().Name, l.Type(), linkUp(l), true)
	}
	go pump(ctx, a, log, "link", linkCh, linkDone, linkSub, onLink)
	go pump(ctx, a, log, "route", routeCh, routeDone, routeSub, onRoute)
	go pump(ctx, a, log, "neigh", neighCh, neighDone, neighSub, onNeigh)
	return nil
}

// subscribe starts one subscription with a fresh channel and done channel.
func subscribe[T any](sub func(chan T, chan struct{}) error, size int) (chan T, chan struct{}, error) {
	ch := make(chan T, size)
	done := make(chan struct{})
	if err := sub(ch, done); err != nil {
		return nil, nil, err
	}
	return ch, done, nil
}

// pump hands every update on ch to handle until ctx is done. When the
// library closes ch (its socket failed), pump asks for a full re-read and
// subscribes again, backing off up to 5s between failed attempts.
func pump[T any](ctx context.Context, a *Agent, log *slog.Logger, what string, ch chan T, done chan struct{},
	sub func(chan T, chan struct{}) error, handle func(T)) {
	backoff := 100 * time.Millisecond
	size := cap(ch)
	for {
		for open := true; open; {
			select {
			case <-ctx.Done():
				close(done)
				return
			case u, ok := <-ch:
				if !ok {
					open = false
					break
				}
				handle(u)
			}
		}
		close(done) // releases the failed socket
		for {
			if ctx.Err() != nil {
				return
			}
			log.Warn("netlink subscription lost, re-subscribing and re-reading everything", "subscription", what)
			a.NotifyRescan()
			var err error
			ch, done, err = subscribe(sub, size)
			if err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			log.Warn("netlink re-subscribe failed", "subscription", what, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// linkUp: administratively up and not known to be without carrier.
func linkUp(l netlink.Link) bool {
	at := l.Attrs()
	if at.Flags&net.FlagUp == 0 {
		return false
	}
	return at.OperState == netlink.OperUp || at.OperState == netlink.OperUnknown
}

// routeEvent reduces a route update to a RouteEvent.
func routeEvent(u netlink.RouteUpdate, names *ifNames) (RouteEvent, bool) {
	if u.Type != unix.RTM_NEWROUTE && u.Type != unix.RTM_DELROUTE {
		return RouteEvent{}, false
	}
	ev := RouteEvent{
		IPv6:     u.Family == netlink.FAMILY_V6,
		Protocol: int(u.Protocol),
		Table:    u.Table,
		Deleted:  u.Type == unix.RTM_DELROUTE,
		Iface:    routes.InterfaceNone,
	}
	// Reject routes (blackhole, unreachable, prohibit, throw) have no output
	// device, although the kernel reports IPv6 ones on the loopback device.
	if u.LinkIndex != 0 && !isRejectRoute(u.Route.Type) {
		ev.Iface = names.get(u.LinkIndex)
		if ev.Iface == "" {
			return RouteEvent{}, false
		}
	}
	if u.Dst == nil {
		return RouteEvent{}, false // default routes are never routelet's
	}
	ip, ok := netip.AddrFromSlice(u.Dst.IP)
	if !ok {
		return RouteEvent{}, false
	}
	if !ev.IPv6 {
		ip = ip.Unmap()
	}
	ones, _ := u.Dst.Mask.Size()
	ev.Dst = netip.PrefixFrom(ip, ones)
	return ev, true
}

// isRejectRoute reports the route types that routes.InterfaceNone holds.
func isRejectRoute(t int) bool {
	switch t {
	case unix.RTN_BLACKHOLE, unix.RTN_UNREACHABLE, unix.RTN_PROHIBIT, unix.RTN_THROW:
		return true
	}
	return false
}

// ifNames maps interface indexes to names for route and neighbour events.
// Index lookups for unknown indexes go to the kernel; mu guards byIndex.
type ifNames struct {
	mu      sync.Mutex
	byIndex map[int]string
}

func (n *ifNames) set(i int, name string) {
	n.mu.Lock()
	n.byIndex[i] = name
	n.mu.Unlock()
}

func (n *ifNames) del(i int) {
	n.mu.Lock()
	delete(n.byIndex, i)
	n.mu.Unlock()
}

// peek returns the cached name of index i without asking the kernel.
func (n *ifNames) peek(i int) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, ok := n.byIndex[i]
	return name, ok
}

func (n *ifNames) get(i int) string {
	n.mu.Lock()
	name, ok := n.byIndex[i]
	n.mu.Unlock()
	if ok {
		return name
	}
	l, err := netlink.LinkByIndex(i)
	if err != nil {
		return ""
	}
	n.set(i, l.Attrs().Name)
	return l.Attrs().Name
}

// KernelHost is the real Host: netlink of the calling process's namespace
// and the filesystem for netns paths.
type KernelHost struct{}

// Links returns the name and netlink kind of every link in the namespace.
func (KernelHost) Links() (map[string]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make(map[string]string, len(links))
	for _, l := range links {
		out[l.Attrs().Name] = l.Type()
	}
	return out, nil
}

// NetnsGone reports whether path no longer exists or is no longer a network
// namespace (e.g. an unmounted bind-mount point left behind). Other errors
// (permissions) count as alive: never release on doubt.
func (KernelHost) NetnsGone(path string) bool {
	if path == "" {
		return true
	}
	err := ns.IsNSorErr(path)
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	return errors.As(err, &notExist) || errors.As(err, &notNS)
}
