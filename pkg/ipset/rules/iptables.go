package rules

import (
	"fmt"

	"github.com/coreos/go-iptables/iptables"

	"github.com/routelet/routelet/pkg/ipset"
)

// Backends of the iptables binaries, for NewIPTables.
const (
	// BackendDefault uses whatever `iptables` / `ip6tables` is on PATH
	// (on Debian, the alternatives system picks nft or legacy).
	BackendDefault = ""
	// BackendNFT uses iptables-nft / ip6tables-nft.
	BackendNFT = "nft"
	// BackendLegacy uses iptables-legacy / ip6tables-legacy.
	BackendLegacy = "legacy"
)

// Binary returns the iptables binary name for family and backend.
func Binary(family ipset.Family, backend string) (string, error) {
	base := "iptables"
	if family == ipset.IPv6 {
		base = "ip6tables"
	}
	switch backend {
	case BackendDefault:
		return base, nil
	case BackendNFT, BackendLegacy:
		return base + "-" + backend, nil
	}
	return "", fmt.Errorf("iptables backend %q: want %q, %q or empty for the default", backend, BackendNFT, BackendLegacy)
}

// NewIPTables returns a go-iptables handle for family using backend's
// binary, waiting up to 5 s for the xtables lock. It runs `<binary>
// --version` once to learn the binary's features.
func NewIPTables(family ipset.Family, backend string) (*iptables.IPTables, error) {
	bin, err := Binary(family, backend)
	if err != nil {
		return nil, err
	}
	proto := iptables.ProtocolIPv4
	if family == ipset.IPv6 {
		proto = iptables.ProtocolIPv6
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Path(bin), iptables.Timeout(5))
	if err != nil {
		return nil, fmt.Errorf("iptables %s: %w", bin, err)
	}
	return ipt, nil
}
