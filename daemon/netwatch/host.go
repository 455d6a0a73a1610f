package netwatch

import (
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// HostHandler is what an owner whose Interest sets Host implements besides
// Handler. OnHostChange runs on a watcher goroutine whenever the node's own
// address space may have changed — an address added or removed on any
// interface, any link notification (a link that appears, goes, is renamed
// or changes), a route notification in the main table whose protocol is
// not one of Interest.OwnProtocols — and must only record a hint. Events
// of a link that Interest.HostIgnores names (and whose kind the watcher
// knows from a link notification) are left out. Lost events are a Rescan,
// as for every owner.
type HostHandler interface {
	OnHostChange()
}

// ignoresHost reports whether the events of the link name of kind are no
// host change for the owner of in.
func (in Interest) ignoresHost(name, kind string) bool {
	return in.HostIgnores != nil && in.HostIgnores(name, kind)
}

// hostOwners reports whether any owner asked for host changes.
func (w *Watcher) hostOwners() bool {
	return slices.ContainsFunc(w.owners, func(o owner) bool { return o.in.Host })
}

// hostChange tells the owners that asked for host changes, except those
// for which ignored (nil: none) says the event is not one.
func (w *Watcher) hostChange(ignored func(Interest) bool) {
	for _, o := range w.owners {
		if h, ok := o.h.(HostHandler); ok && o.in.Host && (ignored == nil || !ignored(o.in)) {
			h.OnHostChange()
		}
	}
}

// hostOnLink tells the host owners of an event about the link with index
// i, unless they ignore that link.
func (w *Watcher) hostOnLink(i int) {
	name, kind, known := w.names.link(i)
	w.hostChange(func(in Interest) bool { return known && in.ignoresHost(name, kind) })
}

// hostRoute tells the owners that asked for host changes about a route
// event in the main table of a protocol they do not own, through a link
// (index i) they do not ignore.
func (w *Watcher) hostRoute(ev RouteEvent, i int) {
	if ev.Table != unix.RT_TABLE_MAIN {
		return
	}
	name, kind, known := w.names.link(i)
	w.hostChange(func(in Interest) bool {
		return slices.Contains(in.OwnProtocols, ev.Protocol) || (known && in.ignoresHost(name, kind))
	})
}

// Addr dispatches one address notification: every address belongs to the
// node's own address space, but for those on links a host owner ignores.
func (w *Watcher) Addr(u netlink.AddrUpdate) { w.hostOnLink(u.LinkIndex) }

// addrSubscribe returns the address subscription function in the shape
// pump re-subscribes with.
func addrSubscribe(ns netns.NsHandle, onErr func(error)) func(chan netlink.AddrUpdate, chan struct{}) error {
	return func(ch chan netlink.AddrUpdate, done chan struct{}) error {
		return netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{Namespace: &ns,
			ErrorCallback: onErr, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: true})
	}
}
