package bgpmgr

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/routes"
)

// Snapshot implements inspect.Snapshotter: the bgp section (the sessions
// as the speaker holds them now, the announced prefixes, the learned
// routes accepted and refused) and, when programming, the learned routes
// wanted per family (the tables bgp-ipv4 and bgp-ipv6).
func (m *Manager) Snapshot(d *inspect.Desired) {
	d.BGP = &inspect.BGPWant{Status: m.Status(), Protocol: m.cfg.RouteProtocol}
	for _, v := range m.routes.Families() {
		ts := slices.Collect(maps.Values(m.routes.Routes(v)))
		slices.SortFunc(ts, func(a, b routes.Target) int { return a.CIDR.Compare(b.CIDR) })
		d.BGP.Families = append(d.BGP.Families, inspect.BGPFamily{Version: v, Routes: map[string][]routes.Target{m.cfg.Iface: ts}})
	}
}

// Status is the bgp section of the state endpoint: the sessions are read
// from the speaker now, the rest is what the last Apply decided.
func (m *Manager) Status() statusapi.BGP {
	st := statusapi.BGP{
		ASN: m.cfg.ASN, Programmed: m.cfg.Program, Converged: m.converged,
		Peers: []statusapi.BGPPeer{}, Announced: []string{}, Learned: len(m.learned), Accepted: m.accepted,
		Error: strings.Join(nonEmpty(m.spErr, ownError(m.ownErr)), "; "),
	}
	if m.cfg.RouterID.IsValid() {
		st.RouterID = m.cfg.RouterID.String()
	}
	for _, a := range m.adopted {
		st.Adopted += len(a)
	}
	for _, b := range m.cfg.LocalBlocks {
		st.Announced = append(st.Announced, b.Masked().String())
	}
	rows := map[netip.Addr]statusapi.BGPPeer{}
	for _, s := range m.sp.Peers() {
		rows[s.Address] = statusapi.BGPPeer{
			Address: s.Address.String(), Port: int(s.Port), ASN: s.ASN, Description: s.Description, RouteReflector: s.RouteReflector,
			State: s.State, Since: s.Since.UTC(), Received: s.Received, Accepted: s.Accepted, Advertised: s.Advertised,
			EndOfRIB: s.EndOfRIB, LastError: s.LastError,
		}
	}
	// Sessions wanted that the speaker does not hold (yet): set by the
	// next Apply, or its SetPeers failed.
	for _, p := range m.want {
		if _, ok := rows[p.Address]; !ok {
			rows[p.Address] = statusapi.BGPPeer{Address: p.Address.String(), Port: int(p.Port), ASN: p.ASN,
				Description: p.Description, RouteReflector: p.RouteReflector, State: "not configured"}
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(rows), netip.Addr.Compare) {
		st.Peers = append(st.Peers, rows[a])
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.total) > 0 {
		st.RefusedTotal = maps.Clone(m.total)
	}
	st.RefusedNow = len(m.refused)
	rs := slices.Collect(maps.Values(m.refused))
	slices.SortFunc(rs, func(a, b refusal) int {
		return cmp.Or(b.since.Compare(a.since), a.Prefix.Masked().Compare(b.Prefix.Masked()))
	})
	for _, r := range rs[:min(len(rs), statusapi.MaxBGPRefused)] {
		row := statusapi.BGPRefusal{Prefix: r.Prefix.String(), Peer: addrString(r.Peer), Reason: r.reason, Detail: r.detail, Since: r.since.UTC()}
		row.NextHop = addrString(r.NextHop)
		st.Refused = append(st.Refused, row)
	}
	return st
}

// ownError is the per-node peers' read error as the status says it.
func ownError(err string) string {
	if err == "" {
		return ""
	}
	return "this node's BGP peers: " + err
}

func nonEmpty(ss ...string) []string {
	return slices.DeleteFunc(ss, func(s string) bool { return s == "" })
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// Register adds the manager's metrics to reg:
// routelet_bgp_session_up{peer}, routelet_bgp_prefixes_received{peer} and
// routelet_bgp_prefixes_advertised{peer}, read from the speaker at scrape
// time, and routelet_bgp_refused_total{reason}.
func (m *Manager) Register(reg prometheus.Registerer) error { return reg.Register(collector{m}) }

var (
	descUp = prometheus.NewDesc("routelet_bgp_session_up",
		"1 when the BGP session with the peer (its address) is established, else 0.", []string{"peer"}, nil)
	descReceived = prometheus.NewDesc("routelet_bgp_prefixes_received",
		"Prefixes received from each BGP peer (its address).", []string{"peer"}, nil)
	descAdvertised = prometheus.NewDesc("routelet_bgp_prefixes_advertised",
		"Prefixes advertised to each BGP peer (its address).", []string{"peer"}, nil)
	descRefused = prometheus.NewDesc("routelet_bgp_refused_total",
		"Learned BGP routes refused since the daemon started, by reason.", []string{"reason"}, nil)
)

type collector struct{ m *Manager }

// Describe implements prometheus.Collector.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUp
	ch <- descReceived
	ch <- descAdvertised
	ch <- descRefused
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.m.sp.Peers() {
		peer := s.Address.String()
		up := 0.0
		if s.State == "established" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, peer)
		ch <- prometheus.MustNewConstMetric(descReceived, prometheus.GaugeValue, float64(s.Received), peer)
		ch <- prometheus.MustNewConstMetric(descAdvertised, prometheus.GaugeValue, float64(s.Advertised), peer)
	}
	c.m.mu.Lock()
	total := maps.Clone(c.m.total)
	c.m.mu.Unlock()
	for _, r := range Reasons {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(total[r]), r)
	}
}
