// Package allowsetup builds routelet's allowlist (daemon/allowmgr on
// pkg/ipset's sets and iptables chains) from the daemon's configuration,
// and says which rules that configuration asks for (for cleanup and
// status too).
package allowsetup

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/routelet/routelet/daemon/allowmgr"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/allowlist"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
)

// Backend maps the iptables-backend key to a rules backend.
func Backend(b string) string {
	if b == config.IptablesAuto {
		return firewall.BackendDefault
	}
	return b
}

// Rules are the rules cfg asks for: the encapsulation's peer rules, and
// with encryption the WireGuard port's and the encryption guard (traffic
// to a pod CIDR leaves only through the WireGuard device or a pod veth).
func Rules(cfg *config.Config) firewall.Config {
	return firewall.Config{
		VXLAN:           cfg.Encapsulation == config.EncapVXLAN,
		VXLANPort:       cfg.VXLANPort,
		VXLANDevice:     cfg.VXLANDevice,
		IPIP:            cfg.Encapsulation == config.EncapIPIP,
		WireGuard:       cfg.Encryption == config.EncryptionWireGuard,
		WireGuardPort:   cfg.WireGuard.Port,
		WireGuardDevice: cfg.WireGuard.Device,
		NATOutgoing:     cfg.NATOutgoing,
		InterfacePrefix: cfg.IfacePrefix,
	}
}

// New builds the allowlist manager (routelet's ipsets and
// iptables chains) for cfg and registers its metrics; its periodic tamper
// check is a tick of the loop. IPv6 rules are managed only when ip6tables
// works. The returned func closes its netlink sockets.
func New(cfg *config.Config, blocks []netip.Prefix, metrics *health.Metrics, repairs *inspect.RepairLog, log *slog.Logger) (*allowmgr.Manager, func(), error) {
	base := log // pkg/ipset tags its own lines (component=ipset, iptables)
	log = log.With("component", "allowlist")
	backend := Backend(cfg.IptablesBackend)
	v4, v6, v6Err, err := firewall.NewIPTablesPair(backend)
	if err != nil {
		return nil, nil, fmt.Errorf("allowlist: %w (iptables-backend %q)", err, cfg.IptablesBackend)
	}
	if v6Err != nil {
		log.Warn("ip6tables unavailable: no IPv6 allowlist, forwarding or NAT rules", "err", v6Err)
	}
	k, err := ipset.NewNetlink()
	if err != nil {
		_ = firewall.ClosePair(v4, v6)
		return nil, nil, fmt.Errorf("allowlist: %w", err)
	}
	closeAll := func() {
		k.Close()
		_ = firewall.ClosePair(v4, v6)
	}
	rc := Rules(cfg)
	if !cfg.NATOutgoing && len(cfg.NATOutgoingPools) > 0 {
		log.Warn("nat-outgoing is false: nat-outgoing-pool has no effect, no pool is masqueraded", "pools", cfg.NATOutgoingPools)
	}
	m, err := allowmgr.New(allowlist.New(k, v4, v6, base), allowmgr.Options{
		Rules: rc, ExternalNodeCIDRs: cfg.ExternalNodeCIDRs, LocalBlocks: blocks, NATPools: cfg.NATOutgoingPools,
		CheckPeriod: cfg.AllowlistCheckPeriod, OnRepair: func(n int) { repairs.Add("allowlist", "", n) },
	}, log)
	if err == nil {
		err = m.Register(metrics.Registry)
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("allowlist: %w", err)
	}
	log.Info("allowlist enabled", "vxlan", rc.VXLAN, "ipip", rc.IPIP, "wireguard", rc.WireGuard, "natOutgoing", rc.NATOutgoing, "natOutgoingPools", cfg.NATOutgoingPools,
		"iptablesBackend", cfg.IptablesBackend, "ipv6", v6 != nil, "checkPeriod", cfg.AllowlistCheckPeriod)
	return m, closeAll, nil
}
