package overlay

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// DeviceInfo is the state of an overlay device as the last Apply left it.
type DeviceInfo struct {
	Name       string
	Index      int // 0 when the device does not exist (yet)
	MTU        int
	MAC        net.HardwareAddr
	TunnelAddr netip.Addr
	Parent     Underlay
	// Created counts creations (first creation and every recreation) since
	// the manager was made: a change tells the daemon that the kernel dropped
	// every route on the device and its routes need a resync.
	Created int
}

// ensureMTU sets link's MTU to mtu unless it already has it.
func ensureMTU(nl Netlink, log *slog.Logger, link netlink.Link, mtu int) error {
	at := link.Attrs()
	if at.MTU == mtu {
		return nil
	}
	if err := nl.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("set MTU of %s from %d to %d: %w", at.Name, at.MTU, mtu, err)
	}
	log.Debug("set device MTU", "iface", at.Name, "old", at.MTU, "mtu", mtu)
	at.MTU = mtu
	return nil
}

// ensureUp sets link admin-up unless it already is.
func ensureUp(nl Netlink, log *slog.Logger, link netlink.Link) error {
	at := link.Attrs()
	if at.Flags&net.FlagUp != 0 {
		return nil
	}
	if err := nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", at.Name, err)
	}
	log.Debug("set device up", "iface", at.Name)
	at.Flags |= net.FlagUp
	return nil
}

// ensureOnlyAddress makes want (a host prefix, /32 or /128) the only address
// of its family on link, adding it before removing the others so the device
// is never without it. An invalid want removes every address of family.
// IPv6 link-local addresses are the kernel's and stay.
func ensureOnlyAddress(nl Netlink, log *slog.Logger, link netlink.Link, ipVersion int, want netip.Addr) error {
	name := link.Attrs().Name
	have, err := nl.AddrList(link, nlFamily(ipVersion))
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", name, err)
	}
	var wantPfx netip.Prefix
	if want.IsValid() {
		wantPfx = netip.PrefixFrom(want, want.BitLen())
	}
	present := false
	var stale []netlink.Addr
	for _, a := range have {
		pfx, ok := addrPrefix(a)
		if !ok {
			continue
		}
		if pfx == wantPfx {
			present = true
			continue
		}
		if pfx.Addr().Is6() && pfx.Addr().IsLinkLocalUnicast() {
			continue
		}
		stale = append(stale, a)
	}
	var errs []error
	if wantPfx.IsValid() && !present {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(want.AsSlice()), Mask: net.CIDRMask(want.BitLen(), want.BitLen())}}
		if want.Is6() {
			// Usable at once: the tunnel address is unique by construction
			// (our own block), so duplicate address detection only delays.
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := nl.AddrReplace(link, addr); err != nil {
			errs = append(errs, fmt.Errorf("add address %s to %s: %w", wantPfx, name, err))
		} else {
			log.Debug("added device address", "iface", name, "addr", wantPfx)
		}
	}
	for _, a := range stale {
		if err := nl.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			// EADDRNOTAVAIL: already gone, which is the goal.
			errs = append(errs, fmt.Errorf("remove address %s from %s: %w", a.IPNet, name, err))
			continue
		}
		log.Debug("removed device address", "iface", name, "addr", a.IPNet.String())
	}
	return errors.Join(errs...)
}

// deleteLink deletes link; a link that is already gone is success.
func deleteLink(nl Netlink, link netlink.Link) error {
	err := nl.LinkDel(link)
	if err == nil || nlutil.LinkNotFound(err) || errors.Is(err, ErrLinkNotFound) {
		return nil
	}
	return fmt.Errorf("delete %s: %w", link.Attrs().Name, err)
}

// RemoveVXLAN deletes the VXLAN device name if it exists and is a VXLAN
// device (the daemon calls it when the mode no longer uses that device); an
// absent device is success, a non-VXLAN link of that name is left alone and
// reported.
func RemoveVXLAN(nl Netlink, name string) error {
	link, err := nl.LinkByName(name)
	if errors.Is(err, ErrLinkNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove vxlan device: %w", err)
	}
	if _, ok := link.(*netlink.Vxlan); !ok {
		return fmt.Errorf("remove vxlan device %s: it is a %q link, not routelet's", name, link.Type())
	}
	return deleteLink(nl, link)
}
