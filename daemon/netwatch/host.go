package netwatch

import (
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostHandler is what an owner whose Interest sets Host implements besides
// Handler. OnHostChange runs on a watcher goroutine whenever the node's own
// address space may have changed — an address added or removed on any
// interface, any link notification (a link that appears, goes, is renamed
// or changes), a route notification in the main table whose protocol is
// not one of Interest.OwnProtocols — and must only record a hint. Lost
// events are a Rescan, as for every owner.
type HostHandler interface {
	OnHostChange()
}

// hostOwners reports whether any owner asked for host changes.
func (w *Watcher) hostOwners() bool {
	return slices.ContainsFunc(w.owners, func(o owner) bool { return o.in.Host })
}

// hostChanged tells the owners that asked for host changes.
func (w *Watcher) hostChanged() {
	for _, o := range w.owners {
		if h, ok := o.h.(HostHandler); ok && o.in.Host {
			h.OnHostChange()
		}
	}
}

// hostRoute tells the owners that asked for host changes about a route
// event in the main table of a protocol they do not own.
func (w *Watcher) hostRoute(ev RouteEvent) {
	if ev.Table != unix.RT_TABLE_MAIN {
		return
	}
	for _, o := range w.owners {
		if h, ok := o.h.(HostHandler); ok && o.in.Host && !slices.Contains(o.in.OwnProtocols, ev.Protocol) {
			h.OnHostChange()
		}
	}
}

// Addr dispatches one address notification: every address belongs to the
// node's own address space.
func (w *Watcher) Addr(netlink.AddrUpdate) { w.hostChanged() }

// addrSubscribe returns the address subscription function in the shape
// pump re-subscribes with.
func addrSubscribe(onErr func(error)) func(chan netlink.AddrUpdate, chan struct{}) error {
	return func(ch chan netlink.AddrUpdate, done chan struct{}) error {
		return netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{
			ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
}
