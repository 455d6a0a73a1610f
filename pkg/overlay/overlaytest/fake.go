package overlaytest

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/fakekernel"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/overlay"
)

var _ overlay.Netlink = (*FakeNetlink)(nil)

// FakeNetlink is an in-memory overlay.Netlink for tests that need no root.
// It keeps links, addresses, neighbour and FDB entries, mimics the
// kernel's answers (overlay.ErrLinkNotFound, EEXIST, ENOENT,
// EADDRNOTAVAIL, replace semantics of the VXLAN FDB) and can fail chosen
// calls: Fail queues errors per method name, each consumed by one call. It
// is safe for concurrent use.
type FakeNetlink struct {
	mu        sync.Mutex
	links     map[int]*fakeLink
	nextIndex int
	calls     fakekernel.Calls
	writes    int
}

// fakeLink is one link's kernel state. link is never handed out: callers get
// copies.
type fakeLink struct {
	link   netlink.Link
	addrs  []netip.Prefix
	neighs map[netip.Addr]netlink.Neigh // ARP/NDP by IP
	fdb    []netlink.Neigh              // in insertion order, like the kernel's remotes
	txcsum bool
}

// NewFakeNetlink returns an empty fake whose first link gets index 1 (lo is
// not simulated).
func NewFakeNetlink() *FakeNetlink {
	return &FakeNetlink{links: map[int]*fakeLink{}, nextIndex: 1}
}

// Fail makes the next call of method (e.g. "LinkAdd", "NeighSet") return
// err; queued errors are consumed one per call, in order.
func (f *FakeNetlink) Fail(method string, err error) { f.calls.Fail(method, err) }

// Calls returns how often method was called (failed calls included).
func (f *FakeNetlink) Calls(method string) int { return f.calls.Count(method) }

// Writes returns how many successful state-changing calls were made.
func (f *FakeNetlink) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// write runs change as a call of method (see fakekernel.Calls.Do) and
// counts it as a write when it succeeds.
func (f *FakeNetlink) write(method string, change func() error) error {
	return f.calls.Do(&f.mu, method, func() error {
		if err := change(); err != nil {
			return err
		}
		f.writes++
		return nil
	})
}

// AddUnderlay adds an up link (a stand-in for eth0) with the given MTU and
// addresses and returns its index.
func (f *FakeNetlink) AddUnderlay(name string, mtu int, addrs ...netip.Prefix) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu, Flags: net.FlagUp,
		HardwareAddr: net.HardwareAddr{0x52, 0x54, 0, 0, 0, byte(f.nextIndex)}}}
	idx := f.addLocked(l)
	f.links[idx].addrs = slices.Clone(addrs)
	return idx
}

// addLocked stores a copy of l under a new index. f.mu is held.
func (f *FakeNetlink) addLocked(l netlink.Link) int {
	c := cloneLink(l)
	at := c.Attrs()
	at.Index = f.nextIndex
	f.nextIndex++
	if at.MTU == 0 {
		at.MTU = 1500
	}
	f.links[at.Index] = &fakeLink{link: c, neighs: map[netip.Addr]netlink.Neigh{}, txcsum: true}
	return at.Index
}

// cloneLink copies the link types the fake knows.
func cloneLink(l netlink.Link) netlink.Link {
	switch v := l.(type) {
	case *netlink.Vxlan:
		c := *v
		c.HardwareAddr = bytes.Clone(v.HardwareAddr)
		c.SrcAddr = bytes.Clone(v.SrcAddr)
		return &c
	case *netlink.Iptun:
		c := *v
		return &c
	case *netlink.Device:
		c := *v
		c.HardwareAddr = bytes.Clone(v.HardwareAddr)
		return &c
	case *netlink.Dummy:
		c := *v
		return &c
	default:
		c := netlink.GenericLink{LinkAttrs: *l.Attrs(), LinkType: l.Type()}
		return &c
	}
}

// byName finds a link by name. f.mu is held.
func (f *FakeNetlink) byName(name string) *fakeLink {
	for _, l := range f.links {
		if l.link.Attrs().Name == name {
			return l
		}
	}
	return nil
}

// target finds the stored link a caller's link refers to (by index, else by
// name), as the kernel does. f.mu is held.
func (f *FakeNetlink) target(link netlink.Link) (*fakeLink, error) {
	if link == nil {
		return nil, unix.ENODEV
	}
	at := link.Attrs()
	if l, ok := f.links[at.Index]; ok && at.Index != 0 {
		return l, nil
	}
	if l := f.byName(at.Name); l != nil && at.Index == 0 {
		return l, nil
	}
	return nil, unix.ENODEV
}

// LinkByName implements overlay.Netlink.
func (f *FakeNetlink) LinkByName(name string) (netlink.Link, error) {
	return fakekernel.Get(&f.calls, &f.mu, "LinkByName", func() (netlink.Link, error) {
		l := f.byName(name)
		if l == nil {
			return nil, fmt.Errorf("link %s: %w", name, overlay.ErrLinkNotFound)
		}
		return cloneLink(l.link), nil
	})
}

// LinkByIndex implements overlay.Netlink.
func (f *FakeNetlink) LinkByIndex(index int) (netlink.Link, error) {
	return fakekernel.Get(&f.calls, &f.mu, "LinkByIndex", func() (netlink.Link, error) {
		l, ok := f.links[index]
		if !ok {
			return nil, fmt.Errorf("link index %d: %w", index, overlay.ErrLinkNotFound)
		}
		return cloneLink(l.link), nil
	})
}

// LinkList implements overlay.Netlink.
func (f *FakeNetlink) LinkList() ([]netlink.Link, error) {
	return fakekernel.Get(&f.calls, &f.mu, "LinkList", func() ([]netlink.Link, error) {
		var out []netlink.Link
		for _, idx := range slices.Sorted(maps.Keys(f.links)) {
			out = append(out, cloneLink(f.links[idx].link))
		}
		return out, nil
	})
}

// LinkAdd implements overlay.Netlink. A VXLAN device without a MAC gets a
// fixed one; its MTU defaults to 1500 when not given. As in the kernel, a
// second VXLAN device with the VNI and port of an existing one is refused
// with EEXIST.
func (f *FakeNetlink) LinkAdd(link netlink.Link) error {
	return f.write("LinkAdd", func() error {
		if f.byName(link.Attrs().Name) != nil {
			return unix.EEXIST
		}
		if v, ok := link.(*netlink.Vxlan); ok {
			if _, ok := f.links[v.VtepDevIndex]; !ok && v.VtepDevIndex != 0 {
				return unix.ENODEV
			}
			for _, l := range f.links {
				if o, ok := l.link.(*netlink.Vxlan); ok && o.VxlanId == v.VxlanId && o.Port == v.Port && overlay.VXLANFamily(o) == overlay.VXLANFamily(v) {
					return unix.EEXIST
				}
			}
		}
		idx := f.addLocked(link)
		at := f.links[idx].link.Attrs()
		at.Flags &^= net.FlagUp
		if at.HardwareAddr == nil {
			if _, ok := link.(*netlink.Vxlan); ok {
				at.HardwareAddr = net.HardwareAddr{0x06, 0, 0, 0, 0, byte(idx)}
			}
		}
		return nil
	})
}

// LinkDel implements overlay.Netlink.
func (f *FakeNetlink) LinkDel(link netlink.Link) error {
	return f.write("LinkDel", func() error {
		l, err := f.target(link)
		if err != nil {
			return err
		}
		delete(f.links, l.link.Attrs().Index)
		return nil
	})
}

// LinkSetMTU implements overlay.Netlink.
func (f *FakeNetlink) LinkSetMTU(link netlink.Link, mtu int) error {
	return f.modify("LinkSetMTU", link, func(l *fakeLink) { l.link.Attrs().MTU = mtu })
}

// LinkSetUp implements overlay.Netlink.
func (f *FakeNetlink) LinkSetUp(link netlink.Link) error {
	return f.modify("LinkSetUp", link, func(l *fakeLink) { l.link.Attrs().Flags |= net.FlagUp })
}

// LinkSetHardwareAddr implements overlay.Netlink.
func (f *FakeNetlink) LinkSetHardwareAddr(link netlink.Link, hw net.HardwareAddr) error {
	return f.modify("LinkSetHardwareAddr", link, func(l *fakeLink) { l.link.Attrs().HardwareAddr = bytes.Clone(hw) })
}

// LinkSetNoMaster implements overlay.Netlink.
func (f *FakeNetlink) LinkSetNoMaster(link netlink.Link) error {
	return f.modify("LinkSetNoMaster", link, func(l *fakeLink) { l.link.Attrs().MasterIndex = 0 })
}

// SetMaster enslaves the link called name to the link with index master,
// as "ip link set name master …" would.
func (f *FakeNetlink) SetMaster(name string, master int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.links {
		if l.link.Attrs().Name == name {
			l.link.Attrs().MasterIndex = master
			return nil
		}
	}
	return fmt.Errorf("fake: link %s: %w", name, overlay.ErrLinkNotFound)
}

// modify runs change on the stored link after the failure check.
func (f *FakeNetlink) modify(method string, link netlink.Link, change func(*fakeLink)) error {
	return f.write(method, func() error {
		l, err := f.target(link)
		if err != nil {
			return err
		}
		change(l)
		return nil
	})
}

// SetLinkDown, SetLinkMTU and SetLinkMAC change a link behind the managers'
// backs, as an operator would with `ip link set`; they are not counted as
// calls. They report whether the link exists.
func (f *FakeNetlink) SetLinkDown(name string) bool {
	return f.tamper(name, func(l *fakeLink) { l.link.Attrs().Flags &^= net.FlagUp })
}

// SetLinkMTU: see SetLinkDown.
func (f *FakeNetlink) SetLinkMTU(name string, mtu int) bool {
	return f.tamper(name, func(l *fakeLink) { l.link.Attrs().MTU = mtu })
}

// SetLinkMAC: see SetLinkDown.
func (f *FakeNetlink) SetLinkMAC(name string, mac net.HardwareAddr) bool {
	return f.tamper(name, func(l *fakeLink) { l.link.Attrs().HardwareAddr = bytes.Clone(mac) })
}

// DeleteLink removes a link behind the managers' backs (`ip link del`).
func (f *FakeNetlink) DeleteLink(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.byName(name)
	if l == nil {
		return false
	}
	delete(f.links, l.link.Attrs().Index)
	return true
}

// ReplaceLink swaps a link's stored attributes for those of link (same
// index), to simulate a device created by someone else with other settings.
func (f *FakeNetlink) ReplaceLink(link netlink.Link) bool {
	return f.tamper(link.Attrs().Name, func(l *fakeLink) {
		idx := l.link.Attrs().Index
		l.link = cloneLink(link)
		l.link.Attrs().Index = idx
	})
}

func (f *FakeNetlink) tamper(name string, change func(*fakeLink)) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.byName(name)
	if l == nil {
		return false
	}
	change(l)
	return true
}

// Link returns a copy of the named link, or nil.
func (f *FakeNetlink) Link(name string) netlink.Link {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.byName(name); l != nil {
		return cloneLink(l.link)
	}
	return nil
}

// Addrs returns the named link's addresses, sorted.
func (f *FakeNetlink) Addrs(name string) []netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.byName(name)
	if l == nil {
		return nil
	}
	out := slices.Clone(l.addrs)
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// AddAddr adds an address behind the managers' backs (`ip addr add`).
func (f *FakeNetlink) AddAddr(name string, pfx netip.Prefix) bool {
	return f.tamper(name, func(l *fakeLink) { l.addrs = append(l.addrs, pfx) })
}

// TXChecksumOn reports the fake's TX checksum state of the named link.
func (f *FakeNetlink) TXChecksumOn(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.byName(name)
	return l != nil && l.txcsum
}

// AddrList implements overlay.Netlink.
func (f *FakeNetlink) AddrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	return fakekernel.Get(&f.calls, &f.mu, "AddrList", func() ([]netlink.Addr, error) {
		var ls []*fakeLink
		if link == nil {
			for _, l := range f.links {
				ls = append(ls, l)
			}
		} else {
			l, err := f.target(link)
			if err != nil {
				return nil, err
			}
			ls = []*fakeLink{l}
		}
		var out []netlink.Addr
		for _, l := range ls {
			for _, p := range l.addrs {
				if addrFamily(p.Addr()) != family && family != netlink.FAMILY_ALL {
					continue
				}
				out = append(out, netlink.Addr{
					IPNet:     &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
					LinkIndex: l.link.Attrs().Index,
				})
			}
		}
		return out, nil
	})
}

// addrWrite is AddrReplace and AddrDel: a write counted as op that runs
// change on the link it names and the address as a prefix.
func (f *FakeNetlink) addrWrite(op string, link netlink.Link, addr *netlink.Addr, change func(*fakeLink, netip.Prefix) error) error {
	return f.write(op, func() error {
		l, err := f.target(link)
		if err != nil {
			return err
		}
		pfx, ok := nlutil.Prefix(addr.IPNet)
		if !ok {
			return unix.EINVAL
		}
		return change(l, pfx)
	})
}

// AddrReplace implements overlay.Netlink.
func (f *FakeNetlink) AddrReplace(link netlink.Link, addr *netlink.Addr) error {
	return f.addrWrite("AddrReplace", link, addr, func(l *fakeLink, pfx netip.Prefix) error {
		l.addrs = slices.DeleteFunc(l.addrs, func(p netip.Prefix) bool { return p.Addr() == pfx.Addr() })
		l.addrs = append(l.addrs, pfx)
		return nil
	})
}

// AddrDel implements overlay.Netlink.
func (f *FakeNetlink) AddrDel(link netlink.Link, addr *netlink.Addr) error {
	return f.addrWrite("AddrDel", link, addr, func(l *fakeLink, pfx netip.Prefix) error {
		n := len(l.addrs)
		l.addrs = slices.DeleteFunc(l.addrs, func(p netip.Prefix) bool { return p == pfx })
		if len(l.addrs) == n {
			return unix.EADDRNOTAVAIL
		}
		return nil
	})
}

// NeighList implements overlay.Netlink.
func (f *FakeNetlink) NeighList(linkIndex, family int) ([]netlink.Neigh, error) {
	return fakekernel.Get(&f.calls, &f.mu, "NeighList", func() ([]netlink.Neigh, error) {
		l, ok := f.links[linkIndex]
		if !ok {
			return nil, unix.ENODEV
		}
		var out []netlink.Neigh
		if family == unix.AF_BRIDGE {
			for _, n := range l.fdb {
				out = append(out, cloneNeigh(n))
			}
			return out, nil
		}
		for _, ip := range slices.SortedFunc(maps.Keys(l.neighs), netip.Addr.Compare) {
			if addrFamily(ip) == family {
				out = append(out, cloneNeigh(l.neighs[ip]))
			}
		}
		return out, nil
	})
}

// NeighSet implements overlay.Netlink: an ARP/NDP entry is replaced by IP;
// an FDB entry for a known MAC has its first remote replaced, as the VXLAN
// driver does with NLM_F_REPLACE.
func (f *FakeNetlink) NeighSet(neigh *netlink.Neigh) error {
	return f.write("NeighSet", func() error {
		l, ok := f.links[neigh.LinkIndex]
		if !ok {
			return unix.ENODEV
		}
		n := cloneNeigh(*neigh)
		if neigh.Family == unix.AF_BRIDGE {
			for i, e := range l.fdb {
				if bytes.Equal(e.HardwareAddr, n.HardwareAddr) {
					if !slices.ContainsFunc(l.fdb, func(x netlink.Neigh) bool {
						return bytes.Equal(x.HardwareAddr, n.HardwareAddr) && x.IP.Equal(n.IP)
					}) {
						l.fdb[i] = n
					}
					return nil
				}
			}
			l.fdb = append(l.fdb, n)
			return nil
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			return unix.EINVAL
		}
		l.neighs[ip.Unmap()] = n
		return nil
	})
}

// NeighDel implements overlay.Netlink: ENOENT when no such entry exists;
// an FDB delete without IP removes every remote of the MAC.
func (f *FakeNetlink) NeighDel(neigh *netlink.Neigh) error {
	return f.write("NeighDel", func() error {
		l, ok := f.links[neigh.LinkIndex]
		if !ok {
			return unix.ENODEV
		}
		if neigh.Family == unix.AF_BRIDGE {
			n := len(l.fdb)
			l.fdb = slices.DeleteFunc(l.fdb, func(e netlink.Neigh) bool {
				return bytes.Equal(e.HardwareAddr, neigh.HardwareAddr) && (neigh.IP == nil || e.IP.Equal(neigh.IP))
			})
			if len(l.fdb) == n {
				return unix.ENOENT
			}
			return nil
		}
		ip, ok := netip.AddrFromSlice(neigh.IP)
		if !ok {
			return unix.EINVAL
		}
		if _, ok := l.neighs[ip.Unmap()]; !ok {
			return unix.ENOENT
		}
		delete(l.neighs, ip.Unmap())
		return nil
	})
}

// TXChecksum implements overlay.Netlink. New links start with offload on.
func (f *FakeNetlink) TXChecksum(name string) (bool, error) {
	return fakekernel.Get(&f.calls, &f.mu, "TXChecksum", func() (bool, error) {
		l := f.byName(name)
		if l == nil {
			return false, unix.ENODEV
		}
		return l.txcsum, nil
	})
}

// SetTXChecksum implements overlay.Netlink.
func (f *FakeNetlink) SetTXChecksum(name string, on bool) error {
	return f.write("SetTXChecksum", func() error {
		l := f.byName(name)
		if l == nil {
			return unix.ENODEV
		}
		l.txcsum = on
		return nil
	})
}

func cloneNeigh(n netlink.Neigh) netlink.Neigh {
	n.IP = bytes.Clone(n.IP)
	n.HardwareAddr = bytes.Clone(n.HardwareAddr)
	return n
}

// addrFamily is netlink's family constant of a.
func addrFamily(a netip.Addr) int {
	if a.Unmap().Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
