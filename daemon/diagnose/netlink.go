package diagnose

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"

	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/netguard"
	"github.com/routelet/routelet/pkg/overlay"
)

// KernelOptions configure the netlink Kernel.
type KernelOptions struct {
	// RouteProtocol and Owned say what NodeSpace leaves out: routes of
	// routelet's protocol and routelet's own links (as the daemon does).
	RouteProtocol int
	Owned         func(netguard.Link) bool
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
	return netguard.ReadHost(nil, k.opts.RouteProtocol, k.opts.Owned)
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
