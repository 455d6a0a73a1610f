package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// relistPeriod is how often a wait reads the routes back in full besides
// the events: a burst the subscription's socket could not hold (the
// kernel then drops events and says so) is still counted.
const relistPeriod = 250 * time.Millisecond

// routeWatch follows the IPv4 routes of one kernel protocol inside pool
// in the main table of a network namespace: a netlink route subscription
// (what the bench times) and full reads (what it trusts).
type routeWatch struct {
	nl    *netlink.Handle
	ch    chan netlink.RouteUpdate
	done  chan struct{}
	lost  chan struct{} // the subscription reported an error: events may be missing
	proto netlink.RouteProtocol
	pool  netip.Prefix
	// uplink is the index of the node's eth0, where every route goes.
	uplink int
}

// uplink is the node's underlay interface (internal/cluster's).
const uplink = "eth0"

// watchRoutes subscribes to the route events of n, on a socket with an
// 8 MiB receive buffer (a burst of thousands of routes fits while the
// bench is slow to read), for the routes of protocol proto inside pool.
// Close ends it.
func watchRoutes(n ns.NetNS, proto int, pool netip.Prefix) (*routeWatch, error) {
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		return nil, err
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, err
	}
	l, err := nl.LinkByName(uplink)
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("%s in %s: %w", uplink, n.Path(), err)
	}
	w := &routeWatch{nl: nl, uplink: l.Attrs().Index, ch: make(chan netlink.RouteUpdate, 1<<16), done: make(chan struct{}),
		lost: make(chan struct{}, 1), proto: netlink.RouteProtocol(proto), pool: pool.Masked()}
	err = netlink.RouteSubscribeWithOptions(w.ch, w.done, netlink.RouteSubscribeOptions{Namespace: &h,
		ReceiveBufferSize: 8 << 20, ReceiveBufferForceSize: true,
		ErrorCallback: func(error) {
			select {
			case w.lost <- struct{}{}:
			default:
			}
		}})
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("route subscription in %s: %w", n.Path(), err)
	}
	return w, nil
}

// Close ends the subscription.
func (w *routeWatch) Close() {
	close(w.done)
	w.nl.Close()
}

// matches reports whether r is one of the watched routes.
func (w *routeWatch) matches(r *netlink.Route) bool {
	if r.Protocol != w.proto || r.Dst == nil || (r.Table != 0 && r.Table != unix.RT_TABLE_MAIN) {
		return false
	}
	p, ok := prefixOf(r)
	return ok && p.Bits() >= w.pool.Bits() && w.pool.Contains(p.Addr())
}

// prefixOf returns r's destination as a prefix.
func prefixOf(r *netlink.Route) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits), true
}

// list reads the watched routes in full.
func (w *routeWatch) list() (map[netip.Prefix]bool, error) {
	rs, err := w.nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: w.proto},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list routes of protocol %d: %w", w.proto, err)
	}
	out := make(map[netip.Prefix]bool, len(rs))
	for i := range rs {
		if w.matches(&rs[i]) {
			p, _ := prefixOf(&rs[i])
			out[p] = true
		}
	}
	return out, nil
}

// Drain discards the events received so far (an earlier round's), so a
// wait that follows sees only what comes after.
func (w *routeWatch) Drain() {
	for {
		select {
		case <-w.ch:
		case <-w.lost:
		default:
			return
		}
	}
}

// Count returns how many of the watched routes the kernel holds.
func (w *routeWatch) Count() (int, error) {
	m, err := w.list()
	return len(m), err
}

// WaitCount waits until the kernel holds exactly want of the watched
// routes and returns the moment it was first seen so: the arrival of the
// event that completed the set (or, when events were lost, the full read
// that found it). The events only say when; a full read confirms every
// count before it is believed.
func (w *routeWatch) WaitCount(ctx context.Context, want int, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	have, err := w.list()
	if err != nil {
		return time.Time{}, err
	}
	if len(have) == want {
		return time.Now(), nil
	}
	tick := time.NewTicker(relistPeriod)
	defer tick.Stop()
	relist := func() (bool, time.Time, error) {
		at := time.Now()
		m, err := w.list()
		if err != nil {
			return false, time.Time{}, err
		}
		have = m
		return len(have) == want, at, nil
	}
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d routes of protocol %d inside %s after %s, want %d", len(have), w.proto, w.pool, timeout, want)
		case u := <-w.ch:
			if !w.matches(&u.Route) {
				continue
			}
			p, _ := prefixOf(&u.Route)
			switch u.Type {
			case unix.RTM_NEWROUTE:
				have[p] = true
			case unix.RTM_DELROUTE:
				delete(have, p)
			}
			if len(have) != want {
				continue
			}
			at := time.Now()
			if done, _, err := relist(); err != nil || done {
				return at, err
			}
		case <-w.lost:
			if done, at, err := relist(); err != nil || done {
				return at, err
			}
		case <-tick.C:
			if done, at, err := relist(); err != nil || done {
				return at, err
			}
		}
	}
}

// Check reads the watched routes and returns an error naming the first
// whose next hop is not gw(prefix) or whose interface is not link (its
// index), or when there are not want of them: the bench times only
// routes that are right.
func (w *routeWatch) Check(want int, gw func(netip.Prefix) netip.Addr) error {
	rs, err := w.nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: w.proto},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list routes of protocol %d: %w", w.proto, err)
	}
	n := 0
	for i := range rs {
		r := &rs[i]
		if !w.matches(r) {
			continue
		}
		n++
		p, _ := prefixOf(r)
		got, _ := netip.AddrFromSlice(r.Gw)
		if want := gw(p); got.Unmap() != want || r.LinkIndex != w.uplink {
			return fmt.Errorf("route %s via %s dev %d proto %d: want via %s dev %s (%d)", p, got.Unmap(), r.LinkIndex, w.proto, want, uplink, w.uplink)
		}
	}
	if n != want {
		return fmt.Errorf("%d routes of protocol %d inside %s, want %d", n, w.proto, w.pool, want)
	}
	return nil
}

// Flush deletes the watched routes: what a stopped daemon left, so the
// next round starts from an empty table.
func (w *routeWatch) Flush() error {
	rs, err := w.nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: w.proto},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list routes of protocol %d: %w", w.proto, err)
	}
	for i := range rs {
		if w.matches(&rs[i]) {
			// ESRCH: gone already (its owner removed it meanwhile).
			if err := w.nl.RouteDel(&rs[i]); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete %s: %w", rs[i].Dst, err)
			}
		}
	}
	return nil
}
