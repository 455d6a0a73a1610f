package diagnose

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/wireguard"
)

// KernelOptions configure the netlink Kernel.
type KernelOptions struct {
	// RouteProtocol and Owned say what NodeSpace leaves out: routes of
	// routelet's protocol and routelet's own links (as the daemon does).
	RouteProtocol int
	Owned         func(nodespace.Link) bool
}

// netlinkKernel reads the calling process's network namespace: inspect's
// reads and diagnose's own.
type netlinkKernel struct {
	*inspect.Netlink
	opts KernelOptions
}

// NewKernel returns the Kernel of the current network namespace; Close
// releases it.
func NewKernel(opts KernelOptions) (Kernel, func(), error) {
	nl, err := inspect.NewNetlink()
	if err != nil {
		return nil, nil, err
	}
	return &netlinkKernel{Netlink: nl, opts: opts}, nl.Close, nil
}

// Conntrack returns the flows between a and b with as little of the table
// crossing the socket as the kernel allows. IPv4: two dumps the kernel
// filters by the original direction's addresses (a → b, b → a). IPv6:
// one dump the kernel filters by family, the pair picked here — the
// kernel's IPv6 address filter drops the very entries that match (seen on
// Linux 6.18), so it is not used.
func (k *netlinkKernel) Conntrack(a, b netip.Addr) ([]Flow, error) {
	if a.Is6() {
		c, err := conntrack.Dial(nil)
		if err != nil {
			return nil, fmt.Errorf("conntrack: %w", err)
		}
		defer c.Close()
		flows, err := c.DumpFilter(conntrack.NewFilter().Family(netfilter.ProtoIPv6), nil)
		if err != nil {
			return nil, fmt.Errorf("conntrack dump: %w", err)
		}
		return pairOf(flows, a, b), nil
	}
	c, err := netfilter.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	defer c.Close()
	var out []Flow
	for _, p := range [][2]netip.Addr{{a, b}, {b, a}} {
		fs, err := dumpPair(c, p[0], p[1])
		if err != nil {
			return nil, fmt.Errorf("conntrack dump %s → %s: %w", p[0], p[1], err)
		}
		out = append(out, fs...)
	}
	return out, nil
}

// pairOf keeps the flows between a and b, either direction.
func pairOf(flows []conntrack.Flow, a, b netip.Addr) []Flow {
	var out []Flow
	for _, f := range flows {
		o := f.TupleOrig
		s, d := o.IP.SourceAddress.Unmap(), o.IP.DestinationAddress.Unmap()
		if !(s == a && d == b) && !(s == b && d == a) {
			continue
		}
		out = append(out, Flow{Proto: protoName(o.Proto.Protocol), Src: s, Dst: d, SrcPort: o.Proto.SourcePort, DstPort: o.Proto.DestinationPort,
			Replied: f.Status.SeenReply(), Assured: f.Status.Assured(), TimeoutS: f.Timeout})
	}
	return out
}

// ctnetlink's attributes and filter flags (linux/netfilter/nfnetlink_conntrack.h
// and nf_conntrack_netlink.c), as far as Conntrack uses them.
const (
	ctMsgGet        = 1 // IPCTNL_MSG_CT_GET
	ctaTupleOrig    = 1
	ctaStatus       = 3
	ctaTimeout      = 7
	ctaFilter       = 25
	ctaTupleIP      = 1
	ctaTupleProto   = 2
	ctaIPv4Src      = 1
	ctaIPv4Dst      = 2
	ctaIPv6Src      = 3
	ctaIPv6Dst      = 4
	ctaProtoNum     = 1
	ctaProtoSrcPort = 2
	ctaProtoDstPort = 3
	ctaFilterOrig   = 1 // CTA_FILTER_ORIG_FLAGS
	filterIPSrc     = 1 << 0
	filterIPDst     = 1 << 1
	statusSeenReply = 1 << 1 // IPS_SEEN_REPLY
	statusAssured   = 1 << 2 // IPS_ASSURED
)

// dumpPair dumps the IPv4 flows whose original direction is src → dst,
// the kernel filtering them (CTA_FILTER, Linux 5.8 and later).
func dumpPair(c *netfilter.Conn, src, dst netip.Addr) ([]Flow, error) {
	req, err := netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: netfilter.NFSubsysCTNetlink, MessageType: ctMsgGet, Family: netfilter.ProtoIPv4, Flags: netlink.Request | netlink.Dump,
	}, []netfilter.Attribute{
		{Type: ctaTupleOrig, Nested: true, Children: []netfilter.Attribute{{Type: ctaTupleIP, Nested: true,
			Children: []netfilter.Attribute{{Type: ctaIPv4Src, Data: src.AsSlice()}, {Type: ctaIPv4Dst, Data: dst.AsSlice()}}}}},
		{Type: ctaFilter, Nested: true, Children: []netfilter.Attribute{
			{Type: ctaFilterOrig, Data: binary.NativeEndian.AppendUint32(nil, filterIPSrc|filterIPDst)}}},
	})
	if err != nil {
		return nil, err
	}
	msgs, err := c.Query(req)
	if err != nil {
		return nil, err
	}
	out := make([]Flow, 0, len(msgs))
	for _, m := range msgs {
		_, attrs, err := netfilter.UnmarshalNetlink(m)
		if err != nil {
			return nil, err
		}
		if f, ok := flowOf(attrs); ok && f.Src == src && f.Dst == dst {
			out = append(out, f)
		}
	}
	return out, nil
}

// flowOf reads a conntrack entry's original tuple, status and timeout.
func flowOf(attrs []netfilter.Attribute) (Flow, bool) {
	var f Flow
	var status uint32
	ok := false
	for _, a := range attrs {
		switch a.Type {
		case ctaTupleOrig:
			ok = tupleOf(a.Children, &f)
		case ctaStatus:
			if len(a.Data) == 4 {
				status = binary.BigEndian.Uint32(a.Data)
			}
		case ctaTimeout:
			if len(a.Data) == 4 {
				f.TimeoutS = binary.BigEndian.Uint32(a.Data)
			}
		}
	}
	f.Replied, f.Assured = status&statusSeenReply != 0, status&statusAssured != 0
	return f, ok
}

// tupleOf fills f's addresses, protocol and ports from a tuple's
// attributes; false when it has no addresses.
func tupleOf(attrs []netfilter.Attribute, f *Flow) bool {
	for _, a := range attrs {
		switch a.Type {
		case ctaTupleIP:
			for _, ip := range a.Children {
				addr, ok := netip.AddrFromSlice(ip.Data)
				switch {
				case !ok:
				case ip.Type == ctaIPv4Src || ip.Type == ctaIPv6Src:
					f.Src = addr.Unmap()
				case ip.Type == ctaIPv4Dst || ip.Type == ctaIPv6Dst:
					f.Dst = addr.Unmap()
				}
			}
		case ctaTupleProto:
			for _, p := range a.Children {
				switch {
				case p.Type == ctaProtoNum && len(p.Data) == 1:
					f.Proto = protoName(p.Data[0])
				case p.Type == ctaProtoSrcPort && len(p.Data) == 2:
					f.SrcPort = binary.BigEndian.Uint16(p.Data)
				case p.Type == ctaProtoDstPort && len(p.Data) == 2:
					f.DstPort = binary.BigEndian.Uint16(p.Data)
				}
			}
		}
	}
	if f.Proto == "icmp" || f.Proto == "icmpv6" {
		f.SrcPort, f.DstPort = 0, 0
	}
	return f.Src.IsValid() && f.Dst.IsValid()
}

// protoNames name the IP protocols conntrack tracks.
var protoNames = map[uint8]string{unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp", unix.IPPROTO_ICMP: "icmp",
	unix.IPPROTO_ICMPV6: "icmpv6", unix.IPPROTO_SCTP: "sctp"}

// protoName names an IP protocol number.
func protoName(p uint8) string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return fmt.Sprintf("proto-%d", p)
}

// NodeSpace reads the node's own address space as the daemon's peer check.
func (k *netlinkKernel) NodeSpace() (nodespace.Host, error) {
	return nodespace.ReadHost(nil, k.opts.RouteProtocol, k.opts.Owned)
}

// Parent finds the link holding hostIP.
func (k *netlinkKernel) Parent(hostIP netip.Addr) (overlay.Underlay, error) {
	kern, err := overlay.NewKernel()
	if err != nil {
		return overlay.Underlay{}, err
	}
	defer kern.Close()
	return overlay.FindParent(kern, hostIP)
}

// inNetns runs f on a thread in the namespace at path, then returns the
// thread to its own namespace (or retires it if that fails).
func inNetns(path string, f func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	var ferr error
	if err := nlutil.InNetNS(target, func() error { ferr = f(); return nil }); err != nil {
		return errors.Join(ferr, fmt.Errorf("netns %s: %w", path, err))
	}
	return ferr
}

// WireGuard reads the device through wgctrl: the kernel's over generic
// netlink in this namespace, a userspace datapath's over its socket in
// wireguard.SocketDir.
func (k *netlinkKernel) WireGuard(name string) (wireguard.Status, error) {
	return wireguard.ReadDevice(name)
}
