package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// HostVeth is what routelet keeps right on one pod's host veth.
type HostVeth struct {
	Name string
	// IPv6: the pod has an IPv6 address (HostSysctls' IPv6 settings).
	IPv6 bool
	// Neighbours are the pod's IPv6 addresses: each has a permanent
	// neighbour entry on the veth pointing at MAC, the pod side's MAC.
	Neighbours []netip.Addr
	MAC        net.HardwareAddr
}

// Repairs counts what one Check put back.
type Repairs struct {
	Sysctls    int // per-veth and node settings rewritten
	Links      int // veths set administratively up again
	Neighbours int // permanent IPv6 neighbour entries re-added
}

// Keeper re-asserts, in the network namespace it was made in, what the
// plugin's ADD set up on the node side of each pod and nothing watches
// otherwise: the veth's HostSysctls, the node's NodeSysctls, the veth's
// administrative state (up) and the permanent neighbour entry for each of
// the pod's IPv6 addresses. It only touches veths whose name has the
// configured prefix. Sysctls have no change events, so every Check with
// sysctls set reads them (only the veths' own files); links and neighbours
// are read when an event named the veth (LinkChanged, NeighChanged) or after
// CheckAll. It is not safe for concurrent use.
type Keeper struct {
	prefix string
	h      *netlink.Handle
	log    *slog.Logger
	veths  map[string]HostVeth
	// links and neighs name the veths whose link or neighbours the next
	// Check reads.
	links, neighs map[string]bool
	// veth holds the kept names last read as an existing veth: only those
	// get their sysctls written.
	veth map[string]bool
}

// NewKeeper opens a netlink handle in the calling thread's namespace for
// the veths whose names start with prefix. The /proc/sys files Check reads
// are those of the namespace of the thread calling Check.
func NewKeeper(prefix string, log *slog.Logger) (*Keeper, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("keeper: netlink handle: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Keeper{prefix: prefix, h: h, log: log, veths: map[string]HostVeth{},
		links: map[string]bool{}, neighs: map[string]bool{}, veth: map[string]bool{}}, nil
}

// Close releases the netlink handle.
func (k *Keeper) Close() { k.h.Close() }

// SetVeths replaces the veths kept; names without the prefix are ignored.
// A veth that is new or changed has its link and neighbours read by the
// next Check.
func (k *Keeper) SetVeths(vs []HostVeth) {
	next := make(map[string]HostVeth, len(vs))
	for _, v := range vs {
		if !strings.HasPrefix(v.Name, k.prefix) {
			continue
		}
		next[v.Name] = v
		if old, ok := k.veths[v.Name]; !ok || !sameVeth(old, v) {
			k.links[v.Name], k.neighs[v.Name] = true, true
		}
	}
	for name := range k.veth {
		if _, ok := next[name]; !ok {
			delete(k.veth, name)
		}
	}
	k.veths = next
}

// sameVeth compares two HostVeth values.
func sameVeth(a, b HostVeth) bool {
	return a.Name == b.Name && a.IPv6 == b.IPv6 && slices.Equal(a.Neighbours, b.Neighbours) && bytes.Equal(a.MAC, b.MAC)
}

// LinkChanged is the hint for a link event naming name: the next Check
// reads its state, and its neighbours (a link that went down lost them).
func (k *Keeper) LinkChanged(name string) {
	if _, ok := k.veths[name]; ok {
		k.links[name], k.neighs[name] = true, true
	}
}

// NeighChanged is the hint for a neighbour event on name.
func (k *Keeper) NeighChanged(name string) {
	if _, ok := k.veths[name]; ok {
		k.neighs[name] = true
	}
}

// CheckAll makes the next Check read every veth's link and neighbours
// (after lost events, or on the periodic resync).
func (k *Keeper) CheckAll() {
	for name := range k.veths {
		k.links[name], k.neighs[name] = true, true
	}
}

// Check repairs what differs: the link and neighbours of the veths hinted
// since the last Check, and with sysctls every kept veth's HostSysctls and
// the NodeSysctls the pods need. A veth that no longer exists, or a link of
// that name that is not a veth, is skipped (its record is the agent's
// business). Errors are joined; what failed is hinted again for the next
// Check.
func (k *Keeper) Check(sysctls bool) (Repairs, error) {
	var rep Repairs
	var errs []error
	var retryLinks, retryNeighs []string
	for name := range k.links {
		delete(k.links, name)
		v, ok := k.veths[name]
		if !ok {
			continue
		}
		fixed, err := k.ensureUp(v)
		if err != nil {
			errs = append(errs, err)
			retryLinks = append(retryLinks, name)
		} else if fixed {
			rep.Links++
		}
	}
	if sysctls && len(k.veths) > 0 {
		any6 := false
		for _, name := range k.sortedNames() {
			v := k.veths[name]
			any6 = any6 || v.IPv6
			if !k.veth[name] {
				continue
			}
			n, err := k.ensureSysctls(HostSysctls(v.Name, v.IPv6))
			rep.Sysctls += n
			if err != nil {
				errs = append(errs, fmt.Errorf("veth %s: %w", v.Name, err))
			}
		}
		n, err := k.ensureSysctls(NodeSysctls(any6))
		rep.Sysctls += n
		if err != nil {
			errs = append(errs, fmt.Errorf("node: %w", err))
		}
	}
	for name := range k.neighs {
		delete(k.neighs, name)
		v, ok := k.veths[name]
		if !ok || len(v.Neighbours) == 0 {
			continue
		}
		n, err := k.ensureNeighbours(v)
		rep.Neighbours += n
		if err != nil {
			errs = append(errs, err)
			retryNeighs = append(retryNeighs, name)
		}
	}
	for _, name := range retryLinks {
		k.links[name] = true
	}
	for _, name := range retryNeighs {
		k.neighs[name] = true
	}
	return rep, errors.Join(errs...)
}

// sortedNames lists the kept veths in name order.
func (k *Keeper) sortedNames() []string {
	names := make([]string, 0, len(k.veths))
	for n := range k.veths {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ensureSysctls writes the settings that differ, logging each, and returns
// how many it wrote. A setting missing because its interface is gone is
// not an error.
func (k *Keeper) ensureSysctls(settings []Sysctl) (int, error) {
	wrote, err := EnsureSysctls(settings)
	for _, key := range wrote {
		k.log.Info("sysctl repaired", "key", key)
	}
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return len(wrote), err
}

// ensureUp sets v's link administratively up when it is down. Links that
// are missing, or are not veths, are left alone.
func (k *Keeper) ensureUp(v HostVeth) (bool, error) {
	l, err := k.h.LinkByName(v.Name)
	if err != nil {
		if nlutil.LinkNotFound(err) {
			delete(k.veth, v.Name)
			return false, nil
		}
		return false, fmt.Errorf("veth %s: %w", v.Name, err)
	}
	if l.Type() != "veth" {
		k.log.Warn("not keeping a pod interface that is not a veth", "iface", v.Name, "type", l.Type())
		delete(k.veth, v.Name)
		return false, nil
	}
	k.veth[v.Name] = true
	if l.Attrs().Flags&net.FlagUp != 0 {
		return false, nil
	}
	if err := k.h.LinkSetUp(l); err != nil {
		return false, fmt.Errorf("set veth %s up: %w", v.Name, err)
	}
	k.log.Info("veth set up again", "iface", v.Name)
	return true, nil
}

// ensureNeighbours re-adds the permanent IPv6 neighbour entries of v that
// are missing or differ, and returns how many it wrote.
func (k *Keeper) ensureNeighbours(v HostVeth) (int, error) {
	if len(v.MAC) == 0 {
		return 0, nil
	}
	l, err := k.h.LinkByName(v.Name)
	if err != nil {
		return 0, nil // gone: nothing to keep
	}
	if l.Type() != "veth" {
		return 0, nil
	}
	have, err := k.h.NeighList(l.Attrs().Index, unix.AF_INET6)
	if err != nil {
		return 0, fmt.Errorf("veth %s: list neighbours: %w", v.Name, err)
	}
	wrote := 0
	var errs []error
	for _, a := range v.Neighbours {
		ok := slices.ContainsFunc(have, func(n netlink.Neigh) bool {
			ip, _ := netip.AddrFromSlice(n.IP)
			return ip == a && n.State&netlink.NUD_PERMANENT != 0 && bytes.Equal(n.HardwareAddr, v.MAC)
		})
		if ok {
			continue
		}
		err := k.h.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_INET6,
			State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: v.MAC})
		if err != nil {
			errs = append(errs, fmt.Errorf("veth %s: neighbour %s lladdr %s: %w", v.Name, a, v.MAC, err))
			continue
		}
		k.log.Info("permanent neighbour repaired", "iface", v.Name, "ip", a, "mac", v.MAC.String())
		wrote++
	}
	return wrote, errors.Join(errs...)
}
