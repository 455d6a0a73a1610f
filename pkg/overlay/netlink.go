package overlay

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// ErrLinkNotFound is returned (wrapped) by Netlink.LinkByName and LinkByIndex
// when no such link exists; callers branch on it to create the device.
var ErrLinkNotFound = errors.New("link not found")

// Netlink is the narrow kernel seam of this package: exactly the calls the
// managers make. Kernel is the real implementation, overlaytest.FakeNetlink
// the in-memory one. All calls act on the network namespace the
// implementation is bound to.
type Netlink interface {
	// LinkByName and LinkByIndex return ErrLinkNotFound (wrapped) when absent.
	LinkByName(name string) (netlink.Link, error)
	LinkByIndex(index int) (netlink.Link, error)
	// LinkList lists every link (to name a foreign device that holds what
	// ours needs).
	LinkList() ([]netlink.Link, error)
	LinkAdd(link netlink.Link) error
	LinkDel(link netlink.Link) error
	LinkSetMTU(link netlink.Link, mtu int) error
	LinkSetUp(link netlink.Link) error
	LinkSetHardwareAddr(link netlink.Link, hw net.HardwareAddr) error
	// LinkSetNoMaster takes link out of the bridge (or bond) it is
	// enslaved to.
	LinkSetNoMaster(link netlink.Link) error

	// AddrList lists addresses of one family (netlink.FAMILY_V4/V6) on link,
	// or on every link when link is nil.
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrReplace(link netlink.Link, addr *netlink.Addr) error
	AddrDel(link netlink.Link, addr *netlink.Addr) error

	// NeighList lists neighbour entries of one family on one link:
	// FAMILY_V4/V6 for ARP/NDP, unix.AF_BRIDGE for the FDB.
	NeighList(linkIndex, family int) ([]netlink.Neigh, error)
	// NeighSet creates or replaces an entry (NLM_F_CREATE|NLM_F_REPLACE).
	NeighSet(neigh *netlink.Neigh) error
	NeighDel(neigh *netlink.Neigh) error

	// TXChecksum reports whether TX checksum offload is on for the named
	// link; SetTXChecksum switches it (the ethtool ioctl).
	TXChecksum(name string) (bool, error)
	SetTXChecksum(name string, on bool) error
}

// Closer is optional for a Netlink that holds kernel sockets (Kernel;
// overlaytest.FakeNetlink holds none): whoever owns the Netlink closes it
// when done with it (overlaymgr's Manager.Close, routeletd status).
type Closer = io.Closer

var (
	_ Netlink = (*Kernel)(nil)
	_ Closer  = (*Kernel)(nil)
)

// Kernel is the real Netlink, bound at creation to the network namespace of
// the calling thread (its netlink and ioctl sockets stay in that namespace
// whichever thread later uses them). It is safe for concurrent use.
type Kernel struct {
	h  *netlink.Handle
	fd int // AF_INET datagram socket for SIOCETHTOOL
}

// NewKernel opens the netlink and ethtool sockets in the calling thread's
// network namespace. To bind to another namespace, call it on a locked thread
// inside that namespace (ns.Do); Close releases the sockets.
func NewKernel() (*Kernel, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("ethtool socket: %w", err)
	}
	return &Kernel{h: h, fd: fd}, nil
}

// Close releases the sockets.
func (k *Kernel) Close() error {
	k.h.Close()
	return unix.Close(k.fd)
}

// notFound turns netlink's "no such link" errors into ErrLinkNotFound.
func notFound(what string, err error) error {
	if nlutil.LinkNotFound(err) {
		return fmt.Errorf("link %s: %w", what, ErrLinkNotFound)
	}
	return fmt.Errorf("link %s: %w", what, err)
}

// LinkByName implements Netlink.
func (k *Kernel) LinkByName(name string) (netlink.Link, error) {
	l, err := k.h.LinkByName(name)
	if err != nil {
		return nil, notFound(name, err)
	}
	return l, nil
}

// LinkByIndex implements Netlink.
func (k *Kernel) LinkByIndex(index int) (netlink.Link, error) {
	l, err := k.h.LinkByIndex(index)
	if err != nil {
		return nil, notFound(fmt.Sprintf("index %d", index), err)
	}
	return l, nil
}

// LinkList implements Netlink; interrupted dumps are repeated.
func (k *Kernel) LinkList() ([]netlink.Link, error) {
	return nlutil.Retry(k.h.LinkList)
}

// LinkAdd implements Netlink.
func (k *Kernel) LinkAdd(link netlink.Link) error { return k.h.LinkAdd(link) }

// LinkDel implements Netlink.
func (k *Kernel) LinkDel(link netlink.Link) error { return k.h.LinkDel(link) }

// LinkSetMTU implements Netlink.
func (k *Kernel) LinkSetMTU(link netlink.Link, mtu int) error { return k.h.LinkSetMTU(link, mtu) }

// LinkSetUp implements Netlink.
func (k *Kernel) LinkSetUp(link netlink.Link) error { return k.h.LinkSetUp(link) }

// LinkSetHardwareAddr implements Netlink.
func (k *Kernel) LinkSetHardwareAddr(link netlink.Link, hw net.HardwareAddr) error {
	return k.h.LinkSetHardwareAddr(link, hw)
}

// LinkSetNoMaster implements Netlink.
func (k *Kernel) LinkSetNoMaster(link netlink.Link) error { return k.h.LinkSetNoMaster(link) }

// AddrList implements Netlink; interrupted dumps are repeated.
func (k *Kernel) AddrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	return nlutil.Retry(func() ([]netlink.Addr, error) { return k.h.AddrList(link, family) })
}

// AddrReplace implements Netlink.
func (k *Kernel) AddrReplace(link netlink.Link, addr *netlink.Addr) error {
	return k.h.AddrReplace(link, addr)
}

// AddrDel implements Netlink.
func (k *Kernel) AddrDel(link netlink.Link, addr *netlink.Addr) error {
	return k.h.AddrDel(link, addr)
}

// NeighList implements Netlink; interrupted dumps are repeated.
func (k *Kernel) NeighList(linkIndex, family int) ([]netlink.Neigh, error) {
	return nlutil.Retry(func() ([]netlink.Neigh, error) { return k.h.NeighList(linkIndex, family) })
}

// NeighSet implements Netlink.
func (k *Kernel) NeighSet(neigh *netlink.Neigh) error { return k.h.NeighSet(neigh) }

// NeighDel implements Netlink.
func (k *Kernel) NeighDel(neigh *netlink.Neigh) error { return k.h.NeighDel(neigh) }

// TXChecksum implements Netlink.
func (k *Kernel) TXChecksum(name string) (bool, error) {
	v, err := ethtoolValue(k.fd, name, unix.ETHTOOL_GTXCSUM, 0)
	if err != nil {
		return false, fmt.Errorf("ethtool get tx checksum of %s: %w", name, err)
	}
	return v != 0, nil
}

// SetTXChecksum implements Netlink.
func (k *Kernel) SetTXChecksum(name string, on bool) error {
	var data uint32
	if on {
		data = 1
	}
	if _, err := ethtoolValue(k.fd, name, unix.ETHTOOL_STXCSUM, data); err != nil {
		return fmt.Errorf("ethtool set tx checksum of %s to %v: %w", name, on, err)
	}
	return nil
}
