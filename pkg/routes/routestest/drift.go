package routestest

import (
	"net"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/routes"
)

// Drift is a change someone else may make to a route routelet programmed,
// keeping its destination, key and device: one the RouteTable does not
// leave as it is, and so one that every report on routelet's routes must
// call wrong.
type Drift struct {
	Name   string
	Change func(r *netlink.Route)
	// Want is what routes.Spec.Mismatch says of the changed route.
	Want string
	// Disowns: the changed route carries another protocol, so on a shared
	// device (Config.InterfaceNames) it is no longer routelet's and the
	// RouteTable reports it as a conflict (ErrForeignRoute) instead of
	// rewriting it; on a workload interface it is rewritten.
	Disowns bool
}

// Drifts lists, for the route a RouteTable of IP version v writes for
// target t, one drift per attribute routes.Spec.Mismatch compares that
// can drift under t's key and device: the protocol, source, MTU, and the
// scope of an IPv4 link route or the gateway and onlink flag of a gateway
// route. (A type change takes the route off its device, out of the key.)
func Drifts(t routes.Target, v int) []Drift {
	src := net.ParseIP("192.0.2.99")
	if v == 6 {
		src = net.ParseIP("2001:db8::99")
	}
	out := []Drift{
		{Name: "another protocol", Change: func(r *netlink.Route) { r.Protocol = unix.RTPROT_STATIC }, Want: "proto 4", Disowns: true},
		{Name: "a source", Change: func(r *netlink.Route) { r.Src = src }, Want: "src " + src.String()},
		{Name: "an MTU", Change: func(r *netlink.Route) { r.MTU = t.MTU + 100 }, Want: "mtu " + strconv.Itoa(t.MTU+100)},
	}
	switch t.Type {
	case routes.TypeLink:
		if v == 4 {
			out = append(out, Drift{Name: "scope global", Change: func(r *netlink.Route) { r.Scope = netlink.SCOPE_UNIVERSE }, Want: "scope global"})
		}
	case routes.TypeGateway:
		// The next address: on the same subnet as t's gateway, so that a
		// route without onlink still reaches it.
		gw := t.Gateway.Next()
		out = append(out, Drift{Name: "another gateway", Change: func(r *netlink.Route) { r.Gw = gw.AsSlice() }, Want: "via " + gw.String()})
		if t.OnLink {
			out = append(out, Drift{Name: "onlink dropped", Change: func(r *netlink.Route) { r.Flags &^= int(netlink.FLAG_ONLINK) }, Want: "no onlink"})
		} else {
			out = append(out, Drift{Name: "onlink added", Change: func(r *netlink.Route) { r.Flags |= int(netlink.FLAG_ONLINK) }, Want: "onlink"})
		}
	}
	return out
}
