package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// cmdCheck compares the attachment in the kernel and the state directory with
// prevResult. It reports every difference it finds, each naming the object
// and what differs, in one error.
func cmdCheck(args *skel.CmdArgs) error {
	defer waitGuardCloses()
	c, e := loadConfig(args.StdinData)
	if e != nil {
		return e
	}
	if err := prevResultShape(c.raw.RawPrevResult); err != nil {
		return cniErr(types.ErrDecodingFailure, "prevResult: %v", err)
	}
	if err := version.ParsePrevResult(&c.raw.PluginConf); err != nil {
		return cniErr(types.ErrDecodingFailure, "prevResult: %v", err)
	}
	if c.raw.PrevResult == nil {
		return cniErr(types.ErrInvalidNetworkConfig, "prevResult is missing: CHECK needs the result of ADD")
	}
	prev, err := types100.NewResultFromResult(c.raw.PrevResult)
	if err != nil {
		return cniErr(types.ErrDecodingFailure, "prevResult: convert to %s: %v", types100.ImplementedSpecVersion, err)
	}
	ka, e := parseCNIArgs(args.Args)
	if e != nil {
		return e
	}
	store, e := c.openStore()
	if e != nil {
		return e
	}

	want, e := expectedFromPrev(prev, args, c, ka)
	if e != nil {
		return e
	}
	var problems []string
	problems = append(problems, checkPod(args, want)...)
	st := daemonStatus(store)
	problems = append(problems, checkHost(want, hostRouteProtocol(st))...)
	problems = append(problems, checkGuard(want, guardPort(st))...)
	problems = append(problems, checkRecord(store, args, c, want)...)
	problems = append(problems, checkIPAM(c, store, args, want)...)
	if len(problems) > 0 {
		return cniErr(types.ErrInternal, "check %s/%s: %s", args.ContainerID, args.IfName, strings.Join(problems, "; "))
	}
	return nil
}

// prevResultShape rejects null entries in prevResult's interfaces, ips and
// routes: the result types decode them as nil pointers, which the spec's
// conversions and the checks below would dereference.
func prevResultShape(raw map[string]any) error {
	for _, key := range []string{"interfaces", "ips", "routes"} {
		list, ok := raw[key].([]any)
		if !ok {
			continue
		}
		for i, v := range list {
			if v == nil {
				return fmt.Errorf("%s[%d] is null", key, i)
			}
		}
	}
	return nil
}

// expected is what prevResult says the attachment looks like.
type expected struct {
	hostIf  string
	contMAC string
	addrs   []netip.Prefix
	routes  []*types.Route
}

// expectedFromPrev picks the container interface (CNI_IFNAME with a sandbox),
// its addresses and the routes out of prevResult, and the host interface (the
// one without a sandbox; else the computed name).
func expectedFromPrev(prev *types100.Result, args *skel.CmdArgs, c *config, ka *cniArgs) (*expected, *types.Error) {
	want := &expected{hostIf: hostIfaceName(c, ka, args.ContainerID, args.IfName), routes: prev.Routes}
	contIdx := -1
	for i, iface := range prev.Interfaces {
		switch {
		case iface.Name == args.IfName && iface.Sandbox != "":
			contIdx = i
			want.contMAC = iface.Mac
		case iface.Sandbox == "" && strings.HasPrefix(iface.Name, c.Prefix):
			want.hostIf = iface.Name
		}
	}
	if contIdx < 0 {
		return nil, cniErr(types.ErrInvalidNetworkConfig, "prevResult has no interface %q with a sandbox", args.IfName)
	}
	for _, ipc := range prev.IPs {
		if ipc.Interface != nil && *ipc.Interface != contIdx {
			continue
		}
		p, ok := prefixOf(ipc.Address)
		if !ok {
			return nil, cniErr(types.ErrInvalidNetworkConfig, "prevResult address %q is not valid", ipc.Address.String())
		}
		want.addrs = append(want.addrs, p)
	}
	if len(want.addrs) == 0 {
		return nil, cniErr(types.ErrInvalidNetworkConfig, "prevResult has no address for interface %q", args.IfName)
	}
	return want, nil
}

// checkPod compares the container interface with prevResult.
func checkPod(args *skel.CmdArgs, want *expected) []string {
	pv, err := dp.InspectPod(args.Netns, args.IfName)
	if err != nil {
		return []string{err.Error()}
	}
	if !pv.Exists {
		return []string{fmt.Sprintf("interface %s is missing in netns %s", args.IfName, args.Netns)}
	}
	var out []string
	if want.contMAC != "" && !strings.EqualFold(pv.MAC, want.contMAC) {
		out = append(out, fmt.Sprintf("interface %s has MAC %s, prevResult says %s", args.IfName, pv.MAC, want.contMAC))
	}
	if !pv.Up {
		out = append(out, fmt.Sprintf("interface %s in netns %s is down", args.IfName, args.Netns))
	}
	for _, a := range want.addrs {
		if !slices.Contains(pv.Addrs, a) {
			out = append(out, fmt.Sprintf("address %s is missing on %s in netns %s", a, args.IfName, args.Netns))
		}
	}
	for _, r := range want.routes {
		dst, ok := prefixOf(r.Dst)
		if !ok {
			out = append(out, fmt.Sprintf("prevResult route %q is not valid", r.Dst.String()))
			continue
		}
		var gw netip.Addr
		if r.GW != nil {
			gw, _ = netip.AddrFromSlice(r.GW)
			gw = gw.Unmap()
		}
		if !podnet.HasRoute(pv.Routes, dst, gw) {
			via := ""
			if gw.IsValid() {
				via = " via " + gw.String()
			}
			out = append(out, fmt.Sprintf("route %s%s is missing in netns %s", dst, via, args.Netns))
		}
	}
	return out
}

// daemonStatus is daemon.json for CHECK's expectations of what ADD
// wrote: the host route protocol the daemon keeps the routes at
// (hostRouteProtocol) and the VXLAN port the pod guard drops (guardPort);
// and for DEL and GC, the overlay devices' names (daemonDevices). An
// unreadable daemon.json means the defaults, as in ADD (nil).
func daemonStatus(store *state.Store) *state.DaemonStatus {
	st, err := store.ReadDaemonStatus()
	if err != nil {
		if !errors.Is(err, state.ErrNotFound) {
			slog.Warn("daemon status unreadable; expecting the default route protocol, VXLAN port and overlay device names", "err", err, "proto", routes.DefaultProtocol)
		}
		return nil
	}
	return st
}

// checkGuard verifies the pod source check on the host veth: its chain
// and rules as ADD wrote them for prevResult's addresses and port (the
// VXLAN port daemon.json publishes, guardPort).
func checkGuard(want *expected, port uint16) []string {
	spec := podguard.Spec{Device: want.hostIf, VXLANPort: port}
	for _, p := range want.addrs {
		spec.Addrs = append(spec.Addrs, p.Addr())
	}
	got, err := dp.ReadGuard(spec)
	if err != nil {
		return []string{err.Error()}
	}
	if got != podguard.OK {
		return []string{fmt.Sprintf("pod source check on %s: %s", want.hostIf, got)}
	}
	return nil
}

// checkHost verifies the host veth and one host route per pod address, as
// the daemon's route table (of protocol proto) writes it and would leave
// it: routes.Spec.Mismatch, the table's own rule.
func checkHost(want *expected, proto netlink.RouteProtocol) []string {
	hv, err := dp.InspectHost(want.hostIf)
	if err != nil {
		return []string{err.Error()}
	}
	if !hv.Exists {
		return []string{fmt.Sprintf("host veth %s is missing", want.hostIf)}
	}
	var out []string
	if hv.Type != "veth" {
		out = append(out, fmt.Sprintf("host interface %s is a %s, not a veth", want.hostIf, hv.Type))
	}
	if !hv.Up {
		out = append(out, fmt.Sprintf("host veth %s is down", want.hostIf))
	}
	if hv.MAC != podnet.HostMAC.String() {
		out = append(out, fmt.Sprintf("host veth %s has MAC %s, want %s", want.hostIf, hv.MAC, podnet.HostMAC))
	}
	for _, a := range want.addrs {
		dst := netip.PrefixFrom(a.Addr(), a.Addr().BitLen())
		var got *podnet.Route
		for i := range hv.Routes {
			if hv.Routes[i].Dst == dst {
				got = &hv.Routes[i]
			}
		}
		if got == nil {
			out = append(out, fmt.Sprintf("host route %s dev %s is missing", dst, want.hostIf))
			continue
		}
		if diff := hostRouteMismatch(*got, proto); diff != "" {
			out = append(out, fmt.Sprintf("host route %s dev %s has %s, not as routeletd writes it (proto %d)", dst, want.hostIf, diff, int(proto)))
		}
	}
	return out
}

// hostRouteMismatch reports how r, a host route read from the host veth,
// differs from the one routeletd's route table of protocol proto wants
// there ("" when it would leave r alone).
func hostRouteMismatch(r podnet.Route, proto netlink.RouteProtocol) string {
	spec := routes.Spec{IPVersion: 4, Protocol: int(proto)}
	if r.Dst.Addr().Is6() {
		spec.IPVersion = 6
	}
	k := r.Netlink()
	return spec.Mismatch(&k, routes.Target{CIDR: r.Dst, Type: routes.TypeLink})
}

// checkRecord verifies the workload record against prevResult.
func checkRecord(store *state.Store, args *skel.CmdArgs, c *config, want *expected) []string {
	rec, err := store.GetWorkload(args.ContainerID, args.IfName)
	if errors.Is(err, state.ErrNotFound) {
		return []string{fmt.Sprintf("workload record for %s/%s is missing in %s", args.ContainerID, args.IfName, store.WorkloadsDir())}
	}
	if err != nil {
		return []string{fmt.Sprintf("workload record: %v", err)}
	}
	var out []string
	if rec.HostIface != want.hostIf {
		out = append(out, fmt.Sprintf("workload record names host veth %s, prevResult %s", rec.HostIface, want.hostIf))
	}
	if want.contMAC != "" && !strings.EqualFold(rec.ContainerMAC, want.contMAC) {
		out = append(out, fmt.Sprintf("workload record has container MAC %s, prevResult %s", rec.ContainerMAC, want.contMAC))
	}
	if rec.Netns != args.Netns {
		out = append(out, fmt.Sprintf("workload record has netns %s, CNI_NETNS is %s", rec.Netns, args.Netns))
	}
	if rec.Network != c.Name {
		out = append(out, fmt.Sprintf("workload record belongs to network %q, not %q", rec.Network, c.Name))
	}
	if got, exp := sortedStrings(rec.IPs), prefixStrings(want.addrs); !slices.Equal(got, exp) {
		out = append(out, fmt.Sprintf("workload record has IPs %v, prevResult %v", got, exp))
	}
	return out
}

// checkIPAM verifies that the allocation still stands.
func checkIPAM(c *config, store *state.Store, args *skel.CmdArgs, want *expected) []string {
	if c.Delegate != "" {
		if err := delegated.ExecCheck(c.Delegate, args.StdinData); err != nil {
			return []string{fmt.Sprintf("ipam plugin %s: %v", c.Delegate, err)}
		}
		return nil
	}
	alloc, err := openAllocator(c, store)
	if err != nil {
		return []string{err.Error()}
	}
	got, err := alloc.Get(context.Background(), ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	if err != nil {
		return []string{fmt.Sprintf("ipam: %v", err)}
	}
	var held []string
	for _, g := range got {
		held = append(held, netip.PrefixFrom(g.Addr, g.Addr.BitLen()).String())
	}
	slices.Sort(held)
	if exp := prefixStrings(want.addrs); !slices.Equal(held, exp) {
		return []string{fmt.Sprintf("ipam holds %v for this attachment, prevResult %v", held, exp)}
	}
	return nil
}

func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 128 && a.Is4() && ones >= 96 {
		ones, bits = ones-96, 32
	}
	if bits == 0 || bits != a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()).String())
	}
	slices.Sort(out)
	return out
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
