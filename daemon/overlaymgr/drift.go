package overlaymgr

import (
	"net/netip"

	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

// wanted is what the last OnNodes wanted, per interface, in the form the
// event handler can look up: routed CIDRs, and on VXLAN devices the ARP
// entries' tunnel IPs ("neigh") and the FDB entries' host IPs ("fdb").
// Guarded by Manager.mu.
type wanted struct {
	routes map[string]map[netip.Prefix]bool
	l2     map[string]map[netip.Addr]string
}

// want records family f's routes and L2 entries for the event handler
// (loop goroutine).
func (m *Manager) want(f *family, ps []overlay.Peer, rs map[string][]routes.Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wanted.routes == nil {
		m.wanted = wanted{routes: map[string]map[netip.Prefix]bool{}, l2: map[string]map[netip.Addr]string{}}
	}
	for iface, ts := range rs {
		set := make(map[netip.Prefix]bool, len(ts))
		for _, t := range ts {
			set[t.CIDR.Masked()] = true
		}
		m.wanted.routes[iface] = set
	}
	if f.vxlan == nil {
		return
	}
	arp, fdb := overlay.L2Entries(f.v, ps)
	l2 := make(map[netip.Addr]string, len(arp)+len(fdb))
	for ip := range arp {
		l2[ip] = "neigh"
	}
	for _, ip := range fdb {
		l2[ip] = "fdb"
	}
	m.wanted.l2[f.vxlan.Device().Name] = l2
}

// drifted reports to OnDrift a deleted route (dst) or neighbour or FDB
// entry (ip) on iface that the manager still wants (event goroutine), and
// returns whether it was wanted. Deletions the manager made itself are of
// things it no longer wants.
func (m *Manager) drifted(iface string, ip netip.Addr, dst netip.Prefix) bool {
	m.mu.Lock()
	object := ""
	switch {
	case dst.IsValid() && m.wanted.routes[iface][dst.Masked()]:
		object = "route"
	case ip.IsValid():
		object = m.wanted.l2[iface][ip.Unmap()]
	}
	m.mu.Unlock()
	if object == "" || m.cfg.OnDrift == nil {
		return object != ""
	}
	what := dst.String()
	if ip.IsValid() {
		what = ip.String()
	}
	m.cfg.OnDrift(object, what+" dev "+iface)
	return true
}
