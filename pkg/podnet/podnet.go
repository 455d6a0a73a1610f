package podnet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/routes"
)

// HostMAC is the MAC address of every host-side veth. Pods reach their gateway
// through a permanent neighbour entry pointing at it.
var HostMAC = net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}

// GatewayV4 is the pod's IPv4 next hop: a link-scoped address that the host
// side answers for (proxy ARP) without owning it.
var GatewayV4 = netip.MustParseAddr("169.254.1.1")

// GatewayV6 is the pod's IPv6 next hop: the EUI-64 link-local address of
// HostMAC, configured on every host veth.
var GatewayV6 = netip.MustParseAddr("fe80::ecee:eeff:feee:eeee")

// Spec describes one attachment to set up.
type Spec struct {
	HostIface string       // host-side veth name, in the current namespace
	ContIface string       // container-side name (CNI_IFNAME)
	Netns     string       // path of the pod's network namespace
	MTU       int          // MTU of both veth ends
	Addrs     []netip.Addr // pod addresses, configured as /32 and /128
	// Created, when set, is called once the veth pair exists, before
	// either end is configured or up; when it fails, Setup deletes the
	// pair and returns its error.
	Created func() error
}

// Attached reports what Setup made.
type Attached struct {
	HostIface   string           // host-side veth name
	HostMAC     net.HardwareAddr // always HostMAC
	HostIndex   int              // ifindex in the node namespace
	ContIface   string           // pod-side name
	ContMAC     net.HardwareAddr // kernel-chosen MAC of the pod side
	ContIndex   int              // ifindex inside the pod namespace
	MTU         int              // MTU of both ends
	NetnsPath   string           // the pod namespace (the result's sandbox)
	HasIPv6     bool             // the pod got an IPv6 address
	ReplacedOld bool             // a stale host veth of the same name was deleted first
}

// Setup creates the veth pair and configures both ends: host sysctls, host
// link up with the IPv6 gateway address, permanent host-side neighbours for
// the pod's addresses, pod addresses, pod link up, gateway
// routes and permanent gateway neighbours in the pod. It does not add host
// routes (see AddHostRoutes). A stale veth already carrying HostIface is
// replaced. When Setup fails after creating the pair it deletes the pair
// again, so it either fully succeeds or leaves nothing behind.
func Setup(spec Spec) (*Attached, error) {
	if err := validateSpec(spec); err != nil {
		return nil, err
	}
	nsh, err := netns.GetFromPath(spec.Netns)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", spec.Netns, err)
	}
	defer nsh.Close()
	if same, err := isCurrent(nsh); err == nil && same {
		return nil, fmt.Errorf("netns %s is the node's own namespace", spec.Netns)
	}
	host, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in node netns: %w", err)
	}
	defer host.Close()
	cont, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in netns %s: %w", spec.Netns, err)
	}
	defer cont.Close()

	out := &Attached{HostIface: spec.HostIface, ContIface: spec.ContIface, MTU: spec.MTU, NetnsPath: spec.Netns}
	for _, a := range spec.Addrs {
		if a.Is6() {
			out.HasIPv6 = true
		}
	}

	if _, err := cont.LinkByName(spec.ContIface); err == nil {
		return nil, fmt.Errorf("interface %s already exists in netns %s", spec.ContIface, spec.Netns)
	}
	replaced, err := removeStaleHostVeth(host, spec.HostIface)
	if err != nil {
		return nil, err
	}
	out.ReplacedOld = replaced

	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name:         spec.HostIface,
			MTU:          spec.MTU,
			HardwareAddr: HostMAC,
		},
		PeerName:      spec.ContIface,
		PeerMTU:       uint32(spec.MTU),
		PeerNamespace: netlink.NsFd(int(nsh)),
	}
	if err := host.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth %s (peer %s in %s): %w", spec.HostIface, spec.ContIface, spec.Netns, err)
	}
	slog.Debug("created veth", "iface", spec.HostIface, "peer", spec.ContIface, "netns", spec.Netns)
	if spec.Created != nil {
		if err := spec.Created(); err != nil {
			if delErr := deleteLink(host, spec.HostIface); delErr != nil {
				slog.Warn("rollback: delete veth failed", "iface", spec.HostIface, "err", delErr)
			}
			return nil, err
		}
	}

	if err := configure(host, cont, spec, out); err != nil {
		if delErr := deleteLink(host, spec.HostIface); delErr != nil {
			slog.Warn("rollback: delete veth failed", "iface", spec.HostIface, "err", delErr)
		}
		return nil, err
	}
	return out, nil
}

// configure does everything after the pair exists; Setup undoes the pair when
// it fails.
func configure(host, cont *netlink.Handle, spec Spec, out *Attached) error {
	hl, err := host.LinkByName(spec.HostIface)
	if err != nil {
		return fmt.Errorf("find new host veth %s: %w", spec.HostIface, err)
	}
	out.HostIndex = hl.Attrs().Index
	out.HostMAC = hl.Attrs().HardwareAddr

	cl, err := cont.LinkByName(spec.ContIface)
	if err != nil {
		return fmt.Errorf("find new interface %s in netns %s: %w", spec.ContIface, spec.Netns, err)
	}
	out.ContIndex = cl.Attrs().Index
	out.ContMAC = cl.Attrs().HardwareAddr

	// Sysctls before the link comes up, so it never accepts a router
	// advertisement or answers ARP with the wrong settings.
	if err := hostSysctls(spec.HostIface, out.HasIPv6); err != nil {
		return err
	}
	if err := host.LinkSetUp(hl); err != nil {
		return fmt.Errorf("set host veth %s up: %w", spec.HostIface, err)
	}
	if out.HasIPv6 {
		// The pod's IPv6 gateway lives on the host side, without duplicate
		// address detection, so the host can solicit pods at once.
		gw := &netlink.Addr{
			IPNet: &net.IPNet{IP: GatewayV6.AsSlice(), Mask: net.CIDRMask(64, 128)},
			Flags: unix.IFA_F_NODAD,
			Scope: unix.RT_SCOPE_LINK,
		}
		if err := host.AddrReplace(hl, gw); err != nil {
			return fmt.Errorf("add %s to host veth %s: %w", GatewayV6, spec.HostIface, err)
		}
	}

	// Permanent neighbours for the pod's addresses on the host side: the node
	// reaches a pod without an ARP/NDP round trip. For IPv6 this is needed
	// for correctness, not just speed: the kernel joins the pod's
	// solicited-node multicast group asynchronously after the link comes up,
	// so a neighbour solicitation sent right after ADD is dropped by the pod
	// and the first packets to it are lost until the node retries.
	for _, a := range spec.Addrs {
		neigh := &netlink.Neigh{
			LinkIndex:    out.HostIndex,
			Family:       unix.AF_INET,
			State:        netlink.NUD_PERMANENT,
			IP:           a.AsSlice(),
			HardwareAddr: out.ContMAC,
		}
		if a.Is6() {
			neigh.Family = unix.AF_INET6
		}
		if err := host.NeighSet(neigh); err != nil {
			return fmt.Errorf("add neighbour %s lladdr %s on host veth %s: %w", a, out.ContMAC, spec.HostIface, err)
		}
	}

	for _, a := range spec.Addrs {
		addr := &netlink.Addr{IPNet: hostNet(a)}
		if a.Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := cont.AddrReplace(cl, addr); err != nil {
			return fmt.Errorf("add address %s to %s in netns %s: %w", addr.IPNet, spec.ContIface, spec.Netns, err)
		}
	}
	if err := cont.LinkSetUp(cl); err != nil {
		return fmt.Errorf("set %s up in netns %s: %w", spec.ContIface, spec.Netns, err)
	}
	return podRoutes(cont, cl.Attrs().Index, spec)
}

// podRoutes installs, per family the pod has an address in, a permanent
// neighbour for the gateway (no ARP/NDP round trip before the first packet)
// and the default route through it; for IPv4 also the link-scoped route that
// makes 169.254.1.1 reachable on the interface.
func podRoutes(cont *netlink.Handle, idx int, spec Spec) error {
	has4, has6 := families(spec.Addrs)
	type fam struct {
		on     bool
		gw     netip.Addr
		family int
		any    *net.IPNet
	}
	for _, f := range []fam{
		{has4, GatewayV4, unix.AF_INET, &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}},
		{has6, GatewayV6, unix.AF_INET6, &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
	} {
		if !f.on {
			continue
		}
		neigh := &netlink.Neigh{
			LinkIndex:    idx,
			Family:       f.family,
			State:        netlink.NUD_PERMANENT,
			IP:           f.gw.AsSlice(),
			HardwareAddr: HostMAC,
		}
		if err := cont.NeighSet(neigh); err != nil {
			return fmt.Errorf("add gateway neighbour %s in netns %s: %w", f.gw, spec.Netns, err)
		}
		if f.family == unix.AF_INET {
			gwRoute := &netlink.Route{LinkIndex: idx, Dst: hostNet(f.gw), Scope: netlink.SCOPE_LINK}
			if err := cont.RouteReplace(gwRoute); err != nil {
				return fmt.Errorf("add route %s dev %s in netns %s: %w", gwRoute.Dst, spec.ContIface, spec.Netns, err)
			}
		}
		def := &netlink.Route{LinkIndex: idx, Dst: f.any, Gw: f.gw.AsSlice()}
		if err := cont.RouteReplace(def); err != nil {
			return fmt.Errorf("add default route via %s in netns %s: %w", f.gw, spec.Netns, err)
		}
	}
	return nil
}

// AddHostRoutes points a /32 (or /128) route per address at the host veth,
// scope link, protocol proto (routes.DefaultProtocol unless the node's daemon uses
// another: its route table owns these routes and rewrites any whose protocol
// differs from its own). It replaces a route to the same destination that
// points elsewhere: the address now belongs to this pod.
func AddHostRoutes(hostIface string, addrs []netip.Addr, proto netlink.RouteProtocol) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle in node netns: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(hostIface)
	if err != nil {
		return fmt.Errorf("host veth %s: %w", hostIface, err)
	}
	for _, a := range addrs {
		r := HostRoute(a, l.Attrs().Index, proto)
		if err := addOwnRoute(h, &r); err != nil {
			return fmt.Errorf("add host route %s dev %s: %w", r.Dst, hostIface, err)
		}
		slog.Debug("added host route", "iface", hostIface, "cidr", r.Dst.String(), "proto", int(proto))
	}
	return nil
}

// HostRoute is the route to pod address a through the host veth with
// index link, protocol proto: the one the daemon's route table writes for
// the address (routes.Spec.Route of a TypeLink target), so that the table
// finds it as it wants it.
func HostRoute(a netip.Addr, link int, proto netlink.RouteProtocol) netlink.Route {
	spec := routes.Spec{IPVersion: 4, Protocol: int(proto)}
	if a.Is6() {
		spec.IPVersion = 6
	}
	return spec.Route(routes.Target{CIDR: netip.PrefixFrom(a, a.BitLen()), Type: routes.TypeLink}, link)
}

// addOwnRoute adds r without ever overwriting a route routelet does not
// own: it is created exclusively, and when the kernel already holds a route
// under that key it is replaced only if every route to r.Dst in the main
// table is routelet's — it carries r's protocol (a stale host route of an
// earlier sandbox) or is on r's own host veth (a route left with another
// protocol after the operator changed routeletd's); any other route (the
// operator's, the kernel's, another daemon's) makes the add fail naming it.
func addOwnRoute(h *netlink.Handle, r *netlink.Route) error {
	err := h.RouteAdd(r)
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	have, lerr := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Dst: r.Dst, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if lerr != nil {
		return fmt.Errorf("%w (and listing what holds it: %v)", err, lerr)
	}
	for _, o := range have {
		if o.Protocol != r.Protocol && o.LinkIndex != r.LinkIndex {
			return fmt.Errorf("a route to %s of protocol %d (not routelet's %d) already exists; routelet does not replace it", r.Dst, int(o.Protocol), int(r.Protocol))
		}
	}
	return h.RouteReplace(r)
}

// Teardown deletes the host veth hostIface (which takes the pod side and the
// host routes with it). A missing link is success; a link of that name that is
// not a veth is left alone and reported, since routelet did not make it.
func Teardown(hostIface string) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle in node netns: %w", err)
	}
	defer h.Close()
	return deleteLink(h, hostIface)
}

// deleteLink removes a veth by name; gone is success, not-a-veth is an error.
func deleteLink(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		if nlutil.NotFound(err) {
			return nil
		}
		return fmt.Errorf("look up host veth %s: %w", name, err)
	}
	if t := l.Type(); t != "veth" {
		return fmt.Errorf("host interface %s is a %s, not a veth: not deleting it", name, t)
	}
	if err := h.LinkDel(l); err != nil && !nlutil.NotFound(err) {
		return fmt.Errorf("delete host veth %s: %w", name, err)
	}
	slog.Debug("deleted veth", "iface", name)
	return nil
}

// removeStaleHostVeth deletes an existing veth called name (a previous sandbox
// of the same pod whose DEL never ran). It reports whether it deleted one.
func removeStaleHostVeth(h *netlink.Handle, name string) (bool, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		if nlutil.NotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("look up host veth %s: %w", name, err)
	}
	if t := l.Type(); t != "veth" {
		return false, fmt.Errorf("host interface name %s is taken by a %s that routelet did not create", name, t)
	}
	slog.Warn("replacing stale host veth", "iface", name)
	if err := h.LinkDel(l); err != nil && !nlutil.NotFound(err) {
		return false, fmt.Errorf("delete stale host veth %s: %w", name, err)
	}
	return true, nil
}

func validateSpec(s Spec) error {
	switch {
	case s.HostIface == "" || len(s.HostIface) > maxIfNameLen:
		return fmt.Errorf("host interface name %q: must be 1 to %d bytes", s.HostIface, maxIfNameLen)
	case s.ContIface == "" || len(s.ContIface) > maxIfNameLen:
		return fmt.Errorf("container interface name %q: must be 1 to %d bytes", s.ContIface, maxIfNameLen)
	case s.Netns == "":
		return errors.New("netns path is empty")
	case s.MTU < 68 || s.MTU > 65535:
		return fmt.Errorf("mtu %d: must be between 68 and 65535", s.MTU)
	case len(s.Addrs) == 0:
		return errors.New("no pod addresses")
	}
	for _, a := range s.Addrs {
		if !a.IsValid() || a.Is4In6() {
			return fmt.Errorf("pod address %s: not a plain IPv4 or IPv6 address", a)
		}
		if a.Is6() && s.MTU < 1280 {
			return fmt.Errorf("mtu %d: below 1280, the IPv6 minimum, but pod address %s is IPv6", s.MTU, a)
		}
	}
	return nil
}

// IsCurrentNetns reports whether the namespace at path is the calling
// thread's own network namespace (the node's, in the plugin).
func IsCurrentNetns(path string) (bool, error) {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return false, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer h.Close()
	return isCurrent(h)
}

// isCurrent compares h with the calling thread's namespace, pinning the
// thread so the answer is about one thread.
func isCurrent(h netns.NsHandle) (bool, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := netns.Get()
	if err != nil {
		return false, fmt.Errorf("open own netns: %w", err)
	}
	defer self.Close()
	return self.Equal(h), nil
}

// hostNet returns a as a single-address IPNet (/32 or /128).
func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

func families(addrs []netip.Addr) (has4, has6 bool) {
	for _, a := range addrs {
		if a.Is4() {
			has4 = true
		} else {
			has6 = true
		}
	}
	return has4, has6
}
