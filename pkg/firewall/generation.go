package firewall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/ipset"
)

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

// ErrGenerationChanged is what nftDelete returns when the ruleset
// generation was no longer the one given: someone changed the ruleset in
// between, and nothing was deleted.
var ErrGenerationChanged = errors.New("nf_tables ruleset changed since it was read")

// nftDelete deletes table of family, or with chain set only that chain of
// it, from the calling thread's namespace in one nf_tables transaction that
// the kernel commits only while the ruleset generation is still gen
// (NFNL_BATCH_GENID): if anyone changed anything since gen was read, the
// batch is refused with ERESTART and ErrGenerationChanged is returned. A
// missing table or chain is success; a chain that still holds a rule is
// refused by the kernel (EBUSY), and that error returned.
func nftDelete(family ipset.Family, table, chain string, gen uint32) error {
	what := "table " + table
	typ := unix.NFT_MSG_DELTABLE
	attrs := []*nl.RtAttr{nl.NewRtAttr(unix.NFTA_TABLE_NAME, nl.ZeroTerminated(table))}
	if chain != "" {
		what = "chain " + table + "/" + chain
		typ = unix.NFT_MSG_DELCHAIN
		attrs = []*nl.RtAttr{nl.NewRtAttr(unix.NFTA_CHAIN_TABLE, nl.ZeroTerminated(table)),
			nl.NewRtAttr(unix.NFTA_CHAIN_NAME, nl.ZeroTerminated(chain))}
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("nf_tables delete %s: %w", what, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nf_tables delete %s: %w", what, err)
	}
	var genid [4]byte
	binary.BigEndian.PutUint32(genid[:], gen)
	begin := nfMsg(unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, 1, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES,
		nl.NewRtAttr(unix.NFNL_BATCH_GENID, genid[:]))
	del := nfMsg(unix.NFNL_SUBSYS_NFTABLES<<8|typ, unix.NLM_F_REQUEST|unix.NLM_F_ACK, 2, uint8(family), 0, attrs...)
	end := nfMsg(unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, 3, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	batch := append(append(begin, del...), end...)
	if err := unix.Sendto(fd, batch, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nf_tables delete %s: %w", what, err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("nf_tables delete %s: %w", what, err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("nf_tables delete %s: %w", what, err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			errno := -int32(binary.NativeEndian.Uint32(m.Data[:4]))
			switch {
			case errno == 0 && m.Header.Seq == 2:
				return nil
			case errno == 0:
				continue
			case unix.Errno(errno) == unix.ERESTART:
				return ErrGenerationChanged
			case unix.Errno(errno) == unix.ENOENT:
				return nil
			default:
				return fmt.Errorf("nf_tables delete %s: %w", what, unix.Errno(errno))
			}
		}
	}
}

// nfMsg serialises one nfnetlink message: header, nfgenmsg (resID in
// network byte order) and attrs.
func nfMsg(typ, flags int, seq uint32, family uint8, resID uint16, attrs ...*nl.RtAttr) []byte {
	body := []byte{family, nl.NFNETLINK_V0, byte(resID >> 8), byte(resID)}
	for _, a := range attrs {
		body = append(body, a.Serialize()...)
	}
	h := make([]byte, unix.SizeofNlMsghdr)
	binary.NativeEndian.PutUint32(h[0:], uint32(len(h)+len(body)))
	binary.NativeEndian.PutUint16(h[4:], uint16(typ))
	binary.NativeEndian.PutUint16(h[6:], uint16(flags))
	binary.NativeEndian.PutUint32(h[8:], seq)
	return append(h, body...)
}
