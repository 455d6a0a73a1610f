package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/podguard"
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
	// Addrs are the pod's addresses routed to the veth: the only sources
	// its pod guard lets through (SetGuards).
	Addrs []netip.Addr
}

// Repairs counts what one Check put back.
type Repairs struct {
	Sysctls    int // per-veth and node settings rewritten
	Links      int // veths set administratively up again
	Neighbours int // permanent IPv6 neighbour entries re-added
	Guards     int // pod guards rewritten, or removed with their veth
}

// Keeper re-asserts, in the network namespace it was made in, what the
// plugin's ADD set up on the node side of each pod and nothing watches
// otherwise: the veth's HostSysctls, the node's NodeSysctls, the veth's
// administrative state (up) and the permanent neighbour entry for each of
// the pod's IPv6 addresses. It only touches veths whose name has the
// configured prefix. It reads only what may have changed: a veth's link,
// neighbours and all its sysctls when an event named it (LinkChanged,
// NeighChanged, SysctlsChanged) or after CheckAll, the node's sysctls after
// SysctlsChanged("") or any veth sysctl read; on each Check with poll set,
// the sysctls whose changes the kernel does not announce (not Announced)
// of every veth, and all sysctls of the veths new since the last poll. It
// is not safe for concurrent use.
type Keeper struct {
	prefix string
	h      *netlink.Handle
	log    *slog.Logger
	veths  map[string]keptVeth
	names  []string // the keys of veths, sorted
	n6     int      // kept veths with IPv6 (NodeSysctls' argument: any)
	// links, neighs and sysctls name the veths whose link, neighbours or
	// sysctls the next Check reads, fresh those whose sysctls the next
	// polling Check reads; node: the next Check reads NodeSysctls.
	links, neighs, sysctls, fresh map[string]bool
	// guardHints name the veths whose pod guard the next Check reads: those
	// of link events (not new kept veths: ADD has just written theirs, and
	// CheckGuards reads it).
	guardHints map[string]bool
	node       bool
	// veth holds the kept names last read as an existing veth: only those
	// get their sysctls written.
	veth map[string]bool
	// files keeps the polled (not Announced) sysctls' files open.
	files sysctlFiles
	// guards, when set, keeps the veths' pod guards (SetGuards), dropping
	// VXLAN to guardPort.
	guards    *podguard.Guards
	guardPort uint16
	// guardGen reads the nf_tables generation for CheckGuards (nil: a
	// fresh socket each time); guardEpoch counts changes to the kept
	// veths and to which of them exist; clean is what the last
	// CheckGuards that found every guard right saw.
	guardGen   *nlutil.Conn
	guardEpoch uint64
	clean      guardsSeen
}

// keptVeth is one kept veth with its HostSysctls, all and the polled
// (not Announced) ones.
type keptVeth struct {
	HostVeth
	all, polled []Sysctl
}

// NewKeeper opens a netlink handle in the calling thread's namespace for
// the veths whose names start with prefix. The /proc/sys files Check reads
// are those of the namespace of the thread calling Check; the polled ones
// are opened once and kept open (see sysctlFiles), so call Check in one
// namespace.
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
	k := &Keeper{prefix: prefix, h: h, log: log, veths: map[string]keptVeth{},
		links: map[string]bool{}, neighs: map[string]bool{}, sysctls: map[string]bool{}, fresh: map[string]bool{}, guardHints: map[string]bool{},
		veth: map[string]bool{}}
	k.files.reserve()
	return k, nil
}

// Close releases the netlink handle and the kept sysctl files.
func (k *Keeper) Close() {
	k.h.Close()
	k.files.closeAll()
	if k.guardGen != nil {
		k.guardGen.Close()
	}
}

// SetVeths replaces the veths kept; names without the prefix are ignored.
// A veth that is new or changed has its link and neighbours read by the
// next Check and its sysctls, and then the node's, by the next polling
// Check (ADD has just written them; a change is announced or polled).
// Handing over the same veths again costs one comparison each.
func (k *Keeper) SetVeths(vs []HostVeth) {
	want := make(map[string]bool, len(vs))
	for _, v := range vs {
		want[v.Name] = true
	}
	var gone []string
	for name := range k.veths {
		if !want[name] {
			gone = append(gone, name)
		}
	}
	k.UpdateVeths(vs, gone)
}

// UpdateVeths changes some of the veths kept: each of set is kept as
// SetVeths keeps it (in place of the one of its name; of two with one name
// the later), each name in gone no longer (a name in both stays kept). It
// costs what the veths it names cost, however many are kept.
func (k *Keeper) UpdateVeths(set []HostVeth, gone []string) {
	for _, name := range gone {
		k.drop(name)
	}
	for _, v := range set {
		if strings.HasPrefix(v.Name, k.prefix) {
			k.keep(v)
		}
	}
}

// keep keeps v, unless the veth of its name is kept as it is already.
func (k *Keeper) keep(v HostVeth) {
	old, had := k.veths[v.Name]
	if had && sameVeth(old.HostVeth, v) {
		return
	}
	all := HostSysctls(v.Name, v.IPv6)
	kv := keptVeth{HostVeth: v, all: all}
	for _, s := range all {
		if !s.Announced {
			kv.polled = append(kv.polled, s)
		}
	}
	if had {
		k.forget(old, !slices.Equal(kv.polled, old.polled))
	} else {
		i, _ := slices.BinarySearch(k.names, v.Name)
		k.names = slices.Insert(k.names, i, v.Name)
	}
	if v.IPv6 {
		k.n6++
	}
	k.veths[v.Name] = kv
	k.links[v.Name], k.neighs[v.Name], k.fresh[v.Name] = true, true, true
	k.guardEpoch++
}

// drop stops keeping the veth name.
func (k *Keeper) drop(name string) {
	old, ok := k.veths[name]
	if !ok {
		return
	}
	k.forget(old, true)
	delete(k.veths, name)
	delete(k.veth, name)
	delete(k.fresh, name)
	delete(k.guardHints, name)
	k.guardEpoch++
	if i, found := slices.BinarySearch(k.names, name); found {
		k.names = slices.Delete(k.names, i, i+1)
	}
}

// forget undoes what keeping old counted, and with files closes its
// polled files.
func (k *Keeper) forget(old keptVeth, files bool) {
	if old.IPv6 {
		k.n6--
	}
	if files {
		for _, s := range old.polled {
			k.files.close(s.Key)
		}
	}
}

// sameVeth compares two HostVeth values.
func sameVeth(a, b HostVeth) bool {
	return a.Name == b.Name && a.IPv6 == b.IPv6 && slices.Equal(a.Neighbours, b.Neighbours) && bytes.Equal(a.MAC, b.MAC) &&
		slices.Equal(a.Addrs, b.Addrs)
}

// LinkChanged is the hint for a link event naming name: the next Check
// reads its state, its neighbours (a link that went down lost them) and its
// sysctls (a veth made again under the name starts from the defaults).
func (k *Keeper) LinkChanged(name string) {
	if _, ok := k.veths[name]; ok {
		k.links[name], k.neighs[name], k.sysctls[name], k.guardHints[name] = true, true, true, true
	}
}

// NeighChanged is the hint for a neighbour event on name.
func (k *Keeper) NeighChanged(name string) {
	if _, ok := k.veths[name]; ok {
		k.neighs[name] = true
	}
}

// SysctlsChanged is the hint for a device configuration (netconf) event:
// the next Check reads every sysctl of the veth name, or with name "" the
// node's.
func (k *Keeper) SysctlsChanged(name string) {
	if name == "" {
		k.node = true
		return
	}
	if _, ok := k.veths[name]; ok {
		k.sysctls[name] = true
	}
}

// CheckAll makes the next Check read every veth's link, neighbours and
// sysctls and the node's sysctls (after lost events, or on the periodic
// resync).
func (k *Keeper) CheckAll() {
	for name := range k.veths {
		k.links[name], k.neighs[name], k.sysctls[name], k.guardHints[name] = true, true, true, true
	}
	k.node = true
}

// Check repairs what differs: the link, neighbours and sysctls of the veths
// hinted since the last Check, the NodeSysctls the pods need when hinted or
// when a veth's sysctls were read, and with poll the not Announced
// HostSysctls of every kept veth and all of those of the veths new since the
// last poll; with SetGuards, the pod guards of the existing kept veths
// hinted by a link event (LinkChanged, CheckAll). A veth that no longer exists, or a link of
// that name that is not a veth, is skipped (its record is the agent's
// business). Errors are joined; what failed is hinted again for the next
// Check.
func (k *Keeper) Check(poll bool) (Repairs, error) {
	var rep Repairs
	var errs []error
	var retryLinks, retryNeighs, retrySysctls []string
	for name := range k.links {
		delete(k.links, name)
		v, ok := k.veths[name]
		if !ok {
			continue
		}
		fixed, err := k.ensureUp(v.HostVeth)
		if err != nil {
			errs = append(errs, err)
			retryLinks = append(retryLinks, name)
		} else if fixed {
			rep.Links++
		}
	}
	if len(k.sysctls) > 0 || poll {
		for _, name := range k.names {
			hinted := k.sysctls[name] || (poll && k.fresh[name])
			if (!hinted && !poll) || !k.veth[name] {
				continue
			}
			v := k.veths[name]
			settings := v.polled
			if hinted {
				settings = v.all
				k.node = true
			}
			n, err := k.ensureSysctls(settings)
			rep.Sysctls += n
			if err != nil {
				errs = append(errs, fmt.Errorf("veth %s: %w", v.Name, err))
				retrySysctls = append(retrySysctls, name)
			}
		}
		clear(k.sysctls)
		if poll {
			clear(k.fresh)
		}
	}
	if k.node && len(k.veths) > 0 {
		k.node = false
		n, err := k.ensureSysctls(NodeSysctls(k.n6 > 0))
		rep.Sysctls += n
		if err != nil {
			errs = append(errs, fmt.Errorf("node: %w", err))
			k.node = true
		}
	}
	for name := range k.neighs {
		delete(k.neighs, name)
		v, ok := k.veths[name]
		if !ok || len(v.Neighbours) == 0 {
			continue
		}
		n, err := k.ensureNeighbours(v.HostVeth)
		rep.Neighbours += n
		if err != nil {
			errs = append(errs, err)
			retryNeighs = append(retryNeighs, name)
		}
	}
	// The guards of veths with a link event are read here (the event may
	// have replaced the veth, and kernels release a veth's chain with it);
	// the periodic read of all of them is CheckGuards.
	if k.guards != nil && len(k.guardHints) > 0 {
		names := slices.Collect(maps.Keys(k.guardHints))
		clear(k.guardHints)
		n, err := k.checkGuardsOf(names)
		rep.Guards += n
		if err != nil {
			errs = append(errs, fmt.Errorf("pod guards: %w", err))
			for _, name := range names {
				k.guardHints[name] = true
			}
		}
	}
	for _, name := range retryLinks {
		k.links[name] = true
	}
	for _, name := range retryNeighs {
		k.neighs[name] = true
	}
	for _, name := range retrySysctls {
		k.sysctls[name] = true
	}
	return rep, errors.Join(errs...)
}

// ensureSysctls writes the settings that differ, logging each, and returns
// how many it wrote. A setting missing because its interface is gone is
// not an error.
func (k *Keeper) ensureSysctls(settings []Sysctl) (int, error) {
	wrote, err := ensureSysctls(settings, k.readSysctl)
	for _, key := range wrote {
		k.log.Info("sysctl repaired", "key", key)
	}
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return len(wrote), err
}

// readSysctl reads s, a polled setting from its kept file.
func (k *Keeper) readSysctl(s Sysctl) (string, error) {
	if s.Announced {
		return readSysctlFast(s.Key)
	}
	return k.files.read(s.Key)
}

// setExists records whether the kept veth name exists as a veth.
func (k *Keeper) setExists(name string, ok bool) {
	if k.veth[name] == ok {
		return
	}
	k.guardEpoch++
	if ok {
		k.veth[name] = true
	} else {
		delete(k.veth, name)
	}
}

// ensureUp sets v's link administratively up when it is down. Links that
// are missing, or are not veths, are left alone.
func (k *Keeper) ensureUp(v HostVeth) (bool, error) {
	l, err := k.h.LinkByName(v.Name)
	if err != nil {
		if nlutil.LinkNotFound(err) {
			k.setExists(v.Name, false)
			return false, nil
		}
		return false, fmt.Errorf("veth %s: %w", v.Name, err)
	}
	if l.Type() != "veth" {
		k.log.Warn("not keeping a pod interface that is not a veth", "iface", v.Name, "type", l.Type())
		k.setExists(v.Name, false)
		return false, nil
	}
	k.setExists(v.Name, true)
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
