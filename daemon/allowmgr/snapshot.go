package allowmgr

import (
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/ipset"
)

// Snapshot implements agent.Snapshotter: the set whose members are the
// peers' host IPs in this mode (VXLAN or IPIP peers), none without
// encapsulation.
func (m *Manager) Snapshot(d *inspect.Desired) {
	switch {
	case m.opts.Rules.VXLAN:
		d.Allowlist = ipset.VXLANPeers
	case m.opts.Rules.IPIP:
		d.Allowlist = ipset.IPIPPeers
	}
}
