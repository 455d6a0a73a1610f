package nodespace

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// ReadHostAt is ReadHost for the namespace ns (netns.None(): the calling
// thread's) over one raw netlink socket: the link dump asks the kernel to
// leave out the statistics, and of every message only the fields the
// checks use are decoded (a link's index, name and kind; an address's
// link, local address and prefix length; a route's header, destination,
// table and output links). Routes of ownProto and everything on owned
// links are skipped before their destination is decoded. The answer is the
// one ReadHost gives; it costs a fraction of the library's full decoding on
// a node with hundreds of pod veths.
func ReadHostAt(ns netns.NsHandle, ownProto int, owned func(Link) bool) (Host, error) {
	c, err := nlutil.Dial(unix.NETLINK_ROUTE, ns)
	if err != nil {
		return Host{}, fmt.Errorf("nodespace: %w", err)
	}
	defer c.Close()
	// The kernel then dumps only the main table's routes (not the local
	// table's address and multicast routes of every link); before 4.20 the
	// option is unknown and the table is filtered here as it is anyway.
	_ = c.SetStrictCheck()
	return nlutil.Retry(func() (Host, error) { return readHostLean(c, ownProto, owned) })
}

// rtextFilterSkipStats is RTEXT_FILTER_SKIP_STATS: link dumps without the
// counters (kernel 4.19 and later; older kernels ignore it).
const rtextFilterSkipStats = 1 << 3

// readHostLean is one attempt of ReadHostAt.
func readHostLean(c *nlutil.Conn, ownProto int, owned func(Link) bool) (Host, error) {
	var out Host
	names := map[int]string{}
	skip := map[int]bool{}

	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(rtextFilterSkipStats)))
	err := c.Execute(req, func(m []byte) error {
		if len(m) < unix.SizeofIfInfomsg {
			return nil
		}
		l := Link{Index: int(int32(binary.NativeEndian.Uint32(m[4:8]))), Type: "device"}
		nlutil.EachAttr(m[unix.SizeofIfInfomsg:], func(typ uint16, v []byte) {
			switch typ {
			case unix.IFLA_IFNAME:
				l.Name = nlutil.CString(v)
			case unix.IFLA_LINKINFO:
				nlutil.EachAttr(v, func(t uint16, iv []byte) {
					if t == unix.IFLA_INFO_KIND {
						l.Type = linkType(nlutil.CString(iv))
					}
				})
			}
		})
		out.Links = append(out.Links, l)
		names[l.Index] = l.Name
		if owned != nil && owned(l) {
			skip[l.Index] = true
		}
		return nil
	})
	if err != nil {
		return Host{}, fmt.Errorf("nodespace: list links: %w", err)
	}

	req = nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfAddrmsg(unix.AF_UNSPEC))
	err = c.Execute(req, func(m []byte) error {
		if len(m) < unix.SizeofIfAddrmsg {
			return nil
		}
		if skip[int(int32(binary.NativeEndian.Uint32(m[4:8])))] {
			return nil
		}
		bits := int(m[1])
		var local, address []byte
		nlutil.EachAttr(m[unix.SizeofIfAddrmsg:], func(typ uint16, v []byte) {
			switch typ {
			case unix.IFA_LOCAL:
				local = v
			case unix.IFA_ADDRESS:
				address = v
			}
		})
		if local == nil {
			local = address
		}
		if a, ok := netip.AddrFromSlice(local); ok && bits <= a.BitLen() {
			out.Addrs = append(out.Addrs, netip.PrefixFrom(a.Unmap(), bits))
		}
		return nil
	})
	if err != nil {
		return Host{}, fmt.Errorf("nodespace: list addresses: %w", err)
	}

	req = nl.NewNetlinkRequest(unix.RTM_GETROUTE, unix.NLM_F_DUMP)
	req.AddData(&nl.RtMsg{RtMsg: unix.RtMsg{Family: unix.AF_UNSPEC, Table: unix.RT_TABLE_MAIN}})
	seen := map[string]bool{}
	err = c.Execute(req, func(m []byte) error {
		if len(m) < unix.SizeofRtMsg {
			return nil
		}
		dstLen, table, proto, scope, typ := int(m[1]), uint32(m[4]), int(m[5]), m[6], m[7]
		flags := binary.NativeEndian.Uint32(m[8:12])
		if flags&unix.RTM_F_CLONED != 0 {
			return nil
		}
		var dst []byte
		oif := 0
		var hops []int
		nlutil.EachAttr(m[unix.SizeofRtMsg:], func(t uint16, v []byte) {
			switch t {
			case unix.RTA_TABLE:
				if len(v) >= 4 {
					table = binary.NativeEndian.Uint32(v)
				}
			case unix.RTA_DST:
				dst = v
			case unix.RTA_OIF:
				if len(v) >= 4 {
					oif = int(int32(binary.NativeEndian.Uint32(v)))
				}
			case unix.RTA_MULTIPATH:
				hops = nexthopLinks(v)
			}
		})
		if table != unix.RT_TABLE_MAIN {
			return nil
		}
		if dstLen == 0 {
			if typ != unix.RTN_UNICAST {
				return nil // a blackhole default names no uplink
			}
			for _, idx := range append([]int{oif}, hops...) {
				if name, ok := names[idx]; ok && idx != 0 && !seen[name] {
					seen[name] = true
					out.Uplinks = append(out.Uplinks, name)
				}
			}
			return nil
		}
		if proto == ownProto || skip[oif] || scope != unix.RT_SCOPE_LINK || typ != unix.RTN_UNICAST {
			return nil
		}
		a, ok := netip.AddrFromSlice(dst)
		if !ok || dstLen > a.BitLen() {
			return nil
		}
		p := netip.PrefixFrom(a.Unmap(), dstLen)
		if p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			return nil // every IPv6 link has fe80::/64
		}
		out.Connected = append(out.Connected, p)
		return nil
	})
	if err != nil {
		return Host{}, fmt.Errorf("nodespace: list routes: %w", err)
	}
	return out, nil
}

// nexthopLinks returns the output links of an RTA_MULTIPATH value.
func nexthopLinks(b []byte) []int {
	var out []int
	for len(b) >= unix.SizeofRtNexthop {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < unix.SizeofRtNexthop || l > len(b) {
			break
		}
		out = append(out, int(int32(binary.NativeEndian.Uint32(b[4:8]))))
		al := (l + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1)
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return out
}

// linkType is the name the netlink library gives a link of kind: the kind
// itself, except for the tun driver's links.
func linkType(kind string) string {
	if kind == "tun" {
		return "tuntap"
	}
	return kind
}
