package netwatch

import (
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The rtnetlink multicast groups and attributes of device configuration
// (netconf) notifications (linux/rtnetlink.h, linux/netconf.h), which
// golang.org/x/sys does not name.
const (
	rtnlgrpIPv4Netconf    = 24 // RTNLGRP_IPV4_NETCONF
	rtnlgrpIPv6Netconf    = 25 // RTNLGRP_IPV6_NETCONF
	netconfaIfindex       = 1  // NETCONFA_IFINDEX
	netconfIfindexAll     = -1 // NETCONFA_IFINDEX_ALL: the "all" settings
	netconfIfindexDefault = -2 // NETCONFA_IFINDEX_DEFAULT: the "default" settings
	netconfmsgLen         = 4  // struct netconfmsg (one byte), aligned
)

// NetconfEvent is a device configuration notification (RTM_NEWNETCONF):
// one of the settings the kernel announces changed — IPv4 or IPv6
// forwarding, proxy_arp (IPv4 proxy_neigh), proxy_ndp (IPv6 proxy_neigh),
// rp_filter, mc_forwarding, ignore_routes_with_linkdown — on Iface, or on
// the node ("all" or "default") when Iface is "". The kernel also sends one
// per setting when an interface appears. Other sysctls (accept_ra,
// accept_dad, proxy_delay…) change without any notification.
type NetconfEvent struct {
	IPv6  bool
	Iface string // "" for the node-wide settings
}

// NetconfHandler is what an owner whose Interest sets Netconf implements
// besides Handler. OnNetconf runs on a watcher goroutine and must only
// record a hint.
type NetconfHandler interface {
	OnNetconf(NetconfEvent)
}

// netconfUpdate is one RTM_NEWNETCONF as received: the family and the
// interface index (or netconfIfindexAll, netconfIfindexDefault).
type netconfUpdate struct {
	ipv6  bool
	index int32
}

// parseNetconf decodes one RTM_NEWNETCONF message; other messages, other
// families and messages without an interface index are dropped.
func parseNetconf(m syscall.NetlinkMessage) (netconfUpdate, bool) {
	if m.Header.Type != unix.RTM_NEWNETCONF || len(m.Data) < netconfmsgLen {
		return netconfUpdate{}, false
	}
	var u netconfUpdate
	switch m.Data[0] {
	case unix.AF_INET:
	case unix.AF_INET6:
		u.ipv6 = true
	default:
		return netconfUpdate{}, false
	}
	attrs, err := nl.ParseRouteAttr(m.Data[netconfmsgLen:])
	if err != nil {
		return netconfUpdate{}, false
	}
	for _, a := range attrs {
		if a.Attr.Type == netconfaIfindex && len(a.Value) == 4 {
			u.index = int32(nl.NativeEndian().Uint32(a.Value))
			return u, true
		}
	}
	return netconfUpdate{}, false
}

// netconfSubscribe returns the subscription function for the IPv4 and IPv6
// netconf groups, in the shape pump re-subscribes with: updates go to ch
// until done is closed or the socket fails, then ch is closed.
func netconfSubscribe(ns netns.NsHandle, onErr func(error)) func(chan netconfUpdate, chan struct{}) error {
	return func(ch chan netconfUpdate, done chan struct{}) error {
		s, err := nl.SubscribeAt(ns, netns.None(), unix.NETLINK_ROUTE, rtnlgrpIPv4Netconf, rtnlgrpIPv6Netconf)
		if err != nil {
			return err
		}
		if err := s.SetReceiveBufferSize(rcvbuf, true); err != nil {
			s.Close()
			return err
		}
		go func() {
			<-done
			s.Close()
		}()
		go func() {
			defer close(ch)
			for {
				msgs, from, err := s.Receive()
				if err != nil {
					onErr(err)
					return
				}
				if from.Pid != nl.PidKernel {
					continue
				}
				for _, m := range msgs {
					u, ok := parseNetconf(m)
					if !ok {
						continue
					}
					select {
					case ch <- u:
					case <-done:
						return
					}
				}
			}
		}()
		return nil
	}
}

// netconf dispatches one netconf notification: an interface's to the
// owners of its name that asked for netconf events, a node-wide one to
// every owner that asked.
func (w *Watcher) netconf(u netconfUpdate) {
	ev := NetconfEvent{IPv6: u.ipv6}
	if u.index != netconfIfindexAll && u.index != netconfIfindexDefault {
		if u.index <= 0 {
			return
		}
		if ev.Iface = w.names.get(int(u.index)); ev.Iface == "" {
			return
		}
	}
	for _, o := range w.owners {
		nh, ok := o.h.(NetconfHandler)
		if !ok || !o.in.Netconf || (ev.Iface != "" && !o.in.iface(ev.Iface)) {
			continue
		}
		nh.OnNetconf(ev)
	}
}
