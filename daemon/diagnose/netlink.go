package diagnose

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/netguard"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

// KernelOptions configure the netlink Kernel.
type KernelOptions struct {
	// RouteProtocol and Owned say what NodeSpace leaves out: routes of
	// routelet's protocol and routelet's own links (as the daemon does).
	RouteProtocol int
	Owned         func(netguard.Link) bool
}

// netlinkKernel reads the calling process's network namespace.
type netlinkKernel struct {
	opts  KernelOptions
	h     *netlink.Handle
	names map[int]string // index → name, from the last Links
}

// NewKernel returns the Kernel of the current network namespace; Close
// releases it.
func NewKernel(opts KernelOptions) (Kernel, func(), error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, nil, fmt.Errorf("netlink handle: %w", err)
	}
	return &netlinkKernel{opts: opts, h: h}, h.Close, nil
}

// Links dumps every link.
func (k *netlinkKernel) Links() ([]Link, error) {
	ls, err := nlutil.Retry(k.h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make([]Link, 0, len(ls))
	k.names = make(map[int]string, len(ls))
	for _, l := range ls {
		out = append(out, linkOf(l))
		k.names[l.Attrs().Index] = l.Attrs().Name
	}
	return out, nil
}

// linkOf converts a netlink link.
func linkOf(l netlink.Link) Link {
	a := l.Attrs()
	out := Link{Name: a.Name, Index: a.Index, Kind: l.Type(), AdminUp: a.Flags&net.FlagUp != 0,
		LowerUp: a.RawFlags&unix.IFF_LOWER_UP != 0, MTU: a.MTU, MAC: a.HardwareAddr, MasterIndex: a.MasterIndex}
	if s := a.Statistics; s != nil {
		out.Stats = LinkStats{RxPackets: s.RxPackets, TxPackets: s.TxPackets, RxDropped: s.RxDropped, TxDropped: s.TxDropped, TxErrors: s.TxErrors}
	}
	if v, ok := l.(*netlink.Vxlan); ok {
		out.VNI, out.Port = v.VxlanId, v.Port
	}
	return out
}

// Routes dumps the main table of family v.
func (k *netlinkKernel) Routes(v int) ([]Route, error) {
	fam := netlink.FAMILY_V4
	if v == 6 {
		fam = netlink.FAMILY_V6
	}
	rs, err := nlutil.Retry(func() ([]netlink.Route, error) {
		return k.h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("list IPv%d routes: %w", v, err)
	}
	if k.names == nil {
		if _, err := k.Links(); err != nil {
			return nil, err
		}
	}
	out := make([]Route, 0, len(rs))
	for _, r := range rs {
		if r.Dst == nil {
			continue // the default route: never a pod or peer route
		}
		dst, ok := prefixOf(r.Dst)
		if !ok {
			continue
		}
		rt := Route{Dst: dst, Iface: k.names[r.LinkIndex], Protocol: int(r.Protocol), MTU: r.MTU, OnLink: r.Flags&unix.RTNH_F_ONLINK != 0}
		switch {
		case r.Type == unix.RTN_BLACKHOLE:
			rt.Type = routes.TypeBlackhole
		case r.Type == unix.RTN_UNREACHABLE:
			rt.Type = routes.TypeUnreachable
		case r.Gw != nil:
			rt.Type = routes.TypeGateway
			rt.Gateway, _ = netip.AddrFromSlice(r.Gw)
			rt.Gateway = rt.Gateway.Unmap()
		default:
			rt.Type = routes.TypeLink
		}
		out = append(out, rt)
	}
	return out, nil
}

// prefixOf converts a route destination.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

// link returns dev, not found wrapped in ErrNotExist.
func (k *netlinkKernel) link(dev string) (netlink.Link, error) {
	l, err := k.h.LinkByName(dev)
	if nlutil.LinkNotFound(err) {
		return nil, fmt.Errorf("link %s: %w", dev, ErrNotExist)
	}
	return l, err
}

// Neighs dumps dev's neighbours of family v.
func (k *netlinkKernel) Neighs(dev string, v int) ([]Neigh, error) {
	l, err := k.link(dev)
	if err != nil {
		return nil, err
	}
	fam := netlink.FAMILY_V4
	if v == 6 {
		fam = netlink.FAMILY_V6
	}
	ns, err := nlutil.Retry(func() ([]netlink.Neigh, error) { return k.h.NeighList(l.Attrs().Index, fam) })
	if err != nil {
		return nil, fmt.Errorf("list neighbours of %s: %w", dev, err)
	}
	var out []Neigh
	for _, n := range ns {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		out = append(out, Neigh{IP: a.Unmap(), MAC: n.HardwareAddr, Permanent: n.State&netlink.NUD_PERMANENT != 0})
	}
	return out, nil
}

// FDB dumps dev's forwarding database.
func (k *netlinkKernel) FDB(dev string) ([]FDB, error) {
	l, err := k.link(dev)
	if err != nil {
		return nil, err
	}
	ns, err := nlutil.Retry(func() ([]netlink.Neigh, error) { return k.h.NeighList(l.Attrs().Index, unix.AF_BRIDGE) })
	if err != nil {
		return nil, fmt.Errorf("list FDB of %s: %w", dev, err)
	}
	var out []FDB
	for _, n := range ns {
		e := FDB{MAC: n.HardwareAddr, Permanent: n.State&netlink.NUD_PERMANENT != 0}
		if a, ok := netip.AddrFromSlice(n.IP); ok {
			e.Dst = a.Unmap()
		}
		out = append(out, e)
	}
	return out, nil
}

// Sysctl reads /proc/sys/<key> (the process's network namespace).
func (k *netlinkKernel) Sysctl(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", filepath.Clean("/"+key)))
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", key, err)
	}
	return string(trimNL(b)), nil
}

// trimNL drops trailing new lines and spaces.
func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// SetMembers lists an ipset's members.
func (k *netlinkKernel) SetMembers(name string) ([]netip.Prefix, error) {
	n, err := ipset.NewNetlink()
	if err != nil {
		return nil, err
	}
	defer n.Close()
	info, err := n.List(name)
	if errors.Is(err, ipset.ErrNotExist) {
		return nil, fmt.Errorf("ipset %s: %w", name, ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	return info.Members, nil
}

// PodLink reads ifName inside the namespace at netnsPath.
func (k *netlinkKernel) PodLink(netnsPath, ifName string) (Link, error) {
	h, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return Link{}, fmt.Errorf("open netns %s: %w", netnsPath, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return Link{}, fmt.Errorf("netlink in netns %s: %w", netnsPath, err)
	}
	defer nh.Close()
	l, err := nh.LinkByName(ifName)
	if nlutil.LinkNotFound(err) {
		return Link{}, fmt.Errorf("link %s in netns %s: %w", ifName, netnsPath, ErrNotExist)
	}
	if err != nil {
		return Link{}, fmt.Errorf("link %s in netns %s: %w", ifName, netnsPath, err)
	}
	return linkOf(l), nil
}

// Conntrack dumps the table and keeps the flows between a and b.
func (k *netlinkKernel) Conntrack(a, b netip.Addr) ([]Flow, error) {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	defer c.Close()
	flows, err := c.Dump(nil)
	if err != nil {
		return nil, fmt.Errorf("conntrack dump: %w", err)
	}
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
	return out, nil
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
func (k *netlinkKernel) NodeSpace() (netguard.Host, error) {
	return netguard.ReadHost(k.h, k.opts.RouteProtocol, k.opts.Owned)
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
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("return from netns %s: %w", path, err)) // thread stays locked: it dies with the goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}
