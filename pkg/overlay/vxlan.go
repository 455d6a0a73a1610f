package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TXChecksum says what to do with the VXLAN device's TX checksum offload.
type TXChecksum int

const (
	// TXChecksumAuto turns offload off only on kernels that need it
	// (KernelNeedsTXChecksumOff) and otherwise leaves it alone.
	TXChecksumAuto TXChecksum = iota
	// TXChecksumOff always turns offload off.
	TXChecksumOff
	// TXChecksumKeep never touches it.
	TXChecksumKeep
)

// VXLANConfig configures one VXLAN device (one IP family of underlay).
type VXLANConfig struct {
	IPVersion int    // underlay and tunnel family: 4 (default) or 6
	Device    string // default DeviceVXLAN, or DeviceVXLANv6 for IPVersion 6
	VNI       int    // default DefaultVNI
	Port      int    // UDP destination port, default DefaultPort

	// HostIP is our underlay address: the outer source address, and the
	// parent is the link holding it. Required.
	HostIP netip.Addr
	// NodeName derives the VTEP MAC (VTEPMAC) when MAC is nil.
	NodeName string
	MAC      net.HardwareAddr
	// TunnelAddr is the device's only address (/32 or /128); invalid means
	// not known yet, and the device then carries no address.
	TunnelAddr netip.Addr
	// MTU of the device; 0 means the parent's MTU minus 50 (70 for IPv6).
	MTU        int
	TXChecksum TXChecksum
	Logger     *slog.Logger
	// OnRepair, when set, is called with "master" each time Apply takes
	// the device out of a bridge someone enslaved it to.
	OnRepair func(object string)
}

// withDefaults validates c and fills in the defaults; the error names the
// bad value.
func (c VXLANConfig) withDefaults() (VXLANConfig, error) {
	if c.IPVersion == 0 {
		c.IPVersion = 4
	}
	if c.IPVersion != 4 && c.IPVersion != 6 {
		return c, fmt.Errorf("vxlan config: ip version %d: want 4 or 6", c.IPVersion)
	}
	if c.Device == "" {
		c.Device = DeviceVXLAN
		if c.IPVersion == 6 {
			c.Device = DeviceVXLANv6
		}
	}
	if len(c.Device) >= unix.IFNAMSIZ || strings.ContainsAny(c.Device, "/: \x00") {
		return c, fmt.Errorf("vxlan config: device name %q is not a valid interface name", c.Device)
	}
	if c.VNI == 0 {
		c.VNI = DefaultVNI
	}
	if c.VNI < 1 || c.VNI > 1<<24-1 {
		return c, fmt.Errorf("vxlan config: VNI %d: want 1..16777215", c.VNI)
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Port < 1 || c.Port > 65535 {
		return c, fmt.Errorf("vxlan config: port %d: want 1..65535", c.Port)
	}
	c.HostIP = c.HostIP.Unmap()
	if !c.HostIP.IsValid() || familyOf(c.HostIP) != c.IPVersion {
		return c, fmt.Errorf("vxlan config: host IP %q: want an IPv%d address", c.HostIP, c.IPVersion)
	}
	c.TunnelAddr = c.TunnelAddr.Unmap()
	if c.TunnelAddr.IsValid() && familyOf(c.TunnelAddr) != c.IPVersion {
		return c, fmt.Errorf("vxlan config: tunnel address %s: want an IPv%d address", c.TunnelAddr, c.IPVersion)
	}
	if c.MAC == nil {
		if c.NodeName == "" {
			return c, errors.New("vxlan config: neither a VTEP MAC nor a node name to derive one from")
		}
		c.MAC = VTEPMAC(c.NodeName, c.IPVersion)
	}
	if len(c.MAC) != 6 || c.MAC[0]&1 != 0 || isZeroMAC(c.MAC) {
		return c, fmt.Errorf("vxlan config: MAC %s: want a 6-byte unicast MAC", c.MAC)
	}
	if c.MTU < 0 || c.MTU > 65535 {
		return c, fmt.Errorf("vxlan config: MTU %d out of range", c.MTU)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// VXLAN keeps one VXLAN device and its ARP/NDP and FDB entries in line with
// the configuration and the peers. It is safe for concurrent use: setters
// and hints may be called while Apply runs, and take effect on the next Apply.
type VXLAN struct {
	nl Netlink

	// mu guards every field below. Apply holds it for its whole run.
	mu          sync.Mutex
	cfg         VXLANConfig
	log         *slog.Logger
	deviceDirty bool
	// l2 is the entries the peers need and what changed in them since
	// the kernel held them; haveOK says the kernel is known to hold what
	// l2 says it had (false until the first successful write and after a
	// failed one).
	l2     l2State
	haveOK bool
	// echo holds the entry writes whose notifications may still come.
	echo echoes
	// l2Dirty: the next Apply re-reads every entry and repairs (syncL2);
	// l2Changed: the peers changed entries, and the next Apply writes only
	// those.
	l2Dirty, l2Changed bool
	dev                DeviceInfo
}

// NewVXLAN returns a manager for the device cfg describes. Nothing touches
// the kernel until Apply.
func NewVXLAN(nl Netlink, cfg VXLANConfig) (*VXLAN, error) {
	m := &VXLAN{nl: nl, deviceDirty: true, l2Dirty: true}
	if err := m.SetConfig(cfg); err != nil {
		return nil, err
	}
	return m, nil
}

// SetConfig replaces the configuration (e.g. when our tunnel address or host
// IP becomes known) and marks the device dirty. On a validation error, which
// names the bad value, the previous configuration stays.
func (m *VXLAN) SetConfig(cfg VXLANConfig) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.Device != "" && m.cfg.Device != c.Device {
		return fmt.Errorf("vxlan config: device name cannot change from %s to %s", m.cfg.Device, c.Device)
	}
	if m.cfg.IPVersion != 0 && m.cfg.IPVersion != c.IPVersion {
		return fmt.Errorf("vxlan config: ip version cannot change from %d to %d", m.cfg.IPVersion, c.IPVersion)
	}
	if m.cfg.IPVersion == 0 {
		m.l2 = newL2State(c.IPVersion)
	}
	m.cfg = c
	m.log = c.Logger.With("iface", c.Device)
	m.dev.Name = c.Device
	m.deviceDirty = true
	m.l2Dirty = true
	return nil
}

// SetPeers replaces the set of peers whose VTEPs get ARP/NDP and FDB
// entries. Peers lacking a VTEP MAC, tunnel IP or host IP of this family
// get none (see Routes for how their blocks are handled). The next Apply
// writes only the entries that differ from what the kernel is known to
// hold; peers that change nothing in them cost no kernel call.
func (m *VXLAN) SetPeers(peers []Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.l2.setPeers(m.cfg.IPVersion, peers) {
		m.l2Changed = true
	}
}

// OnLinkUpdate is the hint for a netlink link event (new, changed or deleted
// link) naming ifname: an event for the device or its parent marks the
// device dirty. It reports whether the event was relevant.
func (m *VXLAN) OnLinkUpdate(ifname string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ifname != m.cfg.Device && (ifname == "" || ifname != m.dev.Parent.Name) {
		return false
	}
	m.deviceDirty = true
	return true
}

// QueueCheck is the periodic check hook: the next Apply re-reads the device,
// its addresses and all its neighbour and FDB entries and repairs any drift.
func (m *VXLAN) QueueCheck() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deviceDirty = true
	m.l2Dirty = true
}

// Dirty reports whether Apply has work to do.
func (m *VXLAN) Dirty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deviceDirty || m.l2Dirty || m.l2Changed
}

// Device returns the device state the last Apply reached.
func (m *VXLAN) Device() DeviceInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dev
	d.MAC = bytes.Clone(d.MAC)
	return d
}

// Apply reconciles the kernel with the desired state: first the device
// (created if missing, recreated when an attribute that cannot change in
// place differs, then MTU, MAC, address, checksum offload and admin-up
// re-asserted), then the ARP/NDP and FDB entries: re-read and repaired
// after a check (QueueCheck, a drift event, a new device, a failure),
// otherwise only the entries the peers changed are written. Parts that
// fail stay dirty for the next Apply (entries: re-read); the error joins
// every failure.
func (m *VXLAN) Apply() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if m.deviceDirty {
		if err := m.applyDevice(); err != nil {
			errs = append(errs, err)
		} else {
			m.deviceDirty = false
		}
	}
	if m.l2Dirty || m.l2Changed {
		if err := m.applyL2(); err != nil {
			errs = append(errs, fmt.Errorf("vxlan %s: %w", m.cfg.Device, err))
		}
	}
	return errors.Join(errs...)
}

// applyL2 brings the entries to the wanted ones: from a fresh read of
// both tables when l2Dirty or nothing is known of them, else by writing
// the entries that changed. On failure the kernel is uncertain: the next Apply re-reads.
// m.mu is held.
func (m *VXLAN) applyL2() error {
	if m.dev.Index == 0 {
		return errors.New("no device to hold neighbour entries")
	}
	var err error
	if m.l2Dirty || !m.haveOK {
		err = syncL2(m.nl, m.log, &m.echo, m.dev.Index, m.cfg.IPVersion, m.l2.want)
	} else {
		err = m.l2.write(m.nl, m.log, &m.echo, m.dev.Index, m.cfg.IPVersion)
	}
	if err != nil {
		m.l2Dirty, m.haveOK = true, false
		return err
	}
	m.l2.held()
	m.haveOK = true
	m.l2Dirty, m.l2Changed = false, false
	return nil
}

// applyDevice brings the device in line with m.cfg. m.mu is held.
func (m *VXLAN) applyDevice() error {
	c := m.cfg
	parent, err := FindParent(m.nl, c.HostIP)
	if err != nil {
		return fmt.Errorf("vxlan %s: %w", c.Device, err)
	}
	m.dev.Parent = parent
	mtu, err := PodMTU(c.MTU, parent.MTU, ModeVXLAN, c.IPVersion == 6)
	if err != nil {
		return fmt.Errorf("vxlan %s: %w", c.Device, err)
	}
	want := &netlink.Vxlan{
		LinkAttrs:    netlink.LinkAttrs{Name: c.Device, MTU: mtu, HardwareAddr: c.MAC},
		VxlanId:      c.VNI,
		Port:         c.Port,
		VtepDevIndex: parent.Index,
		SrcAddr:      net.IP(c.HostIP.AsSlice()),
		Learning:     false,
	}

	link, err := m.nl.LinkByName(c.Device)
	switch {
	case errors.Is(err, ErrLinkNotFound):
		link = nil
	case err != nil:
		return fmt.Errorf("vxlan %s: %w", c.Device, err)
	}
	if link != nil {
		if why := vxlanIncompatible(want, link); why != "" {
			m.log.Info("recreating vxlan device", "reason", why)
			if err := deleteLink(m.nl, link); err != nil {
				return fmt.Errorf("vxlan %s: recreate (%s): %w", c.Device, why, err)
			}
			m.dev.Index = 0
			link = nil
		}
	}
	if link == nil {
		if link, err = m.create(want); err != nil {
			return err
		}
	}
	if idx := link.Attrs().Index; idx != m.dev.Index {
		// Another device under our name (or our first look at it): what
		// the old index held says nothing about this one.
		m.dev.Index, m.l2Dirty = idx, true
	}

	// Independent in-place fixes: one failing does not stop the others.
	var errs []error
	if err := m.ensureNoMaster(link); err != nil {
		errs = append(errs, err)
	}
	if !bytes.Equal(link.Attrs().HardwareAddr, c.MAC) {
		// The vxlan driver allows a MAC change while the device is up, so
		// the MAC is re-asserted in place rather than by recreation.
		if err := m.nl.LinkSetHardwareAddr(link, c.MAC); err != nil {
			errs = append(errs, fmt.Errorf("set MAC of %s to %s: %w", c.Device, c.MAC, err))
		} else {
			m.log.Debug("set device MAC", "old", link.Attrs().HardwareAddr.String(), "mac", c.MAC.String())
			link.Attrs().HardwareAddr = c.MAC
		}
	}
	if err := ensureMTU(m.nl, m.log, link, mtu); err != nil {
		errs = append(errs, err)
	}
	if err := ensureOnlyAddress(m.nl, m.log, link, c.IPVersion, c.TunnelAddr); err != nil {
		errs = append(errs, err)
	}
	if err := m.ensureTXChecksum(); err != nil {
		errs = append(errs, err)
	}
	if err := ensureUp(m.nl, m.log, link); errors.Is(err, unix.EADDRINUSE) {
		errs = append(errs, portInUseError(m.nl, want, err))
	} else if err != nil {
		errs = append(errs, err)
	}
	at := link.Attrs()
	m.dev.MTU, m.dev.MAC, m.dev.TunnelAddr = at.MTU, bytes.Clone(at.HardwareAddr), c.TunnelAddr
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vxlan %s: %w", c.Device, err)
	}
	return nil
}

// ensureNoMaster takes the device out of a bridge (or bond) it was
// enslaved to: as a bridge port it would hand decapsulated frames to the
// bridge instead of routing them. m.mu is held.
func (m *VXLAN) ensureNoMaster(link netlink.Link) error {
	at := link.Attrs()
	if at.MasterIndex == 0 {
		return nil
	}
	master := fmt.Sprintf("index %d", at.MasterIndex)
	if l, err := m.nl.LinkByIndex(at.MasterIndex); err == nil {
		master = l.Attrs().Name
	}
	if err := m.nl.LinkSetNoMaster(link); err != nil {
		return fmt.Errorf("take %s out of %s: %w", at.Name, master, err)
	}
	m.log.Warn("took the vxlan device out of the bridge it was enslaved to", "master", master)
	at.MasterIndex = 0
	if m.cfg.OnRepair != nil {
		m.cfg.OnRepair("master")
	}
	return nil
}

// create adds the device and reads it back. A device that appeared in the
// meantime (EEXIST) is read back too; the next Apply checks its attributes.
func (m *VXLAN) create(want *netlink.Vxlan) (netlink.Link, error) {
	if err := m.nl.LinkAdd(want); err != nil {
		switch {
		case errors.Is(err, unix.EEXIST):
			// Either our name appeared meanwhile (read back below) or a
			// device of another name holds our VNI and port.
			if ferr := foreignVNIError(m.nl, want, err); ferr != nil {
				return nil, ferr
			}
		case unsupportedKind(err):
			return nil, fmt.Errorf("vxlan %s: create: the kernel cannot create vxlan links (%w: %v): load the vxlan module (CONFIG_VXLAN) or choose another --encapsulation",
				want.Name, ErrUnsupported, err)
		default:
			return nil, fmt.Errorf("vxlan %s: create (VNI %d, port %d, parent %s, local %s): %w",
				want.Name, want.VxlanId, want.Port, m.dev.Parent.Name, want.SrcAddr, err)
		}
	}
	link, err := m.nl.LinkByName(want.Name)
	if err != nil {
		return nil, fmt.Errorf("vxlan %s: read back after create: %w", want.Name, err)
	}
	m.dev.Created++
	m.l2Dirty = true // a new device has no neighbour or FDB entries
	m.log.Info("created vxlan device", "vni", want.VxlanId, "port", want.Port,
		"parent", m.dev.Parent.Name, "local", want.SrcAddr.String(), "mac", want.HardwareAddr.String())
	return link, nil
}

// vxlanIncompatible returns why link cannot be brought to want in place, or
// "" when it can: a different link type, VNI, port, parent, source address
// or learning setting means deleting and recreating the device.
func vxlanIncompatible(want *netlink.Vxlan, link netlink.Link) string {
	have, ok := link.(*netlink.Vxlan)
	if !ok {
		return fmt.Sprintf("link type %q, want vxlan", link.Type())
	}
	switch {
	case have.VxlanId != want.VxlanId:
		return fmt.Sprintf("VNI %d, want %d", have.VxlanId, want.VxlanId)
	case have.Port != want.Port:
		return fmt.Sprintf("port %d, want %d", have.Port, want.Port)
	case have.VtepDevIndex != want.VtepDevIndex:
		return fmt.Sprintf("parent index %d, want %d", have.VtepDevIndex, want.VtepDevIndex)
	case !have.SrcAddr.Equal(want.SrcAddr):
		return fmt.Sprintf("source address %s, want %s", have.SrcAddr, want.SrcAddr)
	case have.Learning != want.Learning:
		return fmt.Sprintf("learning %v, want %v", have.Learning, want.Learning)
	}
	return ""
}

// ensureTXChecksum turns TX checksum offload off when the configuration
// says so. m.mu is held.
func (m *VXLAN) ensureTXChecksum() error {
	switch m.cfg.TXChecksum {
	case TXChecksumKeep:
		return nil
	case TXChecksumAuto:
		if !KernelNeedsTXChecksumOff() {
			return nil
		}
	}
	on, err := m.nl.TXChecksum(m.cfg.Device)
	if err != nil {
		return err
	}
	if !on {
		return nil
	}
	if err := m.nl.SetTXChecksum(m.cfg.Device, false); err != nil {
		return err
	}
	m.log.Debug("turned TX checksum offload off")
	return nil
}

// KernelNeedsTXChecksumOff reports whether the running kernel is older than
// 5.7. Older kernels could send VXLAN packets whose outer UDP checksum was
// left wrong when offload was on and the inner packet was NAT-ed (as on the
// way to a Kubernetes service), so the device's TX checksum offload is turned
// off there; 5.7 and newer need nothing. The check is by version only, a
// heuristic: TXChecksumOff forces the change on kernels with the fix
// backported wrongly or distributions that report odd versions.
func KernelNeedsTXChecksumOff() bool {
	kernelOnce.Do(func() {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return
		}
		major, minor, ok := parseKernelVersion(unix.ByteSliceToString(u.Release[:]))
		kernelOld = ok && (major < 5 || major == 5 && minor < 7)
	})
	return kernelOld
}

var (
	kernelOnce sync.Once
	kernelOld  bool
)

// parseKernelVersion reads "major.minor" from the start of a release string
// such as "6.1.0-18-amd64".
func parseKernelVersion(release string) (major, minor int, ok bool) {
	n, err := fmt.Sscanf(release, "%d.%d", &major, &minor)
	return major, minor, err == nil && n == 2
}
