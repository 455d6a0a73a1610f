package overlaymgr

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Watch subscribes to link, route and neighbour notifications of the
// calling process's network namespace and runs the device check every
// checkPeriod, until ctx is done. Each relevant event or check records a
// hint and calls wake (agent.NotifyApply); the repair happens in Apply on
// the loop goroutine. Relevant: a link event for an overlay device, its
// parent or another owned interface (deleted, down, MTU or MAC changed); a
// routelet-protocol route deleted from an owned interface; any neighbour or
// FDB change on a VXLAN device (our own writes echo back once and cost one
// re-read that finds nothing to do). A subscription whose socket fails is
// re-established after a second, with a full check, since events were lost.
func (m *Manager) Watch(ctx context.Context, checkPeriod time.Duration, routeProtocol int, wake func()) error {
	names := &ifNames{byIndex: map[int]string{}}
	linkCh := make(chan netlink.LinkUpdate, 256)
	routeCh := make(chan netlink.RouteUpdate, 1024)
	neighCh := make(chan netlink.NeighUpdate, 1024)
	subscribe := func(done chan struct{}) error {
		errCB := func(err error) { m.log.Warn("overlay netlink subscription failed", "err", err) }
		if err := netlink.LinkSubscribeWithOptions(linkCh, done, netlink.LinkSubscribeOptions{
			ListExisting: true, ErrorCallback: errCB, ReceiveBufferSize: 1 << 20}); err != nil {
			return fmt.Errorf("overlay: subscribe to links: %w", err)
		}
		if err := netlink.RouteSubscribeWithOptions(routeCh, done, netlink.RouteSubscribeOptions{
			ErrorCallback: errCB, ReceiveBufferSize: 4 << 20}); err != nil {
			return fmt.Errorf("overlay: subscribe to routes: %w", err)
		}
		if err := netlink.NeighSubscribeWithOptions(neighCh, done, netlink.NeighSubscribeOptions{
			ErrorCallback: errCB, ReceiveBufferSize: 4 << 20}); err != nil {
			return fmt.Errorf("overlay: subscribe to neighbours: %w", err)
		}
		return nil
	}
	done := make(chan struct{})
	if err := subscribe(done); err != nil {
		close(done)
		return err
	}
	go func() {
		tick := time.NewTicker(checkPeriod)
		defer tick.Stop()
		var resub <-chan time.Time
		lost := func() {
			// A subscription closed its channel: close the others too and
			// subscribe again shortly; meanwhile check everything.
			if resub != nil {
				return
			}
			close(done)
			// Drain what the old subscriptions still send until they close
			// their channels, so none blocks forever on a full one.
			go drain(linkCh)
			go drain(routeCh)
			go drain(neighCh)
			linkCh, routeCh, neighCh = nil, nil, nil
			m.queueCheck()
			wake()
			resub = time.After(time.Second)
		}
		for {
			select {
			case <-ctx.Done():
				if resub == nil {
					close(done)
				}
				return
			case <-tick.C:
				m.queueCheck()
				wake()
			case <-resub:
				resub = nil
				linkCh = make(chan netlink.LinkUpdate, 256)
				routeCh = make(chan netlink.RouteUpdate, 1024)
				neighCh = make(chan netlink.NeighUpdate, 1024)
				done = make(chan struct{})
				if err := subscribe(done); err != nil {
					m.log.Warn("overlay: re-subscribing failed, retrying", "err", err)
					close(done)
					go drain(linkCh)
					go drain(routeCh)
					go drain(neighCh)
					linkCh, routeCh, neighCh = nil, nil, nil
					resub = time.After(time.Second)
					continue
				}
				m.queueCheck()
				wake()
			case u, ok := <-linkCh:
				if !ok {
					lost()
					continue
				}
				name := u.Attrs().Name
				if u.Header.Type == unix.RTM_DELLINK {
					names.del(u.Attrs().Index)
				} else {
					names.set(u.Attrs().Index, name)
				}
				if m.onLink(name) {
					wake()
				}
			case u, ok := <-routeCh:
				if !ok {
					lost()
					continue
				}
				if u.Type != unix.RTM_DELROUTE || int(u.Protocol) != routeProtocol ||
					(u.Table != 0 && u.Table != unix.RT_TABLE_MAIN) {
					continue
				}
				if name := names.get(u.LinkIndex); name != "" && m.owns(name) {
					m.markIface(name)
					wake()
				}
			case u, ok := <-neighCh:
				if !ok {
					lost()
					continue
				}
				if name := names.get(u.LinkIndex); name != "" && m.onNeigh(name) {
					wake()
				}
			}
		}
	}()
	return nil
}

// drain reads ch until it is closed (a stopped subscription closes its
// channel within moments), or for at most 10 s: a channel whose
// subscription never started is never closed.
func drain[T any](ch chan T) {
	if ch == nil {
		return
	}
	stop := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-stop:
			return
		}
	}
}

// ifNames maps interface indexes to names, from link notifications.
type ifNames struct {
	mu      sync.Mutex
	byIndex map[int]string
}

func (n *ifNames) set(i int, name string) { n.mu.Lock(); n.byIndex[i] = name; n.mu.Unlock() }
func (n *ifNames) del(i int)              { n.mu.Lock(); delete(n.byIndex, i); n.mu.Unlock() }
func (n *ifNames) get(i int) string       { n.mu.Lock(); defer n.mu.Unlock(); return n.byIndex[i] }
