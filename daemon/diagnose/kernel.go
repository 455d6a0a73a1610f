package diagnose

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"sync"

	"github.com/routelet/routelet/pkg/netguard"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

// ErrNotExist is what a Kernel returns (wrapped) for a link, set or
// sysctl that does not exist.
var ErrNotExist = fs.ErrNotExist

// Kernel is every read diagnose makes of this node's kernel. The netlink
// implementation (NewKernel) reads the calling process's network
// namespace; tests feed a fake. Each method is one kernel read (a dump or
// one file), which Counted counts.
type Kernel interface {
	// Links dumps every link.
	Links() ([]Link, error)
	// Routes dumps the main table of family v (4 or 6).
	Routes(v int) ([]Route, error)
	// Neighs dumps the neighbours of family v on dev.
	Neighs(dev string, v int) ([]Neigh, error)
	// FDB dumps dev's forwarding database.
	FDB(dev string) ([]FDB, error)
	// Sysctl reads a key under /proc/sys ("net/ipv4/ip_forward").
	Sysctl(key string) (string, error)
	// SetMembers lists an ipset's members.
	SetMembers(name string) ([]netip.Prefix, error)
	// PodLink reads link ifName inside the network namespace at netnsPath.
	PodLink(netnsPath, ifName string) (Link, error)
	// Conntrack returns the flows between a and b, either direction.
	Conntrack(a, b netip.Addr) ([]Flow, error)
	// NodeSpace snapshots the node's own address space (netguard.ReadHost,
	// routelet's links and routes left out), as the daemon's peer check does.
	NodeSpace() (netguard.Host, error)
	// Parent returns the link holding hostIP (overlay.FindParent).
	Parent(hostIP netip.Addr) (overlay.Underlay, error)
}

// Link is one network interface as the checks see it.
type Link struct {
	Name        string           `json:"name"`
	Index       int              `json:"index"`
	Kind        string           `json:"kind"` // netlink kind: veth, vxlan, ipip, device, …
	AdminUp     bool             `json:"adminUp"`
	LowerUp     bool             `json:"lowerUp"` // carrier
	MTU         int              `json:"mtu"`
	MAC         net.HardwareAddr `json:"mac,omitempty"`
	MasterIndex int              `json:"masterIndex,omitempty"`
	VNI         int              `json:"vni,omitempty"`  // vxlan
	Port        int              `json:"port,omitempty"` // vxlan destination port
	Stats       LinkStats        `json:"stats"`
}

// LinkStats are the counters the probe compares.
type LinkStats struct {
	RxPackets uint64 `json:"rxPackets"`
	TxPackets uint64 `json:"txPackets"`
	RxDropped uint64 `json:"rxDropped"`
	TxDropped uint64 `json:"txDropped"`
	TxErrors  uint64 `json:"txErrors"`
}

// Route is one route of the main table.
type Route struct {
	Dst      netip.Prefix
	Iface    string // "" for a route without a device (blackhole)
	Type     routes.TargetType
	Gateway  netip.Addr
	OnLink   bool
	Protocol int
	MTU      int
}

// Neigh is one neighbour entry.
type Neigh struct {
	IP        netip.Addr
	MAC       net.HardwareAddr
	Permanent bool
}

// FDB is one forwarding-database entry of a VXLAN device.
type FDB struct {
	MAC       net.HardwareAddr
	Dst       netip.Addr
	Permanent bool
}

// Flow is one conntrack entry, by its original direction.
type Flow struct {
	Proto    string     `json:"proto"`
	Src      netip.Addr `json:"src"`
	Dst      netip.Addr `json:"dst"`
	SrcPort  uint16     `json:"srcPort,omitempty"`
	DstPort  uint16     `json:"dstPort,omitempty"`
	Replied  bool       `json:"replied"`
	Assured  bool       `json:"assured"`
	TimeoutS uint32     `json:"timeoutSeconds"`
}

// Counted wraps a Kernel and counts its reads by method.
type Counted struct {
	K  Kernel
	mu sync.Mutex
	n  map[string]int
}

// Reads returns the reads made so far, by method, and their total.
func (c *Counted) Reads() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total := map[string]int{}, 0
	for k, v := range c.n {
		out[k] = v
		total += v
	}
	return out, total
}

// count records one read of method m.
func (c *Counted) count(m string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[m]++
	c.mu.Unlock()
}

// Links counts and passes through.
func (c *Counted) Links() ([]Link, error) { c.count("links"); return c.K.Links() }

// Routes counts and passes through.
func (c *Counted) Routes(v int) ([]Route, error) { c.count("routes"); return c.K.Routes(v) }

// Neighs counts and passes through.
func (c *Counted) Neighs(dev string, v int) ([]Neigh, error) {
	c.count("neighs")
	return c.K.Neighs(dev, v)
}

// FDB counts and passes through.
func (c *Counted) FDB(dev string) ([]FDB, error) { c.count("fdb"); return c.K.FDB(dev) }

// Sysctl counts and passes through.
func (c *Counted) Sysctl(key string) (string, error) { c.count("sysctl"); return c.K.Sysctl(key) }

// SetMembers counts and passes through.
func (c *Counted) SetMembers(name string) ([]netip.Prefix, error) {
	c.count("ipset")
	return c.K.SetMembers(name)
}

// PodLink counts and passes through.
func (c *Counted) PodLink(netnsPath, ifName string) (Link, error) {
	c.count("podlink")
	return c.K.PodLink(netnsPath, ifName)
}

// Conntrack counts and passes through.
func (c *Counted) Conntrack(a, b netip.Addr) ([]Flow, error) {
	c.count("conntrack")
	return c.K.Conntrack(a, b)
}

// NodeSpace counts and passes through.
func (c *Counted) NodeSpace() (netguard.Host, error) { c.count("nodespace"); return c.K.NodeSpace() }

// Parent counts and passes through.
func (c *Counted) Parent(hostIP netip.Addr) (overlay.Underlay, error) {
	c.count("parent")
	return c.K.Parent(hostIP)
}

// notExist reports whether err says the thing read does not exist.
func notExist(err error) bool { return errors.Is(err, ErrNotExist) }
