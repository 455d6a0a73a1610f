package diagnose

import (
	"errors"
	"net/netip"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/wireguard"
)

// Kernel is every read diagnose makes of this node's kernel: the reads it
// shares with `routeletd status` (inspect.Reader: links, routes,
// neighbours, FDB, ipsets, sysctls, a pod's link) and its own. The
// netlink implementation (NewKernel) reads the calling process's network
// namespace; tests feed a fake. Each method is one kernel read (a dump or
// one file), which Counted counts.
type Kernel interface {
	inspect.Reader
	// Conntrack returns the flows between a and b, either direction.
	Conntrack(a, b netip.Addr) ([]Flow, error)
	// NodeSpace snapshots the node's own address space (nodespace.ReadHost,
	// routelet's links and routes left out), as the daemon's peer check does.
	NodeSpace() (nodespace.Host, error)
	// Parent returns the link holding hostIP (overlay.FindParent).
	Parent(hostIP netip.Addr) (overlay.Underlay, error)
	// WireGuard reads the WireGuard device name through wgctrl (its public
	// key, port and peers; wireguard.ReadDevice); an error matching
	// os.ErrNotExist when no device of that name answers.
	WireGuard(name string) (wireguard.Status, error)
}

// The kernel's objects as inspect reads them.
type (
	Link      = inspect.Link
	LinkStats = inspect.LinkStats
	Route     = inspect.Route
	Neigh     = inspect.Neigh
	FDB       = inspect.FDBEntry
)

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

// Counted wraps a Kernel and counts its reads by method (ByMethod).
type Counted struct {
	*inspect.Counting
	k Kernel
}

// NewCounted counts k's reads.
func NewCounted(k Kernel) *Counted { return &Counted{Counting: &inspect.Counting{R: k}, k: k} }

// Conntrack counts and passes through.
func (c *Counted) Conntrack(a, b netip.Addr) ([]Flow, error) {
	c.Count("conntrack")
	return c.k.Conntrack(a, b)
}

// NodeSpace counts and passes through.
func (c *Counted) NodeSpace() (nodespace.Host, error) { c.Count("nodespace"); return c.k.NodeSpace() }

// Parent counts and passes through.
func (c *Counted) Parent(hostIP netip.Addr) (overlay.Underlay, error) {
	c.Count("parent")
	return c.k.Parent(hostIP)
}

// WireGuard counts and passes through.
func (c *Counted) WireGuard(name string) (wireguard.Status, error) {
	c.Count("wireguard")
	return c.k.WireGuard(name)
}

// notExist reports whether err says the thing read does not exist.
func notExist(err error) bool { return errors.Is(err, inspect.ErrNotExist) }
