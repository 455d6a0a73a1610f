package main

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sync"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/podnet"
)

// dataplane is the kernel work the commands need, as one narrow seam:
// pkg/podnet in the binary, an in-memory fake with failure injection in the
// unit tests.
type dataplane interface {
	InspectPod(netnsPath, ifName string) (*podnet.PodView, error)
	InspectHost(hostIface string) (*podnet.HostView, error)
	// HostLink is InspectHost without the routes.
	HostLink(hostIface string) (*podnet.HostView, error)
	EnableForwarding(ipv6 bool) error
	Setup(spec podnet.Spec) (*podnet.Attached, error)
	AddHostRoutes(hostIface string, addrs []netip.Addr, proto netlink.RouteProtocol) error
	Teardown(hostIface string) error
	// Unplug deletes the host veth (Teardown) and its pod guard
	// (RemoveGuard), the guard as soon as the kernel has taken the veth
	// off the node, while the deletion still completes.
	Unplug(hostIface string) (vethErr, guardErr error)
	// EnsureGuard, ReadGuard and RemoveGuard keep the pod source check on
	// the host veth's ingress hook (pkg/podguard).
	EnsureGuard(spec podguard.Spec) error
	ReadGuard(spec podguard.Spec) (podguard.State, error)
	RemoveGuard(hostIface string) error
	// Host snapshots the node namespace for the checks of pkg/nodespace;
	// routelet's own links (those owned accepts, see ownedByRoutelet) and
	// routes of ownProto contribute no address space.
	Host(ownProto int, owned func(nodespace.Link) bool) (nodespace.Host, error)
}

// kernel is the real dataplane.
type kernel struct{}

var _ dataplane = kernel{}

func (kernel) InspectPod(netnsPath, ifName string) (*podnet.PodView, error) {
	return podnet.InspectPod(netnsPath, ifName)
}
func (kernel) InspectHost(hostIface string) (*podnet.HostView, error) {
	return podnet.InspectHost(hostIface)
}
func (kernel) HostLink(hostIface string) (*podnet.HostView, error) {
	return podnet.LookupHost(hostIface)
}
func (kernel) EnableForwarding(ipv6 bool) error                 { return podnet.EnableForwarding(ipv6) }
func (kernel) Setup(spec podnet.Spec) (*podnet.Attached, error) { return podnet.Setup(spec) }
func (kernel) AddHostRoutes(hostIface string, addrs []netip.Addr, proto netlink.RouteProtocol) error {
	return podnet.AddHostRoutes(hostIface, addrs, proto)
}
func (kernel) Teardown(hostIface string) error { return podnet.Teardown(hostIface) }
func (kernel) Unplug(hostIface string) (vethErr, guardErr error) {
	// The guard's socket is opened first, so that the deletion's carrier
	// can hold it: its release then waits for nothing (see withGuards).
	var held *os.File
	g, err := podguard.New(nftables.AsLasting(), nftables.WithSockOptions(func(c *mdnetlink.Conn) error {
		held = dupSocket(c)
		return nil
	}))
	if err != nil {
		return podnet.TeardownThen(hostIface, nil, func() error { return kernel{}.RemoveGuard(hostIface) })
	}
	openGuards.Lock()
	openGuards.g = append(openGuards.g, g)
	openGuards.Unlock()
	if held != nil {
		defer held.Close()
	}
	return podnet.TeardownThen(hostIface, held, func() error { return g.Remove(hostIface) })
}

// dupSocket returns a duplicate of c's socket, nil if it cannot.
func dupSocket(c *mdnetlink.Conn) *os.File {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var f *os.File
	_ = raw.Control(func(fd uintptr) {
		if nfd, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
			f = os.NewFile(uintptr(nfd), "nf_tables")
		}
	})
	return f
}
func (kernel) EnsureGuard(spec podguard.Spec) error {
	return withGuards(func(g *podguard.Guards) error { _, err := g.Ensure(spec); return err })
}
func (kernel) ReadGuard(spec podguard.Spec) (st podguard.State, err error) {
	err = withGuards(func(g *podguard.Guards) error { st, err = g.Read(spec, nil); return err })
	return st, err
}
func (kernel) RemoveGuard(hostIface string) error {
	return withGuards(func(g *podguard.Guards) error { return g.Remove(hostIface) })
}

// withGuards runs f with the pod guards of the plugin's namespace, over one
// nf_tables socket for all of f's requests. The socket stays open until the
// command ends (waitGuardCloses): the kernel's release of an nf_tables
// socket waits, holding the namespace's nf_tables mutex, until the cleanup
// of every committed transaction still queued has run (after an RCU grace
// period); by the end of the command the cleanup of the guard's commit
// has normally been taken up, so the release neither waits for it nor
// holds up the commits of concurrent commands while it does.
func withGuards(f func(*podguard.Guards) error) error {
	g, err := podguard.New(nftables.AsLasting())
	if err != nil {
		return err
	}
	err = f(g)
	openGuards.Lock()
	openGuards.g = append(openGuards.g, g)
	openGuards.Unlock()
	return err
}

// openGuards are the connections withGuards opened that the command has
// not closed yet.
var openGuards struct {
	sync.Mutex
	g []*podguard.Guards
}

// waitGuardCloses closes every nf_tables socket withGuards opened; a
// command calls it before it returns.
func waitGuardCloses() {
	openGuards.Lock()
	defer openGuards.Unlock()
	for _, g := range openGuards.g {
		if err := g.Close(); err != nil {
			slog.Debug("close nf_tables socket", "err", err)
		}
	}
	openGuards.g = nil
}

func (kernel) Host(ownProto int, owned func(nodespace.Link) bool) (nodespace.Host, error) {
	return nodespace.ReadHost(nil, ownProto, owned)
}

// dp is the dataplane the commands use; unit tests swap it.
var dp dataplane = kernel{}

// stdout receives results; unit tests swap it.
var stdout io.Writer = os.Stdout
