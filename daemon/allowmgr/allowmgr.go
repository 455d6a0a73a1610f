package allowmgr

import (
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/periods"
	"github.com/routelet/routelet/pkg/allowlist"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/peers"
)

// Allowlist is the part of *allowlist.Manager that Manager drives, all on
// the loop goroutine.
type Allowlist interface {
	SetConfig(cfg firewall.Config) error
	SetVXLANPeers(peers []netip.Prefix) error
	SetIPIPPeers(peers []netip.Prefix) error
	SetWireGuardPeers(peers []netip.Prefix) error
	SetPools(pools []netip.Prefix) error
	SetNATPools(pools []netip.Prefix) error
	Apply() error
	Check() (int, error)
	Stats() allowlist.Stats
}

var _ Allowlist = (*allowlist.Manager)(nil)

// Options configure a Manager.
type Options struct {
	// Rules says which rules are wanted (encapsulation, VXLAN port, devices,
	// interface prefix, NAT outgoing).
	Rules firewall.Config
	// ExternalNodeCIDRs may send VXLAN and IPIP although they are not
	// nodes (external-node-cidr); not WireGuard: only a node has a key.
	ExternalNodeCIDRs []netip.Prefix
	// LocalBlocks are this node's pod CIDRs: pools even before the node's
	// own record has been read.
	LocalBlocks []netip.Prefix
	// NATPools are the pod CIDRs NAT outgoing masquerades
	// (nat-outgoing-pool); empty: every pool.
	NATPools []netip.Prefix
	// CheckPeriod is how often the loop queues the check (re-read and
	// repair); default DefaultCheckPeriod.
	CheckPeriod time.Duration
	// OnRepair, when set, is called with the number of sets, chains and
	// jumps each check repaired (when it repaired any).
	OnRepair func(n int)
}

// DefaultCheckPeriod is how often routelet's sets and chains are re-read
// and repaired unless Options say otherwise (routeletd's
// allowlist-check-period).
const DefaultCheckPeriod = periods.AllowlistCheck

// Manager feeds an Allowlist from node records. Every method belongs to
// the loop goroutine (agent.Manager and agent.Checker).
type Manager struct {
	al   Allowlist
	opts Options
	log  *slog.Logger

	// What was last handed to al, to skip unchanged lists, and the
	// lists the next OnNodes builds in (al keeps copies of its own).
	// wgPeers is nil without WireGuard rules, peers itself without
	// external CIDRs, else its own list (and spareWG its spare).
	peers, pools, wgPeers           []netip.Prefix
	handed                          bool
	spareHosts, sparePools, spareWG []netip.Prefix

	applied   bool   // the first Apply ran: the desired members are known
	checkDue  bool   // QueueCheck was called: the next Apply checks
	lastError string // last check error logged, to log each distinct one once

	repairs     prometheus.Counter
	checkErrors prometheus.Counter
	checkTime   prometheus.Histogram
}

// New returns a Manager over al with opts.Rules already set.
func New(al Allowlist, opts Options, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.Default()
	}
	if opts.CheckPeriod <= 0 {
		opts.CheckPeriod = DefaultCheckPeriod
	}
	if err := al.SetConfig(opts.Rules); err != nil {
		return nil, err
	}
	if err := al.SetNATPools(opts.NATPools); err != nil {
		return nil, err
	}
	return &Manager{
		al: al, opts: opts, log: log,
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "routelet_allowlist_repairs_total",
			Help: "Sets, chains and jumps the periodic allowlist check found tampered with and repaired.",
		}),
		checkErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "routelet_allowlist_check_errors_total",
			Help: "Allowlist checks that failed (retried at the next check).",
		}),
		checkTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "routelet_allowlist_check_duration_seconds",
			Help:    "Duration of each allowlist check (re-read of every routelet set and chain).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}, nil
}

// Register adds the Manager's metrics to reg: check repairs, errors and
// durations, and the kernel calls the allowlist made.
func (m *Manager) Register(reg prometheus.Registerer) error {
	calls := func(name, help string, f func(allowlist.Stats) int) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(m.al.Stats())) })
	}
	for _, c := range []prometheus.Collector{
		m.repairs, m.checkErrors, m.checkTime,
		calls("routelet_allowlist_netlink_writes_total", "ipset netlink writes (create, destroy, add, del, swap, rename).",
			func(s allowlist.Stats) int { return s.NetlinkWrites }),
		calls("routelet_allowlist_netlink_reads_total", "ipset netlink dumps.",
			func(s allowlist.Stats) int { return s.NetlinkReads }),
		calls("routelet_allowlist_iptables_execs_total", "iptables executions, reads included.",
			func(s allowlist.Stats) int { return s.IptablesExecs }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// The loop's capabilities this manager has.
var (
	_ agent.Manager = (*Manager)(nil)
	_ agent.Checker = (*Manager)(nil)
)

// OnWorkloads implements agent.Manager: the allowlists do not depend on
// the workloads.
func (m *Manager) OnWorkloads(agent.Served) {}

// OnNodes derives the desired set members from the validated peers
// (memory only): their host IPs (and the external CIDRs) may send overlay
// traffic, their host IPs alone WireGuard, their blocks and ours are the
// pools. The peers were checked where their records entered the daemon
// (pkg/peers), so nothing is parsed here.
func (m *Manager) OnNodes(nodes []peers.NodeInfo) {
	hosts, pools := appendMembers(m.spareHosts[:0], m.sparePools[:0], nodes, m.opts.LocalBlocks, m.opts.ExternalNodeCIDRs)
	var wg []netip.Prefix
	ownWG := m.opts.Rules.WireGuard && len(m.opts.ExternalNodeCIDRs) > 0
	switch {
	case ownWG:
		wg = normalize(appendHosts(m.spareWG[:0], nodes))
	case m.opts.Rules.WireGuard:
		wg = hosts
	}
	if m.handed && slices.Equal(hosts, m.peers) && slices.Equal(pools, m.pools) && slices.Equal(wg, m.wgPeers) {
		m.spareHosts, m.sparePools = hosts, pools // a peer change that moved none allocates nothing
		if ownWG {
			m.spareWG = wg
		}
		return
	}
	// The setters only fail on prefixes normalize already dropped.
	for _, err := range []error{m.al.SetVXLANPeers(hosts), m.al.SetIPIPPeers(hosts), m.al.SetWireGuardPeers(wg), m.al.SetPools(pools)} {
		if err != nil {
			m.log.Error("allowlist: cannot set members", "err", err)
		}
	}
	m.spareHosts, m.sparePools = m.peers, m.pools
	if ownWG {
		m.spareWG = m.wgPeers
	}
	m.peers, m.pools, m.wgPeers, m.handed = hosts, pools, wg, true
	m.log.Debug("allowlist members", "peers", len(hosts), "pools", len(pools), "wireguardPeers", len(wg))
}

// Members derives the desired set members from validated peers: every
// peer's host IPs (as host prefixes) plus external may send overlay traffic
// (hosts); every peer's blocks plus local are the pod pools. Both are
// sorted, without duplicates or prefixes no set can hold.
func Members(nodes []peers.NodeInfo, local, external []netip.Prefix) (hosts, pools []netip.Prefix) {
	return appendMembers(nil, nil, nodes, local, external)
}

// appendMembers is Members building its lists in hosts and pools (empty,
// their arrays reused when large enough).
func appendMembers(hosts, pools []netip.Prefix, nodes []peers.NodeInfo, local, external []netip.Prefix) ([]netip.Prefix, []netip.Prefix) {
	if n := 2*len(nodes) + len(external); cap(hosts) < n {
		hosts = make([]netip.Prefix, 0, n)
	}
	if n := len(local) + len(nodes); cap(pools) < n {
		pools = make([]netip.Prefix, 0, n)
	}
	pools = append(pools, local...)
	for _, n := range nodes {
		pools = append(pools, n.Blocks...)
	}
	hosts = append(appendHosts(hosts, nodes), external...)
	return normalize(hosts), normalize(pools)
}

// appendHosts appends every peer's host IPs, as host prefixes, to hosts.
func appendHosts(hosts []netip.Prefix, nodes []peers.NodeInfo) []netip.Prefix {
	for _, n := range nodes {
		for _, a := range [2]netip.Addr{n.IPv4.HostIP, n.IPv6.HostIP} {
			if a.IsValid() {
				hosts = append(hosts, netip.PrefixFrom(a, a.BitLen()))
			}
		}
	}
	return hosts
}

// normalize sorts ps, drops duplicates and prefixes no set can hold (/0,
// IPv4-mapped IPv6).
func normalize(ps []netip.Prefix) []netip.Prefix {
	out := slices.DeleteFunc(ps, func(p netip.Prefix) bool {
		return !p.IsValid() || p.Bits() == 0 || p.Addr().Is4In6()
	})
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// Apply programs the sets and chains; what fails is retried by the loop's
// next Apply. When a check is queued it runs after that, in the same pass:
// its repairs are the loop's too, and its errors are logged and counted,
// not the pass's (the next check retries).
func (m *Manager) Apply() error {
	err := m.al.Apply()
	m.applied = true
	if m.checkDue {
		m.checkDue = false
		m.Check()
	}
	return err
}

// CheckPeriod implements agent.Checker: how often the loop queues a check.
func (m *Manager) CheckPeriod() time.Duration { return m.opts.CheckPeriod }

// QueueCheck implements agent.Checker: the next Apply re-reads every
// routelet set and chain and repairs what drifted.
func (m *Manager) QueueCheck() { m.checkDue = true }

// Check re-reads every routelet set and chain and repairs what drifted. It
// returns how many sets, chains or jumps were repaired; before the loop's
// first Apply it does nothing (the desired members are not known yet).
func (m *Manager) Check() (int, error) {
	if !m.applied {
		return 0, nil
	}
	start := time.Now()
	n, err := m.al.Check()
	m.checkTime.Observe(time.Since(start).Seconds())
	if n > 0 {
		m.repairs.Add(float64(n))
		m.log.Info("allowlist tampered with, repaired", "repairs", n)
		if m.opts.OnRepair != nil {
			m.opts.OnRepair(n)
		}
	}
	if err != nil {
		m.checkErrors.Inc()
		if msg := err.Error(); msg != m.lastError {
			m.lastError = msg
			m.log.Warn("allowlist check failed, will retry", "err", err, "retry_in", m.opts.CheckPeriod)
		}
		return n, err
	}
	if m.lastError != "" {
		m.lastError = ""
		m.log.Info("allowlist check succeeds again")
	}
	return n, nil
}
