package overlaymgr

import (
	"net/netip"
)

// drifted reports to OnDrift a deleted route dst on iface that the manager
// still wants (event goroutine), and returns whether it was wanted.
// Deletions the manager made itself are of routes it no longer wants.
func (m *Manager) drifted(iface string, dst netip.Prefix) bool {
	m.mu.Lock()
	ok := false
	for _, f := range m.fams {
		if _, wanted := f.routes[iface][dst.Masked()]; wanted {
			ok = true
		}
	}
	m.mu.Unlock()
	if ok && m.cfg.OnDrift != nil {
		m.cfg.OnDrift("route", dst.String()+" dev "+iface)
	}
	return ok
}
