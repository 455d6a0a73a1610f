package overlaymgr

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// RouteTable is the part of *routes.RouteTable the manager drives.
type RouteTable interface {
	SetRoutes(iface string, targets []routes.Target)
	RouteUpdate(iface string, t routes.Target)
	RouteRemove(iface string, cidr netip.Prefix)
	MarkDirty(iface string)
	Apply() error
}

// TableCloser is optional for a RouteTable that holds kernel sockets
// (*routes.RouteTable): the manager's Close closes it.
type TableCloser = io.Closer

var (
	_ RouteTable  = (*routes.RouteTable)(nil)
	_ TableCloser = (*routes.RouteTable)(nil)
)

// NewTable makes the RouteTable of one family (4 or 6) that owns only the
// routelet-protocol routes on the given interfaces (routes.Config
// InterfaceNames). routeletd passes a function around routes.New.
type NewTable func(ipVersion int, owned []string) (RouteTable, error)

// Config says what the overlay should look like. Zero values take the
// defaults noted.
type Config struct {
	NodeName string
	Mode     overlay.Mode
	// HostIPv4 and HostIPv6 are the node's underlay addresses; a family
	// without one gets no overlay (its peers' blocks stay unrouted).
	HostIPv4, HostIPv6 netip.Addr
	// LocalBlocks are this node's pod blocks: the tunnel addresses come from
	// them, and peer blocks overlapping them are never routed away.
	LocalBlocks []netip.Prefix
	VXLANDevice string // IPv4 VXLAN device; default overlay.DeviceVXLAN (IPv6: always overlay.DeviceVXLANv6)
	VNI, Port   int    // default overlay.DefaultVNI, overlay.DefaultPort
	// MTU is the configured pod MTU; 0 means the parent's MTU minus the
	// mode's overhead. It is also the overlay devices' MTU and the MTU of
	// encapsulated routes.
	MTU    int
	Logger *slog.Logger
	// OnRepair is handed to the VXLAN devices (overlay.VXLANConfig).
	OnRepair func(object string)
	// RouteProtocol marks routelet's routes; default routes.DefaultProtocol.
	RouteProtocol int
	// CheckPeriod is how often the loop runs the device check (QueueCheck);
	// default DefaultCheckPeriod.
	CheckPeriod time.Duration
	// OnDrift, when set, is called (from the event goroutine) when an
	// event shows something the manager wants was taken away behind its
	// back: object "route", "neigh" or "fdb" and what it was; the next
	// Apply repairs it.
	OnDrift func(object, detail string)
}

// DefaultCheckPeriod is how often the overlay devices are re-read unless
// Config says otherwise (routeletd passes its device-check-period).
const DefaultCheckPeriod = 10 * time.Second

// device is what the manager needs of overlay.VXLAN and overlay.IPIP.
type device interface {
	Apply() error
	Device() overlay.DeviceInfo
	OnLinkUpdate(ifname string) bool
	QueueCheck()
}

// family is the overlay of one IP family. Loop-owned except the device
// managers, which are safe for concurrent use (event handlers call their
// hints).
type family struct {
	v       int
	hostIP  netip.Addr
	parent  overlay.Underlay
	mtu     int
	vxlan   *overlay.VXLAN // nil unless a VXLAN mode
	devices []device       // vxlan and/or ipip
	in      overlay.RouteInput
	owned   []string
	rt      RouteTable
	created map[string]int // device name → DeviceInfo.Created last seen
	// problems is the last set of route problems logged (logged on change).
	problems string
	// l2 is the peers of the last OnNodes, as handed to vxlan.SetPeers
	// and the route builder; its array is reused by the next.
	l2 []overlay.Peer
	// routes is, per owned interface, the CIDRs of the targets last
	// handed to rt (which keeps the targets), each with the OnNodes
	// generation that last wanted it. Guarded by Manager.mu (the event
	// handler looks routes up).
	routes map[string]map[netip.Prefix]uint64
	gen    uint64
	rb     overlay.RouteBuilder
	// last is rb's previous result (valid until the call after next).
	last map[string][]routes.Target
}

// Manager is the overlay's agent.Manager. OnNodes and Apply run on the
// loop goroutine; the netwatch handler (Events) only records hints
// (QueueCheck and the device hints are safe for concurrent use).
type Manager struct {
	cfg  Config
	nl   overlay.Netlink
	log  *slog.Logger
	fams []*family
	// stale lists VXLAN devices the mode no longer uses; removed by Apply.
	stale []string
	// blocked says why the last Apply could not build a device and no
	// retry will (the kernel lacks the link kind, a foreign device holds
	// the VNI or port); "" when nothing blocks.
	blocked string

	// mu guards the hints below, recorded by the event handler.
	mu          sync.Mutex
	dirtyIfaces map[string]bool // owned interfaces whose routes need a re-read
	checkRoutes bool            // device check: re-read every owned interface
}

// New works out the overlay of every family (parent, MTU, devices, route
// table) without touching the kernel beyond reading addresses and links.
// The manager owns nl from then on: Close closes it (as does a failed New).
// The error names what is missing, e.g. no link holding the host IP.
func New(nl overlay.Netlink, cfg Config, newTable NewTable) (*Manager, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.VXLANDevice = cmp.Or(cfg.VXLANDevice, overlay.DeviceVXLAN)
	cfg.RouteProtocol = cmp.Or(cfg.RouteProtocol, routes.DefaultProtocol)
	cfg.CheckPeriod = cmp.Or(max(cfg.CheckPeriod, 0), DefaultCheckPeriod) // not above zero: the default
	m := &Manager{cfg: cfg, nl: nl, log: cfg.Logger.With("component", "overlay"), dirtyIfaces: map[string]bool{}}
	for _, v := range []int{4, 6} {
		hostIP := cfg.HostIPv4
		if v == 6 {
			hostIP = cfg.HostIPv6
		}
		blocks := blocksOf(cfg.LocalBlocks, v)
		switch {
		case !hostIP.IsValid():
			if len(blocks) > 0 {
				m.log.Warn("pod blocks of a family without a host IP: peers' blocks of that family are not routed",
					"family", fmt.Sprintf("IPv%d", v), "blocks", blocks)
			}
			continue
		case v == 6 && len(blocks) == 0:
			// An IPv6 underlay without IPv6 pods: nothing to carry.
			continue
		}
		f, err := m.newFamily(v, hostIP, blocks, newTable)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.fams = append(m.fams, f)
	}
	// Devices this mode does not use are removed (only links of type vxlan).
	used := map[string]bool{}
	for _, f := range m.fams {
		for _, d := range f.devices {
			used[d.Device().Name] = true
		}
	}
	for _, name := range []string{cfg.VXLANDevice, overlay.DeviceVXLANv6} {
		if !used[name] {
			m.stale = append(m.stale, name)
		}
	}
	return m, nil
}

// newFamily sets up one family's parent, devices and route table.
func (m *Manager) newFamily(v int, hostIP netip.Addr, blocks []netip.Prefix, newTable NewTable) (*family, error) {
	c := m.cfg
	parent, err := overlay.FindParent(m.nl, hostIP)
	if err != nil {
		return nil, fmt.Errorf("overlay IPv%d: %w", v, err)
	}
	mtu, err := overlay.PodMTU(c.MTU, parent.MTU, c.Mode, v == 6)
	if err != nil {
		return nil, fmt.Errorf("overlay IPv%d on %s: %w", v, parent.Name, err)
	}
	f := &family{v: v, hostIP: hostIP, parent: parent, mtu: mtu, created: map[string]int{}, routes: map[string]map[netip.Prefix]uint64{}}
	tunnel, _ := overlay.TunnelAddress(blocks, v)
	vxlanDev := c.VXLANDevice
	if v == 6 {
		vxlanDev = overlay.DeviceVXLANv6
	}
	log := m.log.With("family", fmt.Sprintf("IPv%d", v))
	if c.Mode.VXLAN() {
		f.vxlan, err = overlay.NewVXLAN(m.nl, overlay.VXLANConfig{
			IPVersion: v, Device: vxlanDev, VNI: c.VNI, Port: c.Port, HostIP: hostIP,
			NodeName: c.NodeName, TunnelAddr: tunnel, MTU: mtu, Logger: log, OnRepair: c.OnRepair,
		})
		if err != nil {
			return nil, err
		}
		f.devices = append(f.devices, f.vxlan)
	}
	if c.Mode.IPIP() && v == 4 {
		ipip, err := overlay.NewIPIP(m.nl, overlay.IPIPConfig{HostIP: hostIP, TunnelAddr: tunnel, MTU: mtu, Logger: log})
		if err != nil {
			return nil, err
		}
		f.devices = append(f.devices, ipip)
	}
	f.in = FamilyInput(c.Mode, v, parent, blocks, mtu, vxlanDev)
	f.owned = overlay.OwnedInterfaces(f.in)
	if f.rt, err = newTable(v, f.owned); err != nil {
		return nil, fmt.Errorf("overlay IPv%d: route table: %w", v, err)
	}
	// Until the first OnNodes: every owned interface wants nothing, so
	// routes of an earlier mode or run are removed by the first Apply.
	for _, name := range f.owned {
		f.rt.SetRoutes(name, nil)
	}
	m.log.Info("overlay", "family", fmt.Sprintf("IPv%d", v), "mode", c.Mode, "parent", parent.Name,
		"subnet", parent.Subnet(), "mtu", mtu, "tunnelAddr", tunnel, "owned", f.owned)
	return f, nil
}

// FamilyInput is the overlay.RouteInput of family v (without peers): the
// parent and its subnet, our blocks of the family, the pod MTU on
// encapsulated routes (none in ModeNone) and the family's VXLAN device.
// routeletd diagnose derives its desired overlay routes from it too.
func FamilyInput(mode overlay.Mode, v int, parent overlay.Underlay, blocks []netip.Prefix, mtu int, vxlanDev string) overlay.RouteInput {
	in := overlay.RouteInput{
		Mode: mode, IPVersion: v, Parent: parent.Name, ParentSubnets: []netip.Prefix{parent.Subnet()},
		LocalBlocks: blocks, VXLANDevice: vxlanDev,
	}
	if mode != overlay.ModeNone {
		in.MTU = mtu
	}
	return in
}

// Peers returns the overlay peers of family v (4 or 6) of validated nodes.
func Peers(nodes []peers.NodeInfo, v int) []overlay.Peer {
	return appendPeers(make([]overlay.Peer, 0, len(nodes)), nodes, v)
}

// appendPeers appends the overlay peers of family v of nodes to ps. A
// node whose blocks are all of family v shares its slice (nothing here
// writes to it).
func appendPeers(ps []overlay.Peer, nodes []peers.NodeInfo, v int) []overlay.Peer {
	for _, n := range nodes {
		ep := n.Endpoint(v)
		blocks := n.Blocks
		if slices.ContainsFunc(blocks, func(b netip.Prefix) bool { return b.Addr().Is4() != (v == 4) }) {
			blocks = n.BlocksOf(v)
		}
		ps = append(ps, overlay.Peer{Name: n.Name, HostIP: ep.HostIP, VTEPMAC: ep.VTEPMAC, TunnelIP: ep.TunnelAddr, Blocks: blocks})
	}
	return ps
}

// blocksOf returns the prefixes of one family.
func blocksOf(ps []netip.Prefix, v int) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == (v == 4) {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Publish fills in what peers need in this node's record: the VTEP MAC
// and tunnel address of each VXLAN device, the tunnel address of the IPIP
// device. Fields of families without a device are cleared.
func (m *Manager) Publish(n *peers.Record) {
	n.VTEPMAC, n.VTEPMACv6, n.TunnelIPv4, n.TunnelIPv6 = "", "", "", ""
	for _, f := range m.fams {
		tunnel, ok := overlay.TunnelAddress(f.in.LocalBlocks, f.v)
		if !ok || len(f.devices) == 0 {
			continue
		}
		var mac string
		if f.vxlan != nil {
			mac = overlay.VTEPMAC(m.cfg.NodeName, f.v).String()
		}
		if f.v == 4 {
			n.TunnelIPv4, n.VTEPMAC = tunnel.String(), mac
		} else {
			n.TunnelIPv6, n.VTEPMACv6 = tunnel.String(), mac
		}
	}
}

// PodMTU returns the pod MTU the overlay allows: the smallest MTU of its
// families (an IPv6 underlay costs 20 bytes more). 0 when no family has an
// overlay.
func (m *Manager) PodMTU() int {
	mtu := 0
	for _, f := range m.fams {
		if mtu == 0 || f.mtu < mtu {
			mtu = f.mtu
		}
	}
	return mtu
}

// Parents returns the parent (the link holding the host IP, with the
// host prefix) of each family the node has, IPv4 first: found once, at
// New.
func (m *Manager) Parents() []overlay.Underlay {
	out := make([]overlay.Underlay, 0, len(m.fams))
	for _, f := range m.fams {
		out = append(out, f.parent)
	}
	return out
}

// The loop's capabilities this manager has.
var (
	_ agent.Manager = (*Manager)(nil)
	_ agent.Checker = (*Manager)(nil)
	_ agent.Blocker = (*Manager)(nil)
)

// OnWorkloads implements agent.Manager: the overlay does not depend on
// the workloads.
func (m *Manager) OnWorkloads(agent.Served) {}

// OnNodes implements agent.Manager: every validated peer becomes a peer of
// each family; the VXLAN managers get the peers, the route tables every
// owned interface's routes (memory only). Only what changed since the last
// OnNodes is handed on: the route targets that differ, and the peers to
// the VXLAN manager only when its entries may change. The peers were
// checked where their records entered the daemon (pkg/peers), so nothing
// is parsed here.
func (m *Manager) OnNodes(nodes []peers.NodeInfo) {
	for _, f := range m.fams {
		// The list is rewritten in place: SetPeers and Routes keep none
		// of it. (A change of blocks only leaves the ARP and FDB entries
		// alone: SetPeers compares them.)
		if cap(f.l2) < len(nodes) {
			f.l2 = make([]overlay.Peer, 0, len(nodes)+len(nodes)/16)
		}
		ps := appendPeers(f.l2[:0], nodes, f.v)
		clear(ps[len(ps):cap(ps)]) // drop what a longer list held
		f.l2 = ps
		if f.vxlan != nil {
			f.vxlan.SetPeers(ps)
		}
		in := f.in
		in.Peers = ps
		want, errs := f.rb.Routes(in)
		m.setRoutes(f, want)
		var problems []string
		for _, err := range errs {
			problems = append(problems, err.Error())
		}
		if s := strings.Join(problems, "; "); s != f.problems {
			f.problems = s
			if s != "" {
				m.log.Warn("some peers' blocks are not routed", "family", fmt.Sprintf("IPv%d", f.v), "problems", problems)
			}
		}
	}
}

// setRoutes hands family f's route table the targets of want: changed and
// new ones first, in interface and peer order, then the removals (a
// target the table holds already changes nothing there). Nothing is
// built when nothing changed.
func (m *Manager) setRoutes(f *family, want map[string][]routes.Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer func() { f.last = want }()
	if m.setChanged(f, want) {
		return
	}
	f.gen++
	current := make(map[string]int, len(want))
	for _, name := range slices.Sorted(maps.Keys(want)) {
		have := f.routes[name]
		if have == nil {
			have = make(map[netip.Prefix]uint64, len(want[name]))
			f.routes[name] = have
		}
		for _, t := range want[name] {
			t.CIDR = t.CIDR.Masked()
			f.rt.RouteUpdate(name, t)
			if gen, ok := have[t.CIDR]; !ok || gen != f.gen {
				current[name]++
			}
			have[t.CIDR] = f.gen
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.routes)) {
		have := f.routes[name]
		if len(have) == current[name] {
			continue // every target is still wanted
		}
		for cidr, gen := range have {
			if gen != f.gen {
				f.rt.RouteRemove(name, cidr)
				delete(have, cidr)
			}
		}
	}
}

// setChanged is setRoutes when every interface wants as many targets as
// last time: the targets are compared with the last ones position by
// position (Routes keeps peer order), and only those that differ are
// handed on. It reports false, having changed nothing, when the counts
// differ. m.mu is held.
func (m *Manager) setChanged(f *family, want map[string][]routes.Target) bool {
	if f.last == nil || len(f.last) != len(want) {
		return false
	}
	for name, ts := range want {
		if prev, ok := f.last[name]; !ok || len(prev) != len(ts) {
			return false
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		ts, prev, have := want[name], f.last[name], f.routes[name]
		var changed []int
		for i := range ts {
			if !ts[i].Equal(prev[i]) {
				changed = append(changed, i)
			}
		}
		// Old CIDRs out first: a CIDR that moved to another position (two
		// peers swapping blocks) is back in before the removals.
		for _, i := range changed {
			delete(have, prev[i].CIDR)
		}
		for _, i := range changed {
			have[ts[i].CIDR] = f.gen
			f.rt.RouteUpdate(name, ts[i])
		}
		for _, i := range changed {
			if _, ok := have[prev[i].CIDR]; !ok {
				f.rt.RouteRemove(name, prev[i].CIDR)
			}
		}
	}
	return true
}

// Apply implements agent.Manager: stale devices removed, then per family
// the devices, then their routes. A device that was (re)created lost its
// routes with the old one, so its routes are re-read and re-added in the
// same pass. Errors are joined; what failed is retried by the next Apply.
func (m *Manager) Apply() error {
	var errs []error
	var left []string
	for _, name := range m.stale {
		if err := overlay.RemoveVXLAN(m.nl, name); err != nil {
			errs = append(errs, err)
			left = append(left, name)
		}
	}
	m.stale = left

	var blocked []string
	defer func() { m.blocked = strings.Join(blocked, "; ") }()
	m.mu.Lock()
	dirty, check := m.dirtyIfaces, m.checkRoutes
	m.dirtyIfaces, m.checkRoutes = map[string]bool{}, false
	m.mu.Unlock()
	for _, f := range m.fams {
		for _, name := range f.owned {
			if check || dirty[name] {
				f.rt.MarkDirty(name)
			}
		}
		for _, d := range f.devices {
			if err := d.Apply(); err != nil {
				errs = append(errs, err)
				if errors.Is(err, overlay.ErrUnsupported) || errors.Is(err, overlay.ErrForeignDevice) {
					blocked = append(blocked, err.Error())
				}
			}
			info := d.Device()
			if info.Created != f.created[info.Name] {
				f.created[info.Name] = info.Created
				f.rt.MarkDirty(info.Name)
			}
		}
		if err := f.rt.Apply(); err != nil {
			errs = append(errs, fmt.Errorf("overlay IPv%d routes: %w", f.v, err))
		}
	}
	return errors.Join(errs...)
}

// NotReady returns why the overlay cannot work as configured, or "": the
// last Apply found that the kernel cannot create a device of the mode, or
// that a device routelet does not own holds what ours needs. The agent
// reports it as the daemon's not-ready reason; Apply keeps retrying, so
// the daemon becomes ready once the cause is gone (module loaded, foreign
// device removed).
func (m *Manager) NotReady() string { return m.blocked }

// Close releases the route tables and the netlink seam where they hold
// kernel sockets (TableCloser, overlay.Closer). The kernel state stays.
func (m *Manager) Close() error {
	var errs []error
	for _, f := range m.fams {
		if c, ok := f.rt.(TableCloser); ok {
			errs = append(errs, c.Close())
		}
	}
	if c, ok := m.nl.(overlay.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// onLink is the hint for a link event naming ifname: the devices whose
// device or parent it names re-check themselves; an owned interface gets
// its routes re-read (it may have come back up). It reports whether the
// event mattered.
func (m *Manager) onLink(ifname string) bool {
	hit := false
	for _, f := range m.fams {
		for _, d := range f.devices {
			if d.OnLinkUpdate(ifname) {
				hit = true
			}
		}
		if slices.Contains(f.owned, ifname) {
			m.markIface(ifname)
			hit = true
		}
	}
	return hit
}

// owns reports whether ifname is an owned interface of some family.
func (m *Manager) owns(ifname string) bool {
	for _, f := range m.fams {
		if slices.Contains(f.owned, ifname) {
			return true
		}
	}
	return false
}

// onNeigh is the hint for a neighbour or FDB event on a VXLAN device: one
// that shows drift (overlay.VXLAN.OnNeighEvent) is reported to OnDrift and
// makes the next Apply re-read and repair the device's entries; the echo
// of the manager's own writes does not. It reports whether the event
// mattered.
func (m *Manager) onNeigh(ev netwatch.NeighEvent) bool {
	for _, f := range m.fams {
		if f.vxlan == nil || f.vxlan.Device().Name != ev.Iface {
			continue
		}
		object := f.vxlan.OnNeighEvent(overlay.NeighEvent{FDB: ev.FDB, IP: ev.IP, MAC: ev.MAC,
			Permanent: ev.State&netlink.NUD_PERMANENT != 0, Deleted: ev.Deleted, Type: ev.Type})
		if object == "" {
			return false
		}
		if m.cfg.OnDrift != nil {
			what := ev.IP.String()
			if !ev.IP.IsValid() {
				what = ev.MAC.String()
			}
			m.cfg.OnDrift(object, what+" dev "+ev.Iface)
		}
		return true
	}
	return false
}

// markIface asks the next Apply to re-read ifname's routes.
func (m *Manager) markIface(ifname string) {
	m.mu.Lock()
	m.dirtyIfaces[ifname] = true
	m.mu.Unlock()
}

// CheckPeriod implements agent.Checker: how often the loop calls
// QueueCheck.
func (m *Manager) CheckPeriod() time.Duration { return m.cfg.CheckPeriod }

// QueueCheck implements agent.Checker: the periodic device check. Every
// device re-reads itself, its addresses and its neighbour and FDB entries,
// and every owned interface its routes, in the next Apply.
func (m *Manager) QueueCheck() {
	for _, f := range m.fams {
		for _, d := range f.devices {
			d.QueueCheck()
		}
	}
	m.mu.Lock()
	m.checkRoutes = true
	m.mu.Unlock()
}

// Interest is what the overlay owns in the netlink event stream: its
// devices, their parents and the owned interfaces of every family; of
// their routes only deletions of routelet-protocol routes in the main
// table.
func (m *Manager) Interest() netwatch.Interest {
	var names []string
	for _, f := range m.fams {
		names = append(names, f.owned...)
		names = append(names, f.parent.Name)
		for _, d := range f.devices {
			names = append(names, d.Device().Name)
		}
	}
	slices.Sort(names)
	return netwatch.Interest{
		Names:     slices.Compact(names),
		Protocols: []int{m.cfg.RouteProtocol}, Tables: []int{0, unix.RT_TABLE_MAIN}, RouteDeletesOnly: true,
	}
}

// Events returns the overlay's netwatch.Handler: each event that matters
// records a hint and calls wake (the loop's NotifyApply); the repair
// happens in Apply on the loop goroutine. Relevant: a link event for an
// overlay device, its parent or another owned interface (deleted, down,
// MTU or MAC changed); a routelet-protocol route the manager wants deleted
// from an owned interface (the echo of its own deletes is not); a
// neighbour or FDB change on a VXLAN device that leaves an entry other
// than the manager wrote or is about to write (the echo of its own writes
// is not). Lost events (Rescan) queue the full device check.
func (m *Manager) Events(wake func()) netwatch.Handler { return events{m, wake} }

type events struct {
	m    *Manager
	wake func()
}

// OnLink implements netwatch.Handler.
func (e events) OnLink(ev netwatch.LinkEvent) {
	if e.m.onLink(ev.Name) {
		e.wake()
	}
}

// OnRoute implements netwatch.Handler. The deletion of a route the
// manager does not want (the echo of its own delete when a peer's block
// moves or goes) leaves the kernel as wanted: no re-read of the interface.
func (e events) OnRoute(ev netwatch.RouteEvent) {
	if !e.m.owns(ev.Iface) {
		return
	}
	if ev.Deleted {
		if !e.m.drifted(ev.Iface, ev.Dst) {
			return
		}
	}
	e.m.markIface(ev.Iface)
	e.wake()
}

// OnNeigh implements netwatch.Handler.
func (e events) OnNeigh(ev netwatch.NeighEvent) {
	if e.m.onNeigh(ev) {
		e.wake()
	}
}

// Rescan implements netwatch.Handler.
func (e events) Rescan() {
	e.m.QueueCheck()
	e.wake()
}
