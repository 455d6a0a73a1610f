package allowmgr

import (
	"slices"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
)

// Snapshot implements inspect.Snapshotter: the set whose members are the
// peers' host IPs (PeerSet).
func (m *Manager) Snapshot(d *inspect.Desired) { d.Allowlist = PeerSet(m.opts.Rules) }

// PeerSet names the set (IPv4 name; the IPv6 twin carries ipset.V6Suffix)
// that holds peers' host IPs under r: the first peers set its rules use
// (VXLAN, IPIP, then WireGuard), "" when they use none.
func PeerSet(r firewall.Config) string {
	for _, base := range firewall.Sets(r, ipset.IPv4) {
		if slices.Contains(firewall.PeerSets(), base) {
			return base
		}
	}
	return ""
}
