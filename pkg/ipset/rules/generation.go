package rules

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/ipset"
)

// nftGeneration returns the nf_tables ruleset generation of the calling
// thread's network namespace (NFT_MSG_GETGEN, one netlink round trip on a
// fresh socket). The kernel advances it with every committed nf_tables
// transaction — every iptables-nft or nft write, of any table, chain or
// family, by anyone — and reads leave it alone, so an unchanged generation
// means an unchanged ruleset. It is a 32-bit counter: a false "unchanged"
// would need exactly 2^32 commits between two checks.
func nftGeneration() (uint32, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN, 0)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil {
		return 0, fmt.Errorf("nf_tables generation: %w", err)
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofNfgenmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
		if err != nil {
			return 0, fmt.Errorf("nf_tables generation: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == unix.NFTA_GEN_ID && len(a.Value) == 4 {
				return binary.BigEndian.Uint32(a.Value), nil
			}
		}
	}
	return 0, fmt.Errorf("nf_tables generation: no NFTA_GEN_ID in the kernel's answer")
}

// nftHasTable reports whether the nf_tables ruleset of the calling thread's
// network namespace holds table in family (NFT_MSG_GETTABLE for that one
// table; the kernel answers ENOENT when there is none). A read: it creates
// nothing and leaves the generation alone.
func nftHasTable(family ipset.Family, table string) (bool, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETTABLE, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(family), Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(unix.NFTA_TABLE_NAME, nl.ZeroTerminated(table)))
	if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("nf_tables table %s: %w", table, err)
	}
	return true, nil
}
