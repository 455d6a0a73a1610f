package wgmgr

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/wireguard"
)

// Snapshot implements inspect.Snapshotter: the wireguard section (the
// device as last read, the peers as wanted next to what the device
// holds), and per family the device's routes and the device itself as
// one more overlay family's interface (added to the overlay's family of
// the version, which the overlay manager's Snapshot made first), so that
// the route tables and every peer's row show the routes into it. The
// wanted values are those of the last OnNodes.
func (m *Manager) Snapshot(d *inspect.Desired) {
	st := m.dev.Status()
	now := m.cfg.Now()
	wg := &statusapi.WireGuard{
		Implementation: st.Impl, Device: m.cfg.Device, PublicKey: m.applied.String(), Port: m.cfg.Port, MTU: st.MTU,
		Up: st.Up, Error: cmp.Or(m.dev.NotReady(), st.LastError, m.keyProblem),
		Peers: []statusapi.WireGuardPeer{}, PeersWithoutKey: slices.Clone(m.noKey),
	}
	if st.Port != 0 {
		wg.Port = st.Port
	}
	if wg.MTU == 0 {
		wg.MTU = m.cfg.MTU
	}
	have := map[wgtypes.Key]wireguard.PeerStatus{}
	for _, p := range st.Peers {
		have[p.PublicKey] = p
	}
	for _, p := range m.peers {
		row := statusapi.WireGuardPeer{Node: p.node, PublicKey: p.PublicKey.String(), AllowedIPs: prefixStrings(p.AllowedIPs)}
		if p.Endpoint.IsValid() {
			row.Endpoint = p.Endpoint.String()
		}
		if h, ok := have[p.PublicKey]; ok {
			row.Configured = h.Endpoint == p.Endpoint && samePrefixes(h.AllowedIPs, p.AllowedIPs)
			row.RxBytes, row.TxBytes = h.RxBytes, h.TxBytes
			if !h.LastHandshake.IsZero() {
				row.LatestHandshake = h.LastHandshake.UTC()
				age := int64(now.Sub(h.LastHandshake).Seconds())
				row.HandshakeAgeSeconds = &age
			}
		}
		wg.Peers = append(wg.Peers, row)
	}
	d.WireGuard = wg

	kind := "wireguard"
	if st.Impl == "userspace" {
		kind = "tun"
	}
	for _, v := range m.routes.Families() {
		i := slices.IndexFunc(d.Overlay, func(o inspect.OverlayFamily) bool { return o.Version == v })
		if i < 0 {
			d.Overlay = append(d.Overlay, inspect.OverlayFamily{Version: v})
			i = len(d.Overlay) - 1
		}
		of := &d.Overlay[i]
		if of.Routes == nil {
			of.Routes = map[string][]routes.Target{}
		}
		of.Routes[m.cfg.Device] = slices.Collect(maps.Values(m.routes.Routes(v)))
		slices.SortFunc(of.Routes[m.cfg.Device], func(a, b routes.Target) int { return a.CIDR.Compare(b.CIDR) })
		of.Devices = append(of.Devices, inspect.DeviceWant{Name: m.cfg.Device, Kind: kind, MTU: m.cfg.MTU})
		for _, p := range m.problems {
			if !slices.Contains(of.Problems, p) {
				of.Problems = append(of.Problems, p)
			}
		}
		if v == 4 {
			for _, n := range m.noKey {
				of.Problems = append(of.Problems, "peer "+n+": no WireGuard key: traffic to its pods is dropped")
			}
		}
	}
	slices.SortFunc(d.Overlay, func(a, b inspect.OverlayFamily) int { return a.Version - b.Version })
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// samePrefixes reports whether a and b hold the same prefixes, in any order.
func samePrefixes(a, b []netip.Prefix) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, netip.Prefix.Compare)
	slices.SortFunc(y, netip.Prefix.Compare)
	return slices.Equal(x, y)
}

// Register adds the manager's metrics to reg: routelet_wireguard_peers,
// routelet_wireguard_handshake_age_seconds{peer} and
// routelet_wireguard_implementation{impl}, read at scrape time from the
// device's status as the last Apply read it.
func (m *Manager) Register(reg prometheus.Registerer) error { return reg.Register(collector{m}) }

var (
	descPeers = prometheus.NewDesc("routelet_wireguard_peers",
		"WireGuard peers the device holds (peers with a valid public key).", nil, nil)
	descHandshake = prometheus.NewDesc("routelet_wireguard_handshake_age_seconds",
		"Seconds since the last completed handshake with each WireGuard peer (node name); absent before the first.", []string{"peer"}, nil)
	descImpl = prometheus.NewDesc("routelet_wireguard_implementation",
		"1 for the WireGuard implementation in use: kernel or userspace.", []string{"impl"}, nil)
)

type collector struct{ m *Manager }

// Describe implements prometheus.Collector.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPeers
	ch <- descHandshake
	ch <- descImpl
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	// The device as it is now (a read of its link and configuration; the
	// last one while an Apply holds the device), not as the last pass saw
	// it: no pass has to read the device for the metrics' sake.
	st := m.dev.Status()
	m.mu.Lock()
	names := m.names
	m.mu.Unlock()
	now := m.cfg.Now()
	ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(len(st.Peers)))
	for _, p := range st.Peers {
		if p.LastHandshake.IsZero() {
			continue
		}
		name := names[p.PublicKey]
		if name == "" {
			name = p.PublicKey.String()
		}
		ch <- prometheus.MustNewConstMetric(descHandshake, prometheus.GaugeValue, now.Sub(p.LastHandshake).Seconds(), name)
	}
	if st.Impl != "" {
		ch <- prometheus.MustNewConstMetric(descImpl, prometheus.GaugeValue, 1, st.Impl)
	}
}
