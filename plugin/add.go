package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// cmdAdd attaches one container: IPAM → veth and pod side → record → host
// routes. Every step registers its undo; when a later step fails the undos
// run in reverse, so a failed ADD leaves no address, veth, record or route.
func cmdAdd(args *skel.CmdArgs) (err error) {
	defer waitGuardCloses()
	c, ka, e := loadCall(args)
	if e != nil {
		return e
	}
	want, e := requested(c, ka)
	if e != nil {
		return e
	}
	store, e := c.openStore()
	if e != nil {
		return e
	}
	node, e := readNodeSettings(c, store)
	if e != nil {
		return e
	}
	// The pod side is read while the node's links are read for the trust
	// checks; both only read, and the checks' answer comes first.
	type podRead struct {
		pv  *podnet.PodView
		err error
	}
	podc := make(chan podRead, 1)
	go func() {
		pv, err := dp.InspectPod(args.Netns, args.IfName)
		podc <- podRead{pv, err}
	}()
	e = checkNode(c, node)
	pod := <-podc
	if e != nil {
		return e
	}
	// A second ADD for a live attachment must fail before it touches
	// anything: its rollback would otherwise release the live pod's address.
	if pv, err := pod.pv, pod.err; err != nil {
		return cniErr(types.ErrInvalidEnvironmentVariables, "CNI_NETNS %q: %v", args.Netns, err)
	} else if pv.Exists {
		return cniErr(types.ErrInternal, "interface %s already exists in netns %s (ADD without DEL?)", args.IfName, args.Netns)
	}

	hostIf := hostIfaceName(c, ka, args.ContainerID, args.IfName)
	// One ADD or DEL per host veth name at a time: two sandboxes of one pod
	// share the name, and interleaved they would delete each other's veth.
	// A second ADD fails at once (the runtime retries) rather than wait and
	// then replace the veth the first one just reported.
	lk, err := lockVeth(c.StateDir, hostIf, "ADD", args.ContainerID+"/"+args.IfName, 0)
	if err != nil {
		return lockErr(err, hostIf)
	}
	defer lk.release()
	// Only an existing veth of that name can belong to another pod; the
	// record scan that finds its owner is kept off the common path.
	if hv, err := dp.HostLink(hostIf); err != nil {
		return cniErr(types.ErrInternal, "look up host veth %s: %v", hostIf, err)
	} else if hv.Exists {
		if other := vethOwner(store, hostIf, args.ContainerID, args.IfName, ka); other != nil {
			return cniErr(types.ErrInternal, "host veth name %s is already used by %s/%s (pod %q/%q): the names of two attachments hash alike; a shorter interfacePrefix leaves more hash digits",
				hostIf, other.ContainerID, other.IfName, other.PodNamespace, other.PodName)
		}
	}

	var undo []func() error
	defer func() {
		if err == nil {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				slog.Error("rollback step failed", "container", args.ContainerID, "ifname", args.IfName, "err", uerr)
			}
		}
	}()

	ctx := context.Background()
	var addrs []netip.Addr
	dns := c.DNS
	if c.Delegate != "" {
		var r *types100.Result
		r, err = delegatedAdd(c, args.StdinData)
		if err != nil {
			return err
		}
		undo = append(undo, func() error { return delegated.ExecDel(c.Delegate, args.StdinData) })
		for _, ipc := range r.IPs {
			a, ok := netip.AddrFromSlice(ipc.Address.IP)
			if !ok {
				return cniErr(types.ErrInternal, "ipam plugin %s returned address %q", c.Delegate, ipc.Address.String())
			}
			addrs = append(addrs, a.Unmap())
		}
		if len(dns.Nameservers) == 0 && len(dns.Search) == 0 && dns.Domain == "" {
			dns = r.DNS
		}
	} else {
		reserved := reservedAddrs(node.daemonBlocks)
		if e := checkRequested(want, node.blocks, reserved); e != nil {
			return e
		}
		alloc, err := ipam.New(filepath.Join(c.StateDir, "ipam"), node.blocks, ipam.Options{Reserved: reserved})
		if err != nil {
			return cniErr(types.ErrInvalidNetworkConfig, "ipam: %v", err)
		}
		att := ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
		got, err := alloc.Allocate(ctx, att, want)
		if err != nil {
			return ipamErr(fmt.Sprintf("pod address for %s/%s", args.ContainerID, args.IfName), err)
		}
		undo = append(undo, func() error { return alloc.Release(ctx, att) })
		for _, g := range got {
			addrs = append(addrs, g.Addr)
		}
	}
	if len(addrs) == 0 {
		return cniErr(types.ErrInternal, "ipam returned no address")
	}

	has6 := false
	for _, a := range addrs {
		has6 = has6 || a.Is6()
		if a.Is6() && node.mtu < 1280 {
			return cniErr(types.ErrInvalidNetworkConfig, "mtu %d: below 1280, the IPv6 minimum, but the pod gets IPv6 address %s", node.mtu, a)
		}
	}
	if err = dp.EnableForwarding(has6); err != nil {
		return cniErr(types.ErrInternal, "enable forwarding: %v", err)
	}
	// The pod's source check goes on as soon as the veth pair exists,
	// before either end is up or the pod has an address: an ADD that
	// cannot install it fails. Early, so that the kernel's cleanup after
	// the guard's commit (see withGuards) runs while the pod side is
	// configured.
	guard := podguard.Spec{Device: hostIf, Addrs: addrs, VXLANPort: node.vxlanPort}
	var guardErr error
	att, err := dp.Setup(podnet.Spec{
		HostIface: hostIf,
		ContIface: args.IfName,
		Netns:     args.Netns,
		MTU:       node.mtu,
		Addrs:     addrs,
		Created: func() error {
			if guardErr = dp.EnsureGuard(guard); guardErr != nil {
				return guardErr
			}
			undo = append(undo, func() error { return dp.RemoveGuard(hostIf) })
			return nil
		},
	})
	if err != nil {
		if guardErr != nil {
			return cniErr(types.ErrInternal, "pod source check on %s: %v", hostIf, guardErr)
		}
		return cniErr(types.ErrInternal, "set up pod network: %v", err)
	}
	undo = append(undo, func() error { return dp.Teardown(hostIf) })

	rec := &state.Workload{
		ContainerID:  args.ContainerID,
		IfName:       args.IfName,
		HostIface:    hostIf,
		Netns:        args.Netns,
		IPs:          cidrs(addrs),
		ContainerMAC: att.ContMAC.String(),
		PodNamespace: ka.PodNamespace,
		PodName:      ka.PodName,
		Network:      c.Name,
		Created:      time.Now().UTC(),
	}
	if err = store.PutWorkload(rec); err != nil {
		return cniErr(types.ErrIOFailure, "write workload record to %s: %v", store.WorkloadsDir(), err)
	}
	undo = append(undo, func() error { return store.DeleteWorkload(args.ContainerID, args.IfName) })

	if err = dp.AddHostRoutes(hostIf, addrs, node.proto); err != nil {
		return cniErr(types.ErrInternal, "host routes: %v", err)
	}

	res, err := buildResult(att, addrs, dns).GetAsVersion(c.CNIVersion)
	if err != nil {
		return cniErr(types.ErrIncompatibleCNIVersion, "convert result to %s: %v", c.CNIVersion, err)
	}
	if err = res.PrintTo(stdout); err != nil {
		return cniErr(types.ErrIOFailure, "print result: %v", err)
	}
	return nil
}

// checkNode reads the node's addresses and links and runs the trust checks
// of ADD on them: the interfacePrefix, and conflist ipam.blocks against the
// node's own address space (the node's tunnel addresses, routelet's, left
// out).
func checkNode(c *config, node *nodeSettings) *types.Error {
	host, e := guardedHost(c, int(node.proto), node.devices)
	if e != nil {
		return e
	}
	if c.Delegate == "" && len(c.Blocks) > 0 {
		dropTunnelAddrs(&host, node.daemonBlocks)
		if e := checkBlocks(host, c.Blocks); e != nil {
			return e
		}
	}
	return nil
}

// vethOwner returns the record of another attachment whose host veth is
// hostIf, unless that attachment is an earlier sandbox of the same pod (which
// a new sandbox replaces, as Calico does). Any other owner means two
// attachments' names hash alike (likely only with a long interfacePrefix):
// Setup would replace that pod's veth and cut it off.
func vethOwner(store *state.Store, hostIf, containerID, ifName string, ka *cniArgs) *state.Workload {
	for _, r := range store.WorkloadsWithHostIface(hostIf) {
		if r.ContainerID == containerID && r.IfName == ifName {
			continue
		}
		if ka.PodNamespace != "" && ka.PodName != "" && r.PodNamespace == ka.PodNamespace && r.PodName == ka.PodName {
			continue
		}
		return r
	}
	return nil
}

// delegatedAdd runs the configured IPAM plugin and converts its result. When
// the plugin succeeded but its result is unusable (no addresses, null
// entries), the plugin gets a DEL so its reservation does not leak: the
// caller registers its own undo only for a result it accepted.
func delegatedAdd(c *config, stdin []byte) (cur *types100.Result, err error) {
	r, err := delegated.ExecAdd(c.Delegate, stdin)
	if err != nil {
		return nil, asCNIErr(fmt.Sprintf("ipam plugin %s", c.Delegate), err)
	}
	defer func() {
		if err == nil {
			return
		}
		if derr := delegated.ExecDel(c.Delegate, stdin); derr != nil {
			slog.Error("rollback step failed", "step", "ipam plugin DEL", "plugin", c.Delegate, "err", derr)
		}
	}()
	cur, err = convertResult(r)
	if err != nil {
		return nil, cniErr(types.ErrDecodingFailure, "ipam plugin %s result: %v", c.Delegate, err)
	}
	if len(cur.IPs) == 0 {
		return nil, cniErr(types.ErrInternal, "ipam plugin %s returned no addresses", c.Delegate)
	}
	for i, ipc := range cur.IPs {
		if ipc == nil {
			return nil, cniErr(types.ErrDecodingFailure, "ipam plugin %s result: ips[%d] is null", c.Delegate, i)
		}
	}
	return cur, nil
}

// convertResult converts a result of any version to the current one. The
// spec library's conversions dereference every list entry, so a result with
// a null entry (from a buggy plugin) would panic there: that becomes an error.
func convertResult(r types.Result) (cur *types100.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			cur, err = nil, fmt.Errorf("cannot convert to %s (null or malformed entry): %v", types100.ImplementedSpecVersion, p)
		}
	}()
	return types100.NewResultFromResult(r)
}

// nodeSettings are what the conflist may leave to routeletd, and what only
// routeletd decides.
type nodeSettings struct {
	mtu    int
	blocks []netip.Prefix
	proto  netlink.RouteProtocol // host routes' protocol: routeletd's, see hostRouteProtocol
	// vxlanPort is the port the pod guard drops: daemon.json's, else 0
	// (podguard.DefaultVXLANPort).
	vxlanPort uint16
	// devices are the overlay devices' names, see daemonDevices.
	devices overlay.Devices
	// daemonBlocks are the blocks daemon.json publishes (those that parse),
	// whatever the conflist says: their reserved addresses stay reserved.
	daemonBlocks []netip.Prefix
}

// readNodeSettings fills in the MTU (conflist, else daemon.json PodMTU, else
// DefaultMTU), for the built-in IPAM the blocks (conflist ipam.blocks, else
// daemon.json Blocks), and the host route protocol (daemon.json, else
// routes.DefaultProtocol). An unreadable daemon.json is an error only when the
// blocks must come from it; otherwise the defaults apply, with a warning.
func readNodeSettings(c *config, store *state.Store) (*nodeSettings, *types.Error) {
	out := &nodeSettings{mtu: c.MTU, blocks: c.Blocks}
	needBlocks := c.Delegate == "" && len(c.Blocks) == 0
	st, err := store.ReadDaemonStatus()
	switch {
	case errors.Is(err, state.ErrNotFound):
		st = nil
	case err != nil && needBlocks:
		return nil, cniErr(types.ErrTryAgainLater, "no blocks: no ipam.blocks in the network config and daemon status unreadable: %v", err)
	case err != nil:
		slog.Warn("daemon status unreadable; using the default route protocol, and the default MTU unless the network config sets one", "err", err, "proto", routes.DefaultProtocol, "mtu", DefaultMTU)
		st = nil
	}
	out.proto = hostRouteProtocol(st)
	out.vxlanPort = guardPort(st)
	out.devices = daemonDevices(st)
	if out.mtu == 0 {
		out.mtu = DefaultMTU
		if st != nil && st.PodMTU >= 68 && st.PodMTU <= 65535 {
			out.mtu = st.PodMTU
		}
	}
	if st != nil {
		for i, s := range st.Blocks {
			p, err := parseBlock(s)
			if err != nil && needBlocks {
				return nil, cniErr(types.ErrTryAgainLater, "daemon status %s: blocks[%d] %q: %v", filepath.Join(c.StateDir, "daemon.json"), i, s, err)
			}
			if err != nil {
				slog.Warn("ignoring unusable block in daemon status", "cidr", s, "err", err)
				continue
			}
			out.daemonBlocks = append(out.daemonBlocks, p)
		}
	}
	if !needBlocks {
		return out, nil
	}
	out.blocks = out.daemonBlocks
	if len(out.blocks) == 0 {
		reason := "daemon.json not found in " + c.StateDir
		if st != nil {
			reason = "daemon.json lists no blocks"
			if !st.Ready && st.Reason != "" {
				reason += " (not ready: " + st.Reason + ")"
			}
		}
		return nil, cniErr(types.ErrTryAgainLater, "no blocks: daemon not ready and no ipam.blocks: %s", reason)
	}
	return out, nil
}

// hostRouteProtocol is the protocol the host routes carry: the one routeletd
// publishes in daemon.json, else (no daemon.json, or one from a daemon that
// predates the field) routes.DefaultProtocol, routeletd's default. The daemon's
// route table owns every route on the pod veths and rewrites one carrying
// another protocol, so ADD and CHECK must both use the daemon's.
func hostRouteProtocol(st *state.DaemonStatus) netlink.RouteProtocol {
	if st == nil || st.RouteProtocol == 0 {
		return routes.DefaultProtocol
	}
	return netlink.RouteProtocol(st.RouteProtocol)
}

// guardPort is the VXLAN port the pod guard drops: the one routeletd
// publishes in daemon.json, else 0 (the default port).
func guardPort(st *state.DaemonStatus) uint16 {
	if st == nil || st.VXLANPort <= 0 || st.VXLANPort > 65535 {
		return 0
	}
	return uint16(st.VXLANPort)
}

// daemonDevices are the names of the node's overlay devices and its
// WireGuard device, whose addresses and routes are not the node's own
// space: the ones routeletd publishes in daemon.json, else (no daemon.json,
// or one from a daemon that predates the fields or runs without
// encryption) the defaults, wireguard.cali included.
func daemonDevices(st *state.DaemonStatus) overlay.Devices {
	if st == nil {
		st = &state.DaemonStatus{}
	}
	d := overlay.Devices{VXLAN: st.VXLANDevice, VXLANv6: st.VXLANDeviceV6, IPIP: st.IPIPDevice, WireGuard: st.WireGuardDevice}.WithDefaults()
	if d.WireGuard == "" {
		d.WireGuard = defaults.DeviceWireGuard
	}
	return d
}

// cidrs renders addresses as host CIDRs (/32, /128) for the record.
func cidrs(addrs []netip.Addr) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.PrefixFrom(a, a.BitLen()).String())
	}
	return out
}

// checkRequested rejects, as a configuration error, a requested address that
// no block can give: outside every block, a block's reserved first (or, for
// IPv4, last) address, or one of the node's reserved addresses.
func checkRequested(want []netip.Addr, blocks []netip.Prefix, reserved []netip.Addr) *types.Error {
	for _, a := range want {
		var in netip.Prefix
		for _, b := range blocks {
			if b.Contains(a) {
				in = b
				break
			}
		}
		if !in.IsValid() {
			return cniErr(types.ErrInvalidNetworkConfig, "requested address %s is in none of the blocks %v", a, blocks)
		}
		if nodespace.Reserved(in, a) {
			return cniErr(types.ErrInvalidNetworkConfig, "requested address %s is reserved in block %s", a, in)
		}
		if slices.Contains(reserved, a) {
			return cniErr(types.ErrInvalidNetworkConfig, "requested address %s is reserved on this node (the pod gateway, the tunnel address, or the first or last address of a block routeletd publishes)", a)
		}
	}
	return nil
}
