package inspect

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/routes"
)

// Link is a link as read.
type Link struct {
	Index int
	Name  string
	Kind  string // netlink kind: "veth", "vxlan", "ipip", …
	Up    bool
	MTU   int
	MAC   string
}

// Route is a main-table route as read.
type Route struct {
	Iface    string // routes.InterfaceNone for routes without a device
	Dst      netip.Prefix
	Type     int // rtm_type
	Protocol int
	Gateway  netip.Addr
	MTU      int
}

// Neigh is a neighbour (ARP/NDP) entry as read.
type Neigh struct {
	IP    netip.Addr
	MAC   string
	State int // NUD_* bits
}

// FDBEntry is a unicast FDB entry as read.
type FDBEntry struct {
	MAC string
	Dst netip.Addr
}

// Reader reads the kernel. Routes returns the main table of family 4 or
// 6; SetMembers reports ok false when the set does not exist.
type Reader interface {
	Links() ([]Link, error)
	Routes(family int) ([]Route, error)
	Neighs(index, family int) ([]Neigh, error)
	FDB(index int) ([]FDBEntry, error)
	SetMembers(name string) (members []netip.Prefix, ok bool, err error)
}

// Kernel is one read of what Compare needs.
type Kernel struct {
	Links  map[string]Link
	Routes [2][]Route // by family index: 0 IPv4, 1 IPv6
	// Neighs and FDB are the entries on each overlay device, by name.
	Neighs map[string][]Neigh
	FDB    map[string][]FDBEntry
	// Sets are the allowlist sets' members by name; a missing set has no
	// key.
	Sets map[string][]netip.Prefix
}

// Read reads what Compare needs of d: every link, both families' main
// tables, the entries of d's VXLAN devices and d's allowlist sets. A
// failed read is an error naming it; nothing else is retried.
func Read(r Reader, d *Desired) (*Kernel, error) {
	k := &Kernel{Links: map[string]Link{}, Neighs: map[string][]Neigh{}, FDB: map[string][]FDBEntry{}, Sets: map[string][]netip.Prefix{}}
	links, err := r.Links()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		k.Links[l.Name] = l
	}
	for i, v := range []int{4, 6} {
		if k.Routes[i], err = r.Routes(v); err != nil {
			return nil, fmt.Errorf("list IPv%d routes: %w", v, err)
		}
	}
	for _, f := range d.Overlay {
		l, ok := k.Links[f.VXLANDevice]
		if f.VXLANDevice == "" || !ok {
			continue
		}
		if k.Neighs[l.Name], err = r.Neighs(l.Index, f.Version); err != nil {
			return nil, fmt.Errorf("list neighbours on %s: %w", l.Name, err)
		}
		if k.FDB[l.Name], err = r.FDB(l.Index); err != nil {
			return nil, fmt.Errorf("list FDB on %s: %w", l.Name, err)
		}
	}
	if d.Allowlist != "" {
		for _, name := range []string{d.Allowlist, ipset.Name(d.Allowlist, ipset.IPv6)} {
			m, ok, err := r.SetMembers(name)
			if err != nil {
				return nil, fmt.Errorf("list ipset %s: %w", name, err)
			}
			if ok {
				k.Sets[name] = m
			}
		}
	}
	return k, nil
}

// Netlink is the Reader of the calling process's network namespace.
type Netlink struct {
	h     *netlink.Handle
	sets  *ipset.Netlink // nil: ipset unavailable, every set missing
	names map[int]string // link names by index, from the last Links
}

// NewNetlink opens the netlink sockets; Close releases them.
func NewNetlink() (*Netlink, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	n := &Netlink{h: h}
	if s, err := ipset.NewNetlink(); err == nil {
		n.sets = s
	}
	return n, nil
}

// Close releases the sockets.
func (n *Netlink) Close() {
	n.h.Close()
	if n.sets != nil {
		n.sets.Close()
	}
}

// Links implements Reader.
func (n *Netlink) Links() ([]Link, error) {
	ls, err := nlutil.Retry(n.h.LinkList)
	if err != nil {
		return nil, err
	}
	out := make([]Link, 0, len(ls))
	n.names = make(map[int]string, len(ls))
	for _, l := range ls {
		a := l.Attrs()
		n.names[a.Index] = a.Name
		out = append(out, Link{Index: a.Index, Name: a.Name, Kind: l.Type(), Up: a.Flags&net.FlagUp != 0, MTU: a.MTU, MAC: a.HardwareAddr.String()})
	}
	return out, nil
}

// Routes implements Reader: the main table of family v. Interfaces are
// named from the last Links (one more link dump when there was none).
func (n *Netlink) Routes(v int) ([]Route, error) {
	rs, err := nlutil.MainRoutes(n.h, v)
	if err != nil {
		return nil, err
	}
	if n.names == nil {
		if _, err := n.Links(); err != nil {
			return nil, err
		}
	}
	names := n.names
	out := make([]Route, 0, len(rs))
	for _, r := range rs {
		var dst netip.Prefix
		if r.Dst != nil {
			a, _ := netip.AddrFromSlice(r.Dst.IP)
			ones, _ := r.Dst.Mask.Size()
			dst = netip.PrefixFrom(a.Unmap(), ones)
		} else if v == 4 {
			dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		} else {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		iface := names[r.LinkIndex]
		if routes.IsNoInterfaceType(r.Type) {
			iface = routes.InterfaceNone
		}
		gw, _ := netip.AddrFromSlice(r.Gw)
		out = append(out, Route{Iface: iface, Dst: dst, Type: r.Type, Protocol: int(r.Protocol), Gateway: gw.Unmap(), MTU: r.MTU})
	}
	return out, nil
}

// Neighs implements Reader.
func (n *Netlink) Neighs(index, v int) ([]Neigh, error) {
	fam := netlink.FAMILY_V4
	if v == 6 {
		fam = netlink.FAMILY_V6
	}
	ns, err := nlutil.Retry(func() ([]netlink.Neigh, error) { return n.h.NeighList(index, fam) })
	if err != nil {
		return nil, err
	}
	out := make([]Neigh, 0, len(ns))
	for _, e := range ns {
		a, _ := netip.AddrFromSlice(e.IP)
		out = append(out, Neigh{IP: a.Unmap(), MAC: e.HardwareAddr.String(), State: e.State})
	}
	return out, nil
}

// FDB implements Reader: unicast entries with a destination.
func (n *Netlink) FDB(index int) ([]FDBEntry, error) {
	ns, err := nlutil.Retry(func() ([]netlink.Neigh, error) { return n.h.NeighList(index, unix.AF_BRIDGE) })
	if err != nil {
		return nil, err
	}
	var out []FDBEntry
	for _, e := range ns {
		a, ok := netip.AddrFromSlice(e.IP)
		if len(e.HardwareAddr) != 6 || e.HardwareAddr[0]&1 != 0 || !ok {
			continue
		}
		out = append(out, FDBEntry{MAC: e.HardwareAddr.String(), Dst: a.Unmap()})
	}
	return out, nil
}

// SetMembers implements Reader.
func (n *Netlink) SetMembers(name string) ([]netip.Prefix, bool, error) {
	if n.sets == nil {
		return nil, false, nil
	}
	info, err := n.sets.List(name)
	if errors.Is(err, ipset.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return info.Members, true, nil
}

// Counting is a Reader that counts the reads it passes on.
type Counting struct {
	R     Reader
	reads atomic.Int64
}

// Reads returns how many reads were made.
func (c *Counting) Reads() int64 { return c.reads.Load() }

// Links implements Reader.
func (c *Counting) Links() ([]Link, error) { c.reads.Add(1); return c.R.Links() }

// Routes implements Reader.
func (c *Counting) Routes(v int) ([]Route, error) { c.reads.Add(1); return c.R.Routes(v) }

// Neighs implements Reader.
func (c *Counting) Neighs(index, v int) ([]Neigh, error) { c.reads.Add(1); return c.R.Neighs(index, v) }

// FDB implements Reader.
func (c *Counting) FDB(index int) ([]FDBEntry, error) { c.reads.Add(1); return c.R.FDB(index) }

// SetMembers implements Reader.
func (c *Counting) SetMembers(name string) ([]netip.Prefix, bool, error) {
	c.reads.Add(1)
	return c.R.SetMembers(name)
}

// Fake is a Reader over fixed contents (tests).
type Fake struct {
	LinkList  []Link
	RouteList [2][]Route
	NeighList map[int][]Neigh // by link index
	FDBList   map[int][]FDBEntry
	SetList   map[string][]netip.Prefix
}

// Links implements Reader.
func (f *Fake) Links() ([]Link, error) { return f.LinkList, nil }

// Routes implements Reader.
func (f *Fake) Routes(v int) ([]Route, error) { return f.RouteList[famIndex(v)], nil }

// Neighs implements Reader.
func (f *Fake) Neighs(index, _ int) ([]Neigh, error) { return f.NeighList[index], nil }

// FDB implements Reader.
func (f *Fake) FDB(index int) ([]FDBEntry, error) { return f.FDBList[index], nil }

// SetMembers implements Reader.
func (f *Fake) SetMembers(name string) ([]netip.Prefix, bool, error) {
	m, ok := f.SetList[name]
	return m, ok, nil
}

// famIndex maps IP version 4 or 6 to the index of [2] arrays.
func famIndex(v int) int {
	if v == 6 {
		return 1
	}
	return 0
}
