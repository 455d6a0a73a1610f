package nlutil

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// NFTGeneration returns the nf_tables ruleset generation of the calling
// thread's network namespace (NFT_MSG_GETGEN, one netlink round trip on a
// fresh socket), or with c that of c's namespace, over c. The kernel
// advances it with every committed nf_tables transaction — every
// iptables-nft or nft write, of any table, chain or family, by anyone —
// and reads leave it alone, so an unchanged generation means an unchanged
// ruleset. It is a 32-bit counter: a false "unchanged"
// would need exactly 2^32 commits between two checks.
func NFTGeneration(c *Conn) (uint32, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN, 0)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	var gen uint32
	found := false
	each := func(m []byte) error {
		if len(m) < nl.SizeofNfgenmsg {
			return nil
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
		if err != nil {
			return err
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == unix.NFTA_GEN_ID && len(a.Value) == 4 {
				gen, found = binary.BigEndian.Uint32(a.Value), true
			}
		}
		return nil
	}
	var err error
	if c != nil {
		err = c.Execute(req, each)
	} else {
		err = Once(unix.NETLINK_NETFILTER, req, each)
	}
	if err != nil {
		return 0, fmt.Errorf("nf_tables generation: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("nf_tables generation: no NFTA_GEN_ID in the kernel's answer")
	}
	return gen, nil
}
