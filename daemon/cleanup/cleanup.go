package cleanup

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/state"
)

// Options say what cleanup owns.
type Options struct {
	StateDir      string
	IfacePrefix   string
	RouteProtocol int
	// BGPRouteProtocol, when not 0, is the kernel route protocol of the
	// routes routeletd's BGP speaker learned (bgp-route-protocol): the
	// main table's routes carrying it that go via a gateway — the only
	// kind the BGP manager writes — are removed too. The caller sets it
	// only when bgp is on in the configuration cleanup runs with: 186 is
	// also what other routing daemons (FRR) give their routes, so with bgp
	// off routes of that protocol are not taken for routelet's. Ignored
	// when it is RouteProtocol (those are removed anyway).
	BGPRouteProtocol int
	// VXLANDevices are deleted when they exist and are VXLAN links (a link
	// of another type with such a name is not routelet's and stays).
	VXLANDevices []string
	// WireGuardDevice, when not "", is the WireGuard device's name: a link
	// of that name of kind wireguard or tun (the userspace datapath's) is
	// deleted and the datapath its pid file in <StateDir>/wireguard names
	// is stopped.
	WireGuardDevice string
	// IptablesBackend picks the iptables binaries whose ROUTELET-* chains
	// and jumps are removed: "" (whatever iptables is), "nft" or "legacy".
	IptablesBackend string
}

// Report lists what was removed, and what was left in the state
// directory because routelet did not write it.
type Report struct {
	Links  []string
	Routes []string
	Paths  []string
	Left   []string
}

// Run removes routelet's links, routes and state in the calling process's
// network namespace. Missing objects are not errors; every step runs even
// when an earlier one failed, and the errors are joined.
func Run(opts Options, log *slog.Logger) (Report, error) {
	var rep Report
	var errs []error
	if opts.IfacePrefix == "" {
		return rep, errors.New("cleanup: empty interface prefix would claim every interface")
	}
	// The state directory is checked before anything is touched: a
	// symlink, or a directory routelet did not make, is refused whole.
	found, err := scanStateDir(opts.StateDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rep, err
	}
	if found != nil {
		defer found.close()
		store, err := state.Open(opts.StateDir)
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup: %w", err))
		} else {
			ws, bad := store.ListWorkloads()
			for _, err := range bad {
				log.Warn("cleanup: skipping bad record", "err", err)
			}
			for _, w := range ws {
				if !strings.HasPrefix(w.HostIface, opts.IfacePrefix) {
					continue
				}
				l, err := netlink.LinkByName(w.HostIface)
				if nlutil.LinkNotFound(err) {
					continue // already gone
				}
				if err == nil {
					if _, ok := l.(*netlink.Veth); !ok {
						log.Warn("cleanup: leaving a link a workload record names that is not a veth", "iface", w.HostIface, "type", l.Type(), "container", w.ContainerID)
						continue
					}
					err = netlink.LinkDel(l)
				}
				if err != nil && !nlutil.LinkNotFound(err) {
					errs = append(errs, fmt.Errorf("cleanup: delete link %s: %w", w.HostIface, err))
					continue
				}
				log.Info("deleted workload veth", "iface", w.HostIface, "container", w.ContainerID)
				rep.Links = append(rep.Links, w.HostIface)
			}
		}
	}

	for _, name := range opts.VXLANDevices {
		l, err := netlink.LinkByName(name)
		if nlutil.LinkNotFound(err) {
			continue
		}
		if err == nil {
			if _, ok := l.(*netlink.Vxlan); !ok {
				log.Warn("cleanup: leaving a link that is not a vxlan device", "iface", name, "type", l.Type())
				continue
			}
			err = netlink.LinkDel(l)
		}
		if err != nil && !nlutil.LinkNotFound(err) {
			errs = append(errs, fmt.Errorf("cleanup: delete vxlan device %s: %w", name, err))
			continue
		}
		log.Info("deleted vxlan device", "iface", name)
		rep.Links = append(rep.Links, name)
	}

	if opts.WireGuardDevice != "" {
		if err := removeWireGuard(opts.StateDir, opts.WireGuardDevice, &rep, log); err != nil {
			errs = append(errs, err)
		}
	}

	// Routes carrying our protocol are ours (docs/design.md: every route routelet
	// programs carries it); nothing else is touched.
	if err := removeOwnedRoutes(opts, &rep, log); err != nil {
		errs = append(errs, err)
	}

	if err := removeAllowlist(opts.IptablesBackend, log); err != nil {
		errs = append(errs, err)
	}
	if err := removeGuards(log); err != nil {
		errs = append(errs, err)
	}

	if found != nil {
		// Read again: a plugin may have written or removed records meanwhile.
		p, err := scanAt(found.root(), opts.StateDir)
		if err != nil {
			errs = append(errs, err)
		} else {
			left, err := p.removeState(&rep)
			p.close()
			if err != nil {
				errs = append(errs, err)
			}
			for _, l := range left {
				log.Warn("cleanup: leaving what routelet did not write in the state directory", "path", l)
			}
			rep.Left = left
			if len(left) == 0 {
				// Not when something appeared meanwhile, or it is a mount point.
				if err := unix.Rmdir(opts.StateDir); err == nil {
					rep.Paths = append(rep.Paths, opts.StateDir)
				}
			}
		}
	}
	return rep, errors.Join(errs...)
}

// removeOwnedRoutes deletes the routes opts say are routelet's: every one
// of RouteProtocol, and those via a gateway of BGPRouteProtocol when it
// is set (and another protocol).
func removeOwnedRoutes(opts Options, rep *Report, log *slog.Logger) error {
	err := removeRoutes(opts.RouteProtocol, false, rep, log)
	if p := opts.BGPRouteProtocol; p != 0 && p != opts.RouteProtocol {
		err = errors.Join(err, removeRoutes(p, true, rep, log))
	}
	return err
}

// removeRoutes deletes the main table's routes carrying protocol, IPv4
// and IPv6; with viaOnly only those with a gateway (unicast via a next
// hop, the BGP manager's kind). Routes already gone are not errors.
func removeRoutes(protocol int, viaOnly bool, rep *Report, log *slog.Logger) error {
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		filter := &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: netlink.RouteProtocol(protocol)}
		rs, err := netlink.RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup: list routes of protocol %d: %w", protocol, err))
			continue
		}
		for i := range rs {
			r := &rs[i]
			if viaOnly && (r.Type != unix.RTN_UNICAST || !hasGateway(r)) {
				continue
			}
			if err := netlink.RouteDel(r); err != nil && !nlutil.NotFound(err) {
				errs = append(errs, fmt.Errorf("cleanup: delete route %s: %w", r, err))
				continue
			}
			desc := "default"
			if r.Dst != nil {
				desc = r.Dst.String()
			}
			log.Info("deleted route", "cidr", desc, "ifindex", r.LinkIndex, "type", r.Type, "protocol", protocol)
			rep.Routes = append(rep.Routes, desc)
		}
	}
	return errors.Join(errs...)
}

// hasGateway reports whether r goes via a next hop (itself or, multipath,
// each of its next hops).
func hasGateway(r *netlink.Route) bool {
	if len(r.MultiPath) > 0 {
		for _, nh := range r.MultiPath {
			if nh.Gw == nil && nh.Via == nil {
				return false
			}
		}
		return true
	}
	return r.Gw != nil || r.Via != nil
}
