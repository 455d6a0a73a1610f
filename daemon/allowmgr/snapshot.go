package allowmgr

import (
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
)

// Snapshot implements inspect.Snapshotter: the set whose members are the
// peers' host IPs (PeerSet).
func (m *Manager) Snapshot(d *inspect.Desired) { d.Allowlist = PeerSet(m.opts.Rules) }

// PeerSet names the set (IPv4 name; the IPv6 twin carries ipset.V6Suffix)
// that lets peers' host IPs send overlay traffic under r: VXLAN or IPIP
// peers, "" without encapsulation.
func PeerSet(r firewall.Config) string {
	switch {
	case r.VXLAN:
		return ipset.VXLANPeers
	case r.IPIP:
		return ipset.IPIPPeers
	}
	return ""
}
