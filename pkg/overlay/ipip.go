package overlay

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IPIPConfig configures the IPIP device (IPv4 only).
type IPIPConfig struct {
	Device string // default DeviceIPIP (tunl0, the kernel's fallback device)
	// HostIP finds the parent, whose MTU sets the device MTU when MTU is 0.
	// Optional when MTU is given.
	HostIP netip.Addr
	// TunnelAddr is the device's only IPv4 address (/32); invalid means not
	// known yet.
	TunnelAddr netip.Addr
	MTU        int // 0 means the parent's MTU minus 20
	Logger     *slog.Logger
}

// withDefaults validates c and fills in the defaults.
func (c IPIPConfig) withDefaults() (IPIPConfig, error) {
	if c.Device == "" {
		c.Device = DeviceIPIP
	}
	if len(c.Device) >= unix.IFNAMSIZ {
		return c, fmt.Errorf("ipip config: device name %q too long", c.Device)
	}
	c.HostIP, c.TunnelAddr = c.HostIP.Unmap(), c.TunnelAddr.Unmap()
	if c.HostIP.IsValid() && !c.HostIP.Is4() {
		return c, fmt.Errorf("ipip config: host IP %s: IPIP carries IPv4 only", c.HostIP)
	}
	if c.TunnelAddr.IsValid() && !c.TunnelAddr.Is4() {
		return c, fmt.Errorf("ipip config: tunnel address %s: IPIP carries IPv4 only", c.TunnelAddr)
	}
	if c.MTU < 0 || c.MTU > 65535 {
		return c, fmt.Errorf("ipip config: MTU %d out of range", c.MTU)
	}
	if c.MTU == 0 && !c.HostIP.IsValid() {
		return c, errors.New("ipip config: neither an MTU nor a host IP to derive it from")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// IPIP keeps the IPIP device up, at the right MTU and with the tunnel
// address as its only IPv4 address. Peers need no per-peer state on the
// device: their routes (Routes) name the outer destination. It is safe for
// concurrent use.
//
// tunl0 is the fallback device the kernel creates in every namespace once
// the ipip module is loaded; asking for an ipip link named tunl0 loads the
// module, so the device is created by adding it and accepting EEXIST. Its
// tunnel parameters (any local, any remote) are the kernel's and are not
// changed.
type IPIP struct {
	nl Netlink

	// mu guards every field below; Apply holds it for its whole run.
	mu    sync.Mutex
	cfg   IPIPConfig
	log   *slog.Logger
	dirty bool
	dev   DeviceInfo
}

// NewIPIP returns a manager for the IPIP device cfg describes. Nothing
// touches the kernel until Apply.
func NewIPIP(nl Netlink, cfg IPIPConfig) (*IPIP, error) {
	m := &IPIP{nl: nl, dirty: true}
	if err := m.SetConfig(cfg); err != nil {
		return nil, err
	}
	return m, nil
}

// SetConfig replaces the configuration and marks the device dirty; on a
// validation error the previous configuration stays.
func (m *IPIP) SetConfig(cfg IPIPConfig) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg = c
	m.log = c.Logger.With("iface", c.Device)
	m.dev.Name = c.Device
	m.dirty = true
	return nil
}

// OnLinkUpdate marks the device dirty when a netlink link event names it or
// its parent, and reports whether it did.
func (m *IPIP) OnLinkUpdate(ifname string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ifname != m.cfg.Device && (ifname == "" || ifname != m.dev.Parent.Name) {
		return false
	}
	m.dirty = true
	return true
}

// QueueCheck is the periodic check hook: the next Apply re-reads the device.
func (m *IPIP) QueueCheck() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirty = true
}

// Dirty reports whether Apply has work to do.
func (m *IPIP) Dirty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dirty
}

// Device returns the device state the last Apply reached.
func (m *IPIP) Device() DeviceInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dev
}

// Apply creates the device when missing and re-asserts MTU, the tunnel
// address and admin-up. On failure the device stays dirty; the error joins
// every failed step.
func (m *IPIP) Apply() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirty {
		return nil
	}
	if err := m.apply(); err != nil {
		return fmt.Errorf("ipip %s: %w", m.cfg.Device, err)
	}
	m.dirty = false
	return nil
}

// apply does the work of Apply; m.mu is held.
func (m *IPIP) apply() error {
	c := m.cfg
	mtu := c.MTU
	if c.HostIP.IsValid() {
		parent, err := FindParent(m.nl, c.HostIP)
		if err != nil && mtu == 0 {
			return err
		}
		m.dev.Parent = parent
		if mtu == 0 {
			if mtu, err = PodMTU(0, parent.MTU, ModeIPIP, false); err != nil {
				return err
			}
		}
	}

	link, err := m.nl.LinkByName(c.Device)
	if errors.Is(err, ErrLinkNotFound) {
		add := &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: c.Device}}
		if err := m.nl.LinkAdd(add); err != nil && !errors.Is(err, unix.EEXIST) {
			if unsupportedKind(err) {
				return fmt.Errorf("create: the kernel cannot create ipip links (%w: %v): load the ipip module (CONFIG_NET_IPIP) or choose another --encapsulation", ErrUnsupported, err)
			}
			return fmt.Errorf("create: %w", err)
		}
		if link, err = m.nl.LinkByName(c.Device); err != nil {
			return fmt.Errorf("read back after create: %w", err)
		}
		m.dev.Created++
		m.log.Info("created ipip device")
	} else if err != nil {
		return err
	}
	if _, ok := link.(*netlink.Iptun); !ok {
		// Not ours to delete: a foreign link holds the name.
		return fmt.Errorf("link is of type %q, want ipip", link.Type())
	}
	m.dev.Index = link.Attrs().Index

	var errs []error
	if err := ensureMTU(m.nl, m.log, link, mtu); err != nil {
		errs = append(errs, err)
	}
	if err := ensureOnlyAddress(m.nl, m.log, link, 4, c.TunnelAddr); err != nil {
		errs = append(errs, err)
	}
	if err := ensureUp(m.nl, m.log, link); err != nil {
		errs = append(errs, err)
	}
	m.dev.MTU, m.dev.MAC, m.dev.TunnelAddr = link.Attrs().MTU, nil, c.TunnelAddr
	return errors.Join(errs...)
}
