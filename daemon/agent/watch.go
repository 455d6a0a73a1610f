package agent

import (
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/daemon/netwatch"
)

// Interest is what the agent owns in the netlink event stream: links and
// routes on workload interfaces (the interface prefix), routes without a
// device (the local blocks' blackholes), and neighbour deletions on
// workload interfaces (a static ARP entry removed), and device
// configuration changes of workload interfaces and of the node (the
// keeper's sysctl hints). The keeper's link and neighbour hints ride on the
// same events.
func (a *Agent) Interest() netwatch.Interest {
	return netwatch.Interest{Prefixes: []string{a.opts.IfacePrefix}, NoInterface: true, NeighDeletesOnly: true, Netconf: true}
}

// OnLink implements netwatch.Handler.
func (a *Agent) OnLink(ev netwatch.LinkEvent) { a.NotifyLink(ev.Name, ev.Kind, ev.Up, !ev.Deleted) }

// OnRoute implements netwatch.Handler.
func (a *Agent) OnRoute(ev netwatch.RouteEvent) { a.NotifyRoute(ev) }

// OnNeigh implements netwatch.Handler: only entries with an address
// (neighbours, not bare FDB entries) can be a static ARP entry.
func (a *Agent) OnNeigh(ev netwatch.NeighEvent) {
	if ev.IP.IsValid() {
		a.NotifyNeigh(ev)
	}
}

// OnNetconf implements netwatch.NetconfHandler.
func (a *Agent) OnNetconf(ev netwatch.NetconfEvent) { a.NotifySysctls(ev.Iface) }

// Rescan implements netwatch.Handler: events were lost, re-read everything.
func (a *Agent) Rescan() { a.NotifyRescan() }

var (
	_ netwatch.Handler        = (*Agent)(nil)
	_ netwatch.NetconfHandler = (*Agent)(nil)
)

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
