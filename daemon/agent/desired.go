package agent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// RouteInput is everything the workload routes depend on.
type RouteInput struct {
	Workloads map[string]*state.Workload // by source key
	// Links are the links with the interface prefix that exist → their
	// netlink kind ("veth", "bridge", …).
	Links       map[string]string
	LocalBlocks []netip.Prefix // blackholed; workload addresses must lie inside
	// NodeSpace is the node's own address space: a workload address of a
	// family without local blocks must not overlap it.
	NodeSpace   nodespace.Host
	IfacePrefix string
	StaticARP   bool // IPv4 routes carry the container MAC (permanent neighbour)
}

// Desired is the outcome of DesiredRoutes.
type Desired struct {
	// Routes are the targets per family (0: IPv4, 1: IPv6) and interface
	// (routes.InterfaceNone for the blackholes), each list sorted.
	Routes [2]map[string][]routes.Target
	// Refused are the records refused (checkWorkload) by key → why.
	Refused map[string]string
	// Owner is the key of the record each routed address goes to.
	Owner map[netip.Addr]string
	// Contested are the addresses several records claim → the key chosen.
	Contested map[netip.Addr]string
	// Superseded are the records naming a host veth another record owns
	// (see ownsVeth) → the owner's key: they route nothing and guard
	// nothing.
	Superseded map[string]string
}

// DesiredRoutes derives every interface's routes from the workloads and the
// local blocks: a /32 or /128 link route on each record's host veth for
// each of its addresses, and a blackhole per local block.
//
// A record is refused (no route) when checkWorkload finds it names an
// interface or an address routelet must not touch. Of several records
// naming one host veth only the one that owns it (ownsVeth) is served; the
// others are superseded. When several records claim one address, it is
// routed to one of them (see beats), whatever order they come in.
func DesiredRoutes(in RouteInput) Desired {
	n := len(in.Workloads)
	d := newDesired(n)
	// beats orders any two records, so map order is as good as any.
	vethOwner := make(map[string]string, n)
	for name, w := range in.Workloads {
		if cur, ok := vethOwner[w.HostIface]; !ok || ownsVeth(in, w, in.Workloads[cur]) {
			vethOwner[w.HostIface] = name
		}
	}
	for name, w := range in.Workloads {
		addrs, err := checkWorkload(in, w)
		if err != nil {
			d.Refused[name] = err.Error()
		}
		if owner := vethOwner[w.HostIface]; owner != name {
			d.Superseded[name] = owner
			continue
		}
		for _, addr := range addrs {
			cur, ok := d.Owner[addr]
			if ok {
				d.Contested[addr] = "" // the winner is set below
			}
			if !ok || beats(in, w, in.Workloads[cur]) {
				d.Owner[addr] = name
			}
		}
	}
	for addr := range d.Contested {
		d.Contested[addr] = d.Owner[addr]
	}
	for addr, name := range d.Owner {
		w := in.Workloads[name]
		fam, t := workloadTarget(in, w, addr)
		d.Routes[fam][w.HostIface] = append(d.Routes[fam][w.HostIface], t)
	}
	for _, b := range in.LocalBlocks {
		fam, t := blackholeTarget(b)
		d.Routes[fam][routes.InterfaceNone] = append(d.Routes[fam][routes.InterfaceNone], t)
	}
	for _, m := range d.Routes {
		for _, ts := range m {
			sortTargets(ts)
		}
	}
	return d
}

// newDesired returns an empty Desired sized for n records.
func newDesired(n int) Desired {
	return Desired{
		Routes:  [2]map[string][]routes.Target{make(map[string][]routes.Target, n+1), {}},
		Refused: map[string]string{}, Owner: make(map[netip.Addr]string, 2*n), Contested: map[netip.Addr]string{},
		Superseded: map[string]string{},
	}
}

// workloadTarget is the route of addr on record w's host veth and its
// family (0: IPv4, 1: IPv6); with StaticARP an IPv4 route carries the
// container MAC.
func workloadTarget(in RouteInput, w *state.Workload, addr netip.Addr) (int, routes.Target) {
	t := routes.Target{CIDR: netip.PrefixFrom(addr, addr.BitLen()), Type: routes.TypeLink}
	if addr.Is6() {
		return 1, t
	}
	if in.StaticARP {
		if mac, err := net.ParseMAC(w.ContainerMAC); err == nil {
			t.DestMAC = mac
		}
	}
	return 0, t
}

// blackholeTarget is the blackhole of local block b and its family.
func blackholeTarget(b netip.Prefix) (int, routes.Target) {
	fam := 0
	if b.Addr().Is6() {
		fam = 1
	}
	return fam, routes.Target{CIDR: b, Type: routes.TypeBlackhole}
}

// ownVeth reports whether name is one of routelet's veths that exists: it
// has the interface prefix and links says it is a veth.
func ownVeth(prefix string, links map[string]string, name string) bool {
	return strings.HasPrefix(name, prefix) && links[name] == "veth"
}

// checkWorkload refuses a record that would make routelet touch an
// interface that is not one of its veths, or route an address that is not a
// pod address of this node: the host interface must have the interface
// prefix and, when it exists, be a veth; every address must be ordinary
// unicast, inside one of the node's blocks of its family (not a block's
// first address, which is the tunnel address, nor an IPv4 block's last) or,
// for a family without local blocks, outside the node's own addresses and
// connected subnets. It returns the record's addresses, each once, parsed
// once for the caller.
func checkWorkload(in RouteInput, w *state.Workload) ([]netip.Addr, error) {
	if !strings.HasPrefix(w.HostIface, in.IfacePrefix) {
		return nil, fmt.Errorf("host interface %s does not have the interface prefix %q", w.HostIface, in.IfacePrefix)
	}
	if kind, ok := in.Links[w.HostIface]; ok && kind != "veth" {
		return nil, fmt.Errorf("host interface %s is a %s link, not a veth", w.HostIface, kind)
	}
	addrs := make([]netip.Addr, 0, len(w.IPs))
	for _, s := range w.IPs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", s, err)
		}
		addr := p.Addr()
		if slices.Contains(addrs, addr) {
			continue // checked already
		}
		addrs = append(addrs, addr)
		host := netip.PrefixFrom(addr, addr.BitLen())
		if why := nodespace.SpecialRange(host); why != "" {
			return nil, fmt.Errorf("address %s is in %s", addr, why)
		}
		// One pass over the blocks (this runs for every record on every
		// pass of the loop): the one holding addr, and whether the family
		// has any.
		var block netip.Prefix
		familyHasBlocks := false
		for _, b := range in.LocalBlocks {
			if b.Addr().Is4() == addr.Is4() {
				familyHasBlocks = true
				if b.Contains(addr) {
					block = b
					break
				}
			}
		}
		switch {
		case !familyHasBlocks:
			if what := in.NodeSpace.Overlap(host); what != "" {
				return nil, fmt.Errorf("address %s overlaps %s", addr, what)
			}
		case !block.IsValid():
			return nil, fmt.Errorf("address %s is outside the node's blocks %v", addr, blocksOf(in.LocalBlocks, addr.Is4()))
		case nodespace.Reserved(block, addr):
			return nil, fmt.Errorf("address %s is reserved in block %s", addr, block)
		}
	}
	return addrs, nil
}

// blocksOf returns the blocks of one family.
func blocksOf(blocks []netip.Prefix, v4 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, b := range blocks {
		if b.Addr().Is4() == v4 {
			out = append(out, b)
		}
	}
	return out
}

// beats reports whether record x, rather than y, gets an address both
// claim: a record whose host veth exists beats one whose veth is absent (a
// stale record never takes a live pod's route); then the newer record
// (created later: the address was handed out again); then the lower
// container ID and interface name, so the outcome never depends on order.
func beats(in RouteInput, x, y *state.Workload) bool {
	if xl, yl := ownVeth(in.IfacePrefix, in.Links, x.HostIface), ownVeth(in.IfacePrefix, in.Links, y.HostIface); xl != yl {
		return xl
	}
	if !x.Created.Equal(y.Created) {
		return x.Created.After(y.Created)
	}
	if x.ContainerID != y.ContainerID {
		return x.ContainerID < y.ContainerID
	}
	return x.IfName < y.IfName
}

// ownsVeth reports whether record x, rather than y, owns the host veth both
// name (a pod's veth name stays when its sandbox is made again, so the
// record of an old sandbox can outlive it): the newer record (created
// later: the plugin's ADD that made the veth now there), then the lower
// container ID and interface name. Refused records take part: the veth of
// a refused owner gets no route and no guard from an older record. It is
// beats without the veth's existence, which is the same for both.
func ownsVeth(in RouteInput, x, y *state.Workload) bool {
	return beats(in, x, y)
}

// sortTargets orders targets by address, then prefix length.
func sortTargets(ts []routes.Target) {
	if len(ts) < 2 {
		return
	}
	slices.SortFunc(ts, func(a, b routes.Target) int {
		if c := a.CIDR.Addr().Compare(b.CIDR.Addr()); c != 0 {
			return c
		}
		return a.CIDR.Bits() - b.CIDR.Bits()
	})
}
