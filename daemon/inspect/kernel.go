package inspect

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
)

// ErrNotExist is what a Reader returns (wrapped) for a link or sysctl
// that does not exist.
var ErrNotExist = fs.ErrNotExist

// Link is a link as read.
type Link struct {
	Index       int       `json:"index"`
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`    // netlink kind: "veth", "vxlan", "ipip", "wireguard", "tun" (not the library's "tuntap"), "device", …
	Up          bool      `json:"up"`      // administratively up
	LowerUp     bool      `json:"lowerUp"` // carrier
	MTU         int       `json:"mtu"`
	MAC         string    `json:"mac,omitempty"`
	MasterIndex int       `json:"masterIndex,omitempty"`
	VNI         int       `json:"vni,omitempty"`  // vxlan
	Port        int       `json:"port,omitempty"` // vxlan destination port
	Stats       LinkStats `json:"stats"`
}

// LinkStats are a link's packet counters.
type LinkStats struct {
	RxPackets uint64 `json:"rxPackets"`
	TxPackets uint64 `json:"txPackets"`
	RxDropped uint64 `json:"rxDropped"`
	TxDropped uint64 `json:"txDropped"`
	TxErrors  uint64 `json:"txErrors"`
}

// Route is a main-table route as read: its device and destination, and
// the attributes routes.Spec.Mismatch judges.
type Route struct {
	Iface    string // routes.InterfaceNone for routes without a device
	Dst      netip.Prefix
	Type     int // rtm_type
	Protocol int
	Scope    netlink.Scope
	Gateway  netip.Addr
	OnLink   bool
	Src      netip.Addr // preferred source, invalid for none
	MTU      int
}

// Mismatch reports how r differs from target t as the daemon's route table
// of protocol proto writes it in the main table (routes.Spec.Mismatch):
// "" when the table leaves r as it is.
func (r Route) Mismatch(t routes.Target, proto int) string {
	v := 4
	if r.Dst.Addr().Is6() {
		v = 6
	}
	k := podnet.Route{Dst: r.Dst, Type: r.Type, Protocol: r.Protocol, Scope: r.Scope, Gw: r.Gateway, OnLink: r.OnLink, Src: r.Src, MTU: r.MTU}.Netlink()
	return routes.Spec{IPVersion: v, Protocol: proto}.Mismatch(&k, t)
}

// Target returns the kind of route r is, as routes.Target names it:
// blackhole, unreachable, gateway (it has one) or link.
func (r Route) Target() routes.TargetType {
	switch {
	case r.Type == unix.RTN_BLACKHOLE:
		return routes.TypeBlackhole
	case r.Type == unix.RTN_UNREACHABLE:
		return routes.TypeUnreachable
	case r.Gateway.IsValid():
		return routes.TypeGateway
	}
	return routes.TypeLink
}

// Neigh is a neighbour (ARP/NDP) entry as read.
type Neigh struct {
	IP    netip.Addr
	MAC   string
	State int // NUD_* bits
}

// Permanent reports whether the entry is NUD_PERMANENT.
func (n Neigh) Permanent() bool { return n.State&unix.NUD_PERMANENT != 0 }

// FDBEntry is a unicast FDB entry as read.
type FDBEntry struct {
	MAC   string
	Dst   netip.Addr
	State int // NUD_* bits
}

// Permanent reports whether the entry is NUD_PERMANENT.
func (e FDBEntry) Permanent() bool { return e.State&unix.NUD_PERMANENT != 0 }

// Reader reads the kernel: every read `routeletd status` and `routeletd
// diagnose` make of links, routes, neighbours, FDB, ipsets and sysctls,
// each method one dump or one file. Routes returns the main table of
// family 4 or 6; SetMembers reports ok false when the set does not exist;
// Sysctl and PodLink return ErrNotExist (wrapped) for what is not there.
type Reader interface {
	Links() ([]Link, error)
	Routes(family int) ([]Route, error)
	Neighs(index, family int) ([]Neigh, error)
	FDB(index int) ([]FDBEntry, error)
	SetMembers(name string) (members []netip.Prefix, ok bool, err error)
	// Sysctl reads a key under /proc/sys ("net/ipv4/ip_forward").
	Sysctl(key string) (string, error)
	// PodLink reads link ifName inside the network namespace at netnsPath.
	PodLink(netnsPath, ifName string) (Link, error)
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
		n.names[l.Attrs().Index] = l.Attrs().Name
		out = append(out, linkOf(l))
	}
	return out, nil
}

// linkKind is l's rtnetlink kind ("veth", "vxlan", "wireguard", …); the
// tun driver's links are "tun" or "tap" by their mode (the netlink
// library types both "tuntap"), so WireGuard's userspace device is "tun".
func linkKind(l netlink.Link) string {
	if t, ok := l.(*netlink.Tuntap); ok {
		if t.Mode == netlink.TUNTAP_MODE_TAP {
			return "tap"
		}
		return "tun"
	}
	return l.Type()
}

// linkOf converts a netlink link.
func linkOf(l netlink.Link) Link {
	a := l.Attrs()
	out := Link{Index: a.Index, Name: a.Name, Kind: linkKind(l), Up: a.Flags&net.FlagUp != 0, LowerUp: a.RawFlags&unix.IFF_LOWER_UP != 0,
		MTU: a.MTU, MAC: a.HardwareAddr.String(), MasterIndex: a.MasterIndex}
	if s := a.Statistics; s != nil {
		out.Stats = LinkStats{RxPackets: s.RxPackets, TxPackets: s.TxPackets, RxDropped: s.RxDropped, TxDropped: s.TxDropped, TxErrors: s.TxErrors}
	}
	if v, ok := l.(*netlink.Vxlan); ok {
		out.VNI, out.Port = v.VxlanId, v.Port
	}
	return out
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
	out := make([]Route, 0, len(rs))
	for i := range rs {
		out = append(out, RouteOf(&rs[i], v, n.names[rs[i].LinkIndex]))
	}
	return out, nil
}

// RouteOf converts a route of IP version v as netlink reports it, through
// the link called iface (routes.InterfaceNone for the no-interface types,
// whatever iface says).
func RouteOf(r *netlink.Route, v int, iface string) Route {
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
	if routes.IsNoInterfaceType(r.Type) {
		iface = routes.InterfaceNone
	}
	gw, _ := netip.AddrFromSlice(r.Gw)
	src, _ := netip.AddrFromSlice(r.Src)
	return Route{Iface: iface, Dst: dst, Type: r.Type, Protocol: int(r.Protocol), Scope: r.Scope, Gateway: gw.Unmap(),
		OnLink: r.Flags&unix.RTNH_F_ONLINK != 0, Src: src.Unmap(), MTU: r.MTU}
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
		out = append(out, FDBEntry{MAC: e.HardwareAddr.String(), Dst: a.Unmap(), State: e.State})
	}
	return out, nil
}

// Sysctl implements Reader: /proc/sys/<key> (the process's network
// namespace).
func (n *Netlink) Sysctl(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", filepath.Clean("/"+key)))
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", key, err)
	}
	return strings.TrimRight(string(b), "\n "), nil
}

// PodLink implements Reader: ifName inside the namespace at netnsPath.
func (n *Netlink) PodLink(netnsPath, ifName string) (Link, error) {
	h, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return Link{}, fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return Link{}, fmt.Errorf("netlink in netns %s: %w", netnsPath, err)
	}
	defer nh.Close()
	l, err := nh.LinkByName(ifName)
	if nlutil.LinkNotFound(err) {
		return Link{}, fmt.Errorf("link %s in netns %s: %w", ifName, netnsPath, ErrNotExist)
	}
	if err != nil {
		return Link{}, fmt.Errorf("link %s in netns %s: %w", ifName, netnsPath, err)
	}
	return linkOf(l), nil
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

// Counting is a Reader that counts the reads it passes on, by method.
type Counting struct {
	R  Reader
	mu sync.Mutex
	n  map[string]int
}

// Count records one read named m ("links", "routes", …); wrappers of a
// wider interface count their own reads with it.
func (c *Counting) Count(m string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[m]++
	c.mu.Unlock()
}

// Reads returns how many reads were made.
func (c *Counting) Reads() int64 {
	_, total := c.ByMethod()
	return int64(total)
}

// ByMethod returns the reads made so far, by method, and their total.
func (c *Counting) ByMethod() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total := map[string]int{}, 0
	for k, v := range c.n {
		out[k] = v
		total += v
	}
	return out, total
}

// Links implements Reader.
func (c *Counting) Links() ([]Link, error) { c.Count("links"); return c.R.Links() }

// Routes implements Reader.
func (c *Counting) Routes(v int) ([]Route, error) { c.Count("routes"); return c.R.Routes(v) }

// Neighs implements Reader.
func (c *Counting) Neighs(index, v int) ([]Neigh, error) {
	c.Count("neighs")
	return c.R.Neighs(index, v)
}

// FDB implements Reader.
func (c *Counting) FDB(index int) ([]FDBEntry, error) { c.Count("fdb"); return c.R.FDB(index) }

// SetMembers implements Reader.
func (c *Counting) SetMembers(name string) ([]netip.Prefix, bool, error) {
	c.Count("ipset")
	return c.R.SetMembers(name)
}

// Sysctl implements Reader.
func (c *Counting) Sysctl(key string) (string, error) { c.Count("sysctl"); return c.R.Sysctl(key) }

// PodLink implements Reader.
func (c *Counting) PodLink(netnsPath, ifName string) (Link, error) {
	c.Count("podlink")
	return c.R.PodLink(netnsPath, ifName)
}

// famIndex maps IP version 4 or 6 to the index of [2] arrays.
func famIndex(v int) int {
	if v == 6 {
		return 1
	}
	return 0
}
