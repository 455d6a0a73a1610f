package wireguard

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/internal/nlutil"
)

// Link kinds of the two implementations' devices.
const (
	kindKernel = "wireguard"
	kindTUN    = "tun"
)

// linkKind is the rtnetlink kind of link ("wireguard", "tun", "tap", ...).
func linkKind(l netlink.Link) string {
	switch t := l.(type) {
	case *netlink.Wireguard:
		return kindKernel
	case *netlink.Tuntap:
		if t.Mode == netlink.TUNTAP_MODE_TAP {
			return "tap"
		}
		return kindTUN
	}
	return l.Type()
}

// lookupLink returns the device's link, nil when there is none.
func (d *Device) lookupLink() (netlink.Link, error) {
	l, err := d.nl.LinkByName(d.cfg.Name)
	if err != nil {
		if nlutil.LinkNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("wireguard %s: read link: %w", d.cfg.Name, err)
	}
	return l, nil
}

// ensureDevice makes sure the device exists and answers: it adopts the
// link there (of the configured implementation's kind; a TUN link only
// when its datapath answers), removes one of the other implementation's
// kind or whose datapath is dead, and creates one when none is left.
// fresh reports a device made now. A link of any other kind under the
// name is not routelet's and stays: that is an error naming it.
func (d *Device) ensureDevice() (link netlink.Link, fresh bool, err error) {
	name := d.cfg.Name
	link, err = d.lookupLink()
	if err != nil {
		return nil, false, err
	}
	if link != nil {
		kind := linkKind(link)
		switch {
		case kind == kindKernel && d.cfg.Impl != ImplUserspace:
			if err := d.answers(); err != nil {
				return nil, false, fmt.Errorf("wireguard %s: the kernel's device does not answer: %w", name, err)
			}
			d.impl = ImplKernel
			return link, false, nil
		case kind == kindTUN && d.cfg.Impl != ImplKernel:
			err := d.answers()
			if err == nil {
				if d.impl == "" {
					d.log.Info("wireguard: adopted the running userspace datapath", "pid", d.pidFromFile())
				}
				d.impl = ImplUserspace
				return link, false, nil
			}
			d.log.Warn("wireguard: the userspace datapath does not answer: replacing it", "err", err)
		case kind == kindKernel || kind == kindTUN:
			d.log.Info("wireguard: removing the other implementation's device", "kind", kind, "implementation", d.cfg.Impl)
		default:
			return nil, false, fmt.Errorf("wireguard %s: a link of kind %q holds the device's name: it is not routelet's, so it stays; remove it or choose another wireguard-device", name, kind)
		}
		if err := d.nl.LinkDel(link); err != nil && !nlutil.LinkNotFound(err) {
			return nil, false, fmt.Errorf("wireguard %s: remove the %s link: %w", name, kind, err)
		}
	}
	lost := d.had
	if link, err = d.create(); err != nil {
		return nil, false, err
	}
	if lost {
		d.log.Warn("wireguard: the device was gone or dead: made again", "implementation", d.impl)
		d.repaired("link")
	}
	return link, true, nil
}

// create makes the device of the configured implementation; auto tries
// the kernel's first and settles on userspace when the kernel has no
// WireGuard.
func (d *Device) create() (netlink.Link, error) {
	impl := d.impl
	if impl == "" {
		impl = d.cfg.Impl
	}
	if impl == ImplKernel || impl == ImplAuto {
		link, err := d.createKernel()
		switch {
		case err == nil:
			d.impl = ImplKernel
			return link, nil
		case impl == ImplAuto && errors.Is(err, ErrUnsupported):
			d.log.Info("wireguard: the kernel has no WireGuard: using the userspace implementation", "err", err)
			d.impl = ImplUserspace
		default:
			return nil, err
		}
	}
	link, err := d.startDatapath()
	if err != nil {
		return nil, err
	}
	d.impl = ImplUserspace
	return link, nil
}

// createKernel adds a link of kind "wireguard". ErrUnsupported (wrapped)
// when the kernel has no WireGuard.
func (d *Device) createKernel() (netlink.Link, error) {
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = d.cfg.Name, d.cfg.MTU
	if err := d.nl.LinkAdd(&netlink.Wireguard{LinkAttrs: la}); err != nil && !errors.Is(err, unix.EEXIST) {
		if unsupportedKind(err) {
			return nil, fmt.Errorf("wireguard %s: create: the kernel cannot create wireguard links (%w: %v): load the wireguard module or set wireguard-implementation to userspace",
				d.cfg.Name, ErrUnsupported, err)
		}
		return nil, fmt.Errorf("wireguard %s: create: %w", d.cfg.Name, err)
	}
	link, err := d.nl.LinkByName(d.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("wireguard %s: read back after create: %w", d.cfg.Name, err)
	}
	if k := linkKind(link); k != kindKernel {
		return nil, fmt.Errorf("wireguard %s: a link of kind %q appeared under the name while creating it", d.cfg.Name, k)
	}
	// The kernel's WireGuard may have been loaded by this create: a client
	// made before knows no such device.
	d.resetClient()
	d.log.Info("wireguard: created the kernel's device", "mtu", d.cfg.MTU)
	return link, nil
}

// unsupportedKind reports whether err, returned by LinkAdd, says the kernel
// does not know the link kind: EOPNOTSUPP ("Unknown device type").
func unsupportedKind(err error) bool {
	if errors.Is(err, unix.EOPNOTSUPP) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown device type") || strings.Contains(msg, "unknown link kind")
}

// ensureLink brings the link's MTU, addresses and admin state to the
// configuration. Once set on this link, a difference is a repair.
func (d *Device) ensureLink(link netlink.Link) error {
	report := func(object string) {
		if d.linkSet {
			d.log.Warn("wireguard: repairing the device's link, changed by something else", "object", object)
			d.repaired(object)
		}
	}
	var errs []error
	at := link.Attrs()
	if at.MTU != d.cfg.MTU {
		if err := d.nl.LinkSetMTU(link, d.cfg.MTU); err != nil {
			errs = append(errs, fmt.Errorf("set MTU %d (was %d): %w", d.cfg.MTU, at.MTU, err))
		} else {
			report("mtu")
		}
	}
	if err := d.ensureAddrs(link, report); err != nil {
		errs = append(errs, err)
	}
	if at.Flags&unix.IFF_UP == 0 {
		if err := d.nl.LinkSetUp(link); err != nil {
			errs = append(errs, fmt.Errorf("set up: %w", err))
		} else {
			report("up")
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wireguard %s: %w", d.cfg.Name, err)
	}
	d.linkSet = true
	return nil
}

// ensureAddrs makes the link's global addresses exactly the tunnel
// addresses; link-local and host-scope ones are the kernel's and stay.
func (d *Device) ensureAddrs(link netlink.Link, report func(string)) error {
	addrs, err := nlutil.Retry(func() ([]netlink.Addr, error) { return d.nl.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	have := map[netip.Prefix]bool{}
	var errs []error
	for i := range addrs {
		a := &addrs[i]
		p, ok := nlutil.Prefix(a.IPNet)
		if !ok || a.Scope != int(netlink.SCOPE_UNIVERSE) {
			continue
		}
		if !wantsAddr(d.cfg.Addrs, p) {
			if err := d.nl.AddrDel(link, a); err != nil && !nlutil.NotFound(err) {
				errs = append(errs, fmt.Errorf("remove address %s: %w", p, err))
				continue
			}
			report("address")
			continue
		}
		have[p] = true
	}
	for _, p := range d.cfg.Addrs {
		if have[p] {
			continue
		}
		a := &netlink.Addr{IPNet: &ipNets([]netip.Prefix{p})[0], Scope: int(netlink.SCOPE_UNIVERSE), Flags: unix.IFA_F_NODAD}
		if err := d.nl.AddrReplace(link, a); err != nil {
			errs = append(errs, fmt.Errorf("add address %s: %w", p, err))
			continue
		}
		report("address")
	}
	return errors.Join(errs...)
}

func wantsAddr(want []netip.Prefix, p netip.Prefix) bool {
	for _, w := range want {
		if w == p {
			return true
		}
	}
	return false
}

// wgClient is the part of wgctrl.Client the Device uses.
type wgClient interface {
	Device(name string) (*wgtypes.Device, error)
	ConfigureDevice(name string, cfg wgtypes.Config) error
	Close() error
}

// wgTimeout bounds one request to the device's configuration interface.
const wgTimeout = 5 * time.Second

// client returns the wgctrl client, opened in the Device's network
// namespace (the kernel's interface is a generic netlink socket there).
func (d *Device) client() (wgClient, error) {
	if d.wg != nil {
		return d.wg, nil
	}
	var c *wgctrl.Client
	err := d.inNetns(func() error {
		var err error
		c, err = wgctrl.New()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wgctrl: %w", err)
	}
	d.wg = c
	return c, nil
}

// resetClient closes the wgctrl client; the next request opens another.
func (d *Device) resetClient() {
	if d.wg != nil && !d.wgBusy.Load() {
		_ = d.wg.Close()
		d.wg = nil
	}
}

// wgCall runs f with d's client, giving up after wgTimeout: the userspace
// implementation's socket has no deadline, so a stopped datapath would
// block the caller for good. A call that gave up goes on in its goroutine
// until the datapath answers or goes away; meanwhile every further call
// fails at once, so at most one goroutine waits.
func wgCall[T any](d *Device, f func(c wgClient) (T, error)) (T, error) {
	var zero T
	c, err := d.client()
	if err != nil {
		return zero, err
	}
	if !d.wgBusy.CompareAndSwap(false, true) {
		return zero, errors.New("an earlier request to the device is still unanswered")
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(c)
		d.wgBusy.Store(false) // before the answer: the caller's next call may follow at once
		done <- result{v, err}
	}()
	t := time.NewTimer(wgTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		return zero, fmt.Errorf("no answer within %v", wgTimeout)
	}
}

// wgDevice reads the device's WireGuard configuration.
func (d *Device) wgDevice() (*wgtypes.Device, error) {
	get := func(c wgClient) (*wgtypes.Device, error) { return c.Device(d.cfg.Name) }
	dev, err := wgCall(d, get)
	if errors.Is(err, os.ErrNotExist) && d.impl == ImplKernel {
		// A client opened before the kernel's WireGuard was loaded has no
		// generic netlink family for it: open another.
		d.resetClient()
		dev, err = wgCall(d, get)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no WireGuard device %s answers: %w", d.cfg.Name, err)
	}
	return dev, err
}

// wgConfigure applies cfg to the device.
func (d *Device) wgConfigure(cfg wgtypes.Config) error {
	_, err := wgCall(d, func(c wgClient) (struct{}, error) { return struct{}{}, c.ConfigureDevice(d.cfg.Name, cfg) })
	return err
}

// answers reports nil when the device's configuration interface answers.
func (d *Device) answers() error {
	_, err := d.wgDevice()
	return err
}
