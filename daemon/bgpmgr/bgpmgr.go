package bgpmgr

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/internal/routeset"
	"github.com/routelet/routelet/pkg/bgp"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
)

// Speaker is what the manager needs of *bgp.Speaker. SetPeers and
// SetAnnounced apply by difference; Learned and Peers read the speaker's
// tables as they are now (and are safe for concurrent use: the metrics
// read Peers when scraped).
type Speaker interface {
	SetPeers([]bgp.Peer) error
	SetAnnounced(prefixes []netip.Prefix, nextHop4, nextHop6 netip.Addr) error
	Learned() []bgp.Route
	Peers() []bgp.PeerStatus
	Close() error
}

// RouteTable is the part of *routes.RouteTable the manager drives.
type RouteTable interface {
	RouteUpdate(iface string, t routes.Target)
	RouteRemove(iface string, cidr netip.Prefix)
	MarkDirty(iface string)
	Apply() error
}

var _ RouteTable = (*routes.RouteTable)(nil)

// NewTable makes the RouteTable of one family (4 or 6) that owns only the
// BGP route protocol's routes on the uplink: routeletd passes a function
// around routes.New{Protocol: bgp-route-protocol, InterfaceNames:
// [uplink]}.
type NewTable func(ipVersion int) (RouteTable, error)

// Defaults of Config.
const (
	// DefaultCheckPeriod is how often the loop queues the check: the
	// speaker's sessions and learned routes are read again while they are
	// not in sync (not converged, a session not established).
	DefaultCheckPeriod = time.Second
	// DefaultRouteCheckPeriod is how often the uplink's learned routes are
	// read back from the kernel and the next hops resolved again, and how
	// often the speaker is read when nothing hinted a change.
	DefaultRouteCheckPeriod = 10 * time.Second
	// DefaultRestartTime is how long the routes of an earlier run are
	// kept at most, waiting for the sessions to converge.
	DefaultRestartTime = 120 * time.Second
	// DefaultRouteProtocol is the learned routes' kernel route protocol:
	// 186, "bgp" in iproute2's rt_protos.
	DefaultRouteProtocol = 186
)

// Resolver returns how the kernel reaches addr: the gateway (invalid when
// addr is on a connected subnet) and the output interface.
type Resolver func(addr netip.Addr) (gateway netip.Addr, iface string, err error)

// KernelRoutes returns the main table's routes of family v (4 or 6)
// carrying protocol on iface, as targets.
type KernelRoutes func(v, protocol int, iface string) ([]routes.Target, error)

// Config says what the node's BGP side looks like. Zero values take the
// defaults noted.
type Config struct {
	NodeName           string
	HostIPv4, HostIPv6 netip.Addr // the node's host IPs: session sources, announced next hops
	// Iface is the uplink learned routes go out by.
	Iface string
	// Subnets are the uplink's connected subnets: a next hop inside one
	// is used as it is; any other is resolved (Resolve), and one the
	// kernel reaches on the uplink without a gateway is used as it is
	// too. Empty: every next hop is resolved.
	Subnets []netip.Prefix
	// LocalAddrs are the node's own addresses: a learned route holding
	// one, or with one as its next hop, is refused.
	LocalAddrs []netip.Addr
	ASN        uint32
	RouterID   netip.Addr // shown in status
	// NodeMesh: a session to every node record with an AS.
	NodeMesh bool
	// Peers are the global peers (bgp-peer), passwords read.
	Peers []bgp.Peer
	// Pools are the prefixes learned routes may fall in; empty: every
	// known node block, this node's included.
	Pools       []netip.Prefix
	LocalBlocks []netip.Prefix // announced; learned routes overlapping one are refused
	// Program: accepted learned routes are programmed (encapsulation
	// none, no encryption); false: announce only.
	Program bool
	// OwnPeers reads this node's per-node peers (the datastore's
	// NodeBGPPeers, see OwnPeers); nil: none. Called at every OnNodes.
	// With an error, the peers it returns are used when there are any
	// (those that parsed; the error names the others), else the last ones
	// read are kept; either way the error shows in the status.
	OwnPeers func() ([]peers.BGPPeer, error)
	// GracefulRestart: an earlier run's learned routes are kept until the
	// sessions converge, at most RestartTime (bgp-restart-time) after New.
	GracefulRestart bool
	RestartTime     time.Duration // default DefaultRestartTime
	RouteProtocol   int           // default DefaultRouteProtocol
	MaxPrefixes     int           // per peer and family; 0 no limit
	// CheckPeriod is the loop's check period (default and at most
	// DefaultCheckPeriod); RouteCheckPeriod see DefaultRouteCheckPeriod.
	CheckPeriod      time.Duration
	RouteCheckPeriod time.Duration
	// Changes carries the speaker's OnChange hints (nil: only the checks
	// read the speaker).
	Changes *Changes
	// Resolve and Existing are the kernel seams: the route to a next hop
	// (default: a netlink route get) and the learned routes an earlier
	// run left (default: a netlink route dump).
	Resolve  Resolver
	Existing KernelRoutes
	// OnDrift, when set, is called (from the event goroutine) when a
	// learned route the manager wants was deleted behind its back.
	OnDrift func(object, detail string)
	Logger  *slog.Logger
	Now     func() time.Time
}

// node is what the checks remember of a node record.
type node struct {
	name   string
	blocks []netip.Prefix
}

// resolved is one next hop's resolution.
type resolved struct {
	gw  netip.Addr // the gateway to use
	err string     // why it is unreachable, "" when it is not
}

// Manager is the BGP agent.Manager. OnNodes, Apply and Snapshot run on
// the loop goroutine; the event handler, the speaker's hints and the
// metrics only read under mu or record hints.
type Manager struct {
	cfg Config
	log *slog.Logger
	sp  Speaker
	// routes are the learned routes on the uplink, one route table per
	// family of the node (see New); the event handler looks deletions up.
	routes *routeset.Set
	start  time.Time

	// Loop-owned.
	// adopted are, per family with a table, the routes an earlier run
	// left, kept until converged.
	adopted     map[int]map[netip.Prefix]routes.Target
	want        []bgp.Peer            // the sessions wanted, by address
	applied     []bgp.Peer            // the sessions last set on the speaker (nil: never)
	nodesSeen   bool                  // OnNodes was called: the mesh is known
	local       map[netip.Addr]bool   // this node's addresses
	announced   bool                  // SetAnnounced succeeded
	own         []peers.BGPPeer       // the per-node peers last read
	ownErr      string                // why they cannot be read now
	spErr       string                // the speaker's last error
	mesh        map[netip.Addr]string // mesh session address → node
	nodes       map[string]node
	hostIPs     []netip.Addr // every node's host IP and ours, sorted
	blockOwner  map[netip.Prefix]string
	blockLens   [2][]int // the prefix lengths of blockOwner's keys per family (IPv4, IPv6), sorted
	converged   bool
	poll        bool // read the speaker in the next Apply
	recompute   bool // the checks' inputs changed
	lastPoll    time.Time
	lastCheck   time.Time
	learned     []bgp.Route
	statuses    []bgp.PeerStatus
	resolveMemo map[netip.Addr]resolved
	accepted    int

	// mu guards the refusals.
	mu      sync.Mutex
	refused map[pathKey]refusal
	total   map[string]uint64
}

// The loop's capabilities this manager has.
var (
	_ agent.Manager = (*Manager)(nil)
	_ agent.Checker = (*Manager)(nil)
)

// New makes the manager on the speaker sp and, when Program, one route
// table per family of the node (a host IP or a block of it). With
// graceful restart the learned routes an earlier run left are read and
// kept until the sessions converge; without, or announcing only, they are
// removed by the first Apply. The manager owns sp from then on (Close).
func New(cfg Config, sp Speaker, newTable NewTable) (*Manager, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.RestartTime = cmp.Or(max(cfg.RestartTime, 0), DefaultRestartTime)
	cfg.RouteProtocol = cmp.Or(cfg.RouteProtocol, DefaultRouteProtocol)
	cfg.CheckPeriod = min(cmp.Or(max(cfg.CheckPeriod, 0), DefaultCheckPeriod), DefaultCheckPeriod)
	cfg.RouteCheckPeriod = cmp.Or(max(cfg.RouteCheckPeriod, 0), DefaultRouteCheckPeriod)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Changes == nil {
		cfg.Changes = &Changes{}
	}
	if cfg.Resolve == nil {
		cfg.Resolve = NetlinkResolve
	}
	if cfg.Existing == nil {
		cfg.Existing = NetlinkRoutes
	}
	if sp == nil {
		return nil, errors.New("bgp: no speaker")
	}
	if cfg.Iface == "" && (cfg.Program || newTable != nil) {
		return nil, errors.New("bgp: no uplink for the learned routes")
	}
	if cfg.RouteProtocol < 1 || cfg.RouteProtocol > 255 {
		return nil, fmt.Errorf("bgp: route protocol %d is not in 1-255", cfg.RouteProtocol)
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger.With("component", "bgp"), sp: sp, start: cfg.Now(),
		routes:  routeset.New(routeset.Config{Iface: cfg.Iface, Owner: "bgp"}),
		adopted: map[int]map[netip.Prefix]routes.Target{},
		mesh:    map[netip.Addr]string{}, nodes: map[string]node{}, blockOwner: map[netip.Prefix]string{},
		resolveMemo: map[netip.Addr]resolved{}, refused: map[pathKey]refusal{}, total: map[string]uint64{},
		poll: true, recompute: true,
	}
	m.local = map[netip.Addr]bool{}
	for _, a := range m.ownHostIPs() {
		m.local[a] = true
	}
	m.hostIPs = m.sortedHostIPs()
	// The global peers are known from the start: their sessions come up
	// while the datastore is not read yet.
	m.want = m.sessions(nil)
	// Announcing only, with no way to program: nothing was ours before
	// either, and nothing is adopted.
	m.converged = !cfg.Program || !cfg.GracefulRestart
	if newTable != nil {
		for _, v := range []int{4, 6} {
			host := cfg.HostIPv4
			if v == 6 {
				host = cfg.HostIPv6
			}
			if !host.IsValid() && !slices.ContainsFunc(cfg.LocalBlocks, func(b netip.Prefix) bool { return b.Addr().Is4() == (v == 4) }) {
				continue
			}
			rt, err := newTable(v)
			if err == nil {
				err = m.routes.Add(v, rt)
			}
			if err != nil {
				m.routes.Close()
				return nil, fmt.Errorf("bgp IPv%d: route table: %w", v, err)
			}
			adopted := map[netip.Prefix]routes.Target{}
			m.adopted[v] = adopted
			if m.converged {
				continue
			}
			have, err := cfg.Existing(v, cfg.RouteProtocol, cfg.Iface)
			if err != nil {
				m.log.Warn("cannot read the learned routes an earlier run left: they are replaced by what the peers announce",
					"family", fmt.Sprintf("IPv%d", v), "err", err)
				continue
			}
			for _, t := range have {
				t.CIDR = t.CIDR.Masked()
				adopted[t.CIDR] = t
			}
			if len(adopted) > 0 {
				m.log.Info("keeping the learned routes an earlier run left until the sessions converge",
					"family", fmt.Sprintf("IPv%d", v), "routes", len(adopted), "restartTime", cfg.RestartTime)
			}
		}
	}
	// The adopted routes are wanted from the start: the first Apply
	// (which re-reads the uplink's routes) keeps them.
	m.updateRoutes()
	m.log.Info("bgp", "asn", cfg.ASN, "routerID", cfg.RouterID, "mesh", cfg.NodeMesh, "peers", len(cfg.Peers),
		"program", cfg.Program, "uplink", cfg.Iface, "pools", cfg.Pools, "gracefulRestart", cfg.GracefulRestart)
	return m, nil
}

// OnWorkloads implements agent.Manager: BGP does not depend on the
// workloads.
func (m *Manager) OnWorkloads(agent.Served) {}

// OnNodes implements agent.Manager (memory only): the sessions (the
// global peers, this node's own peers read again, a mesh session per
// family to every node with an AS) and what the checks need of the nodes
// (blocks, host IPs). For the same address the global peer wins over the
// node's own, and both over the mesh.
func (m *Manager) OnNodes(nodes []peers.NodeInfo) {
	if m.cfg.OwnPeers != nil {
		own, err := m.cfg.OwnPeers()
		switch {
		case err != nil:
			if msg := err.Error(); msg != m.ownErr {
				if own == nil {
					m.log.Warn("cannot read this node's BGP peers: keeping the last ones read", "err", err)
				} else {
					m.log.Warn("some of this node's BGP peers are refused", "err", err, "used", len(own))
				}
				m.ownErr = msg
			}
			if own != nil {
				m.own = slices.Clone(own)
			}
		default:
			if m.ownErr != "" {
				m.log.Info("this node's BGP peers are readable again")
			}
			m.own, m.ownErr = slices.Clone(own), ""
		}
	}
	m.nodes = make(map[string]node, len(nodes))
	m.blockOwner = map[netip.Prefix]string{}
	for _, n := range nodes {
		if n.Name == m.cfg.NodeName {
			continue
		}
		m.nodes[n.Name] = node{name: n.Name, blocks: slices.Clone(n.Blocks)}
		for _, b := range n.Blocks {
			if _, ok := m.blockOwner[b.Masked()]; !ok {
				m.blockOwner[b.Masked()] = n.Name
			}
		}
	}
	m.blockLens = [2][]int{}
	for b := range m.blockOwner {
		i := 0
		if b.Addr().Is6() {
			i = 1
		}
		if !slices.Contains(m.blockLens[i], b.Bits()) {
			m.blockLens[i] = append(m.blockLens[i], b.Bits())
		}
	}
	slices.Sort(m.blockLens[0])
	slices.Sort(m.blockLens[1])
	hosts := m.ownHostIPs()
	for _, n := range nodes {
		hosts = append(hosts, n.HostIPs()...)
	}
	slices.SortFunc(hosts, netip.Addr.Compare)
	m.hostIPs = slices.Compact(hosts)
	m.want = m.sessions(nodes)
	m.nodesSeen = true
	m.recompute = true
}

// sessions returns the sessions wanted with nodes (sorted by address),
// and records which are the mesh's.
func (m *Manager) sessions(nodes []peers.NodeInfo) []bgp.Peer {
	m.mesh = map[netip.Addr]string{}
	seen := map[netip.Addr]bool{}
	var want []bgp.Peer
	add := func(p bgp.Peer) bool {
		if !p.Address.IsValid() || seen[p.Address] || m.isLocal(p.Address) {
			return false
		}
		seen[p.Address] = true
		if p.MaxPrefixes == 0 {
			p.MaxPrefixes = m.cfg.MaxPrefixes
		}
		want = append(want, p)
		return true
	}
	for _, p := range m.cfg.Peers {
		p.Description = cmp.Or(p.Description, "global")
		add(p)
	}
	for _, p := range m.own {
		// A per-node peer comes from a record: it never names a password
		// file (peers.ParseBGPPeer), and none is read here.
		add(bgp.Peer{Address: p.Address, ASN: p.ASN, Port: p.Port, RouteReflector: p.RouteReflector, Description: "node"})
	}
	if m.cfg.NodeMesh {
		for _, n := range nodes {
			if n.BGP.ASN == 0 || n.Name == m.cfg.NodeName {
				continue
			}
			for _, pair := range [][2]netip.Addr{{m.cfg.HostIPv4, n.IPv4.HostIP}, {m.cfg.HostIPv6, n.IPv6.HostIP}} {
				if !pair[0].IsValid() || !pair[1].IsValid() {
					continue
				}
				if add(bgp.Peer{Address: pair[1], ASN: n.BGP.ASN, Description: "mesh " + n.Name}) {
					m.mesh[pair[1]] = n.Name
				}
			}
		}
	}
	slices.SortFunc(want, func(a, b bgp.Peer) int { return a.Address.Compare(b.Address) })
	return want
}

// ownHostIPs returns this node's host IPs and local addresses.
func (m *Manager) ownHostIPs() []netip.Addr {
	var out []netip.Addr
	for _, a := range append([]netip.Addr{m.cfg.HostIPv4, m.cfg.HostIPv6}, m.cfg.LocalAddrs...) {
		if a.IsValid() {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// sortedHostIPs is ownHostIPs, sorted and without repeats.
func (m *Manager) sortedHostIPs() []netip.Addr {
	out := m.ownHostIPs()
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// isLocal reports whether a is one of this node's addresses.
func (m *Manager) isLocal(a netip.Addr) bool { return m.local[a.Unmap()] }

// Apply implements agent.Manager: the sessions and the announced
// prefixes are set on the speaker when they changed; then, when
// programming, the learned routes (read again when a hint or a check
// asked) are checked and handed to the route tables, which are applied.
// Errors are joined; what failed is retried by the next Apply.
func (m *Manager) Apply() error {
	var errs []error
	if m.applied == nil || !slices.EqualFunc(m.applied, m.want, peerEqual) {
		want := slices.Clone(m.want)
		if want == nil {
			want = []bgp.Peer{}
		}
		if err := m.sp.SetPeers(want); err != nil {
			errs = append(errs, fmt.Errorf("bgp: set peers: %w", err))
		} else {
			m.applied, m.poll = want, true
		}
	}
	if !m.announced {
		if err := m.sp.SetAnnounced(m.cfg.LocalBlocks, m.cfg.HostIPv4, m.cfg.HostIPv6); err != nil {
			errs = append(errs, fmt.Errorf("bgp: announce %v: %w", m.cfg.LocalBlocks, err))
		} else {
			m.announced = true
		}
	}
	if len(errs) > 0 {
		m.spErr = errors.Join(errs...).Error()
	} else {
		m.spErr = ""
	}
	now := m.cfg.Now()
	if now.Sub(m.lastCheck) >= m.cfg.RouteCheckPeriod {
		m.lastCheck = now
		m.routes.MarkDirty()
		clear(m.resolveMemo)
		m.recompute = true
	}
	if changed := m.cfg.Changes.take(); changed || m.poll || now.Sub(m.lastPoll) >= m.cfg.RouteCheckPeriod {
		m.poll, m.lastPoll = false, now
		m.learned = m.sp.Learned()
		m.statuses = m.sp.Peers()
		m.recompute = true
	}
	if !m.converged && m.convergedNow(now) {
		m.recompute = true
	}
	if m.recompute {
		m.recompute = false
		m.updateRoutes()
	}
	if err := m.routes.Apply(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// peerEqual compares two sessions as the speaker keys and configures them.
func peerEqual(a, b bgp.Peer) bool { return a == b }

// convergedNow decides whether the sessions converged: every session
// wanted (with the nodes known: after the first OnNodes) is set on the
// speaker, established and sent End-of-RIB, or the restart time since New
// passed. Once converged, the adopted routes are dropped.
func (m *Manager) convergedNow(now time.Time) bool {
	why := ""
	switch {
	case now.Sub(m.start) >= m.cfg.RestartTime:
		why = "restart time passed"
	case !m.nodesSeen || m.applied == nil || !slices.EqualFunc(m.applied, m.want, peerEqual):
		return false
	default:
		st := make(map[netip.Addr]bgp.PeerStatus, len(m.statuses))
		for _, s := range m.statuses {
			st[s.Address] = s
		}
		for _, p := range m.applied {
			s, ok := st[p.Address]
			if !ok || s.State != "established" || !s.EndOfRIB {
				return false
			}
		}
		why = "every session sent End-of-RIB"
	}
	m.converged = true
	n := 0
	for v, a := range m.adopted {
		n += len(a)
		m.adopted[v] = map[netip.Prefix]routes.Target{}
	}
	m.log.Info("bgp converged: only learned routes are programmed now", "why", why, "droppedAdopted", n)
	return true
}

// QueueCheck implements agent.Checker: the next Apply reads the speaker's
// sessions and learned routes again while they are not in sync (not
// converged, a session not established); every RouteCheckPeriod it does
// anyway (Apply), and reads the uplink's routes back.
func (m *Manager) QueueCheck() {
	if !m.converged {
		m.poll = true
		return
	}
	for _, s := range m.statuses {
		if s.State != "established" {
			m.poll = true
			return
		}
	}
	if len(m.statuses) != len(m.applied) {
		m.poll = true
	}
}

// CheckPeriod implements agent.Checker.
func (m *Manager) CheckPeriod() time.Duration { return m.cfg.CheckPeriod }

// updateRoutes checks the learned routes and hands every family's table
// the accepted ones (and, until converged, the adopted ones no learned
// route replaces).
func (m *Manager) updateRoutes() {
	n := len(m.learned)
	want := map[int]map[netip.Prefix]routes.Target{4: make(map[netip.Prefix]routes.Target, n), 6: {}}
	refused := map[pathKey]refusal{}
	learnedAt := make(map[netip.Prefix]bool, n)
	accepted := 0
	now := m.cfg.Now()
	if m.cfg.Program {
		// The speaker lists every path to a prefix, best first: the
		// first that passes the checks is programmed, so a peer whose
		// path the speaker prefers (a shorter AS path) cannot take a
		// prefix away from its owner by announcing it.
		for _, r := range m.learned {
			p := r.Prefix.Masked()
			learnedAt[p] = true
			if _, ok := want[famOf(p)][p]; ok {
				continue // a better path was accepted
			}
			t, reason, detail := m.check(r)
			if reason == "" && !m.routes.Has(famOf(p)) {
				reason, detail = reasonUnreachable, fmt.Sprintf("no IPv%d route table", famOf(p))
			}
			if reason != "" {
				refused[pathKey{p, r.Peer}] = refusal{Route: r, reason: reason, detail: detail}
				continue
			}
			want[famOf(p)][p] = t
			accepted++
		}
	}
	for v, a := range m.adopted {
		for p, t := range a {
			if !learnedAt[p] {
				want[v][p] = t
			}
		}
	}
	m.accepted = accepted
	m.mu.Lock()
	logged := 0
	for _, k := range slices.SortedFunc(maps.Keys(refused), pathKey.compare) {
		r := refused[k]
		old, ok := m.refused[k]
		if ok && old.reason == r.reason && old.NextHop == r.NextHop {
			r.since = old.since
		} else {
			r.since = now
			m.total[r.reason]++
			if logged++; logged <= maxLogged {
				m.log.Warn("refused a learned route", "prefix", k.prefix, "peer", r.Peer, "nextHop", r.NextHop, "reason", r.reason, "detail", r.detail)
			}
		}
		refused[k] = r
	}
	if logged > maxLogged {
		m.log.Warn("refused more learned routes (see routeletd status)", "more", logged-maxLogged)
	}
	m.refused = refused
	m.mu.Unlock()
	for _, v := range m.routes.Families() {
		m.routes.Set(v, want[v])
	}
}

// pathKey names one learned path: its prefix and the session it came
// from.
type pathKey struct {
	prefix netip.Prefix
	peer   netip.Addr
}

func (k pathKey) compare(o pathKey) int {
	if c := k.prefix.Compare(o.prefix); c != 0 {
		return c
	}
	return k.peer.Compare(o.peer)
}

// maxLogged bounds the refusals one pass logs one by one.
const maxLogged = 10

func famOf(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

// Close stops the speaker without notifying the peers (bgp.Speaker.Close:
// peers doing graceful restart keep this node's routes while it
// restarts). The route tables are the caller's to close; the kernel's
// routes stay for the next run to adopt.
func (m *Manager) Close() error { return m.sp.Close() }

// OwnPeers is a Config.OwnPeers reading this node's per-node peer specs
// with read (the datastore's NodeBGPPeers.OwnBGPPeers) and parsing each
// with parse (peers.ParseBGPPeer of a record: no password file). A read
// error returns no peers (the last ones are kept); a refused spec is left
// out and named in the error, the others are used.
func OwnPeers(read func() ([]string, error), parse func(spec string) (peers.BGPPeer, error)) func() ([]peers.BGPPeer, error) {
	return func() ([]peers.BGPPeer, error) {
		specs, err := read()
		if err != nil {
			return nil, fmt.Errorf("cannot read them (the last ones read are kept): %w", err)
		}
		out := []peers.BGPPeer{}
		var errs []error
		for _, s := range specs {
			p, err := parse(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("peer %q refused: %w", s, err))
				continue
			}
			p.PasswordFile = "" // a record never makes the daemon read a file
			out = append(out, p)
		}
		return out, errors.Join(errs...)
	}
}
