package overlay

import "github.com/routelet/routelet/pkg/nodespace"

// Devices names a node's overlay devices; an empty name means the default
// (DeviceVXLAN, DeviceVXLANv6, DeviceIPIP). The daemon takes them from its
// configuration and publishes them in daemon.json, where the CNI plugin
// reads them. WireGuard is the WireGuard device (encryption on), which
// has no default here: "" is none.
type Devices struct {
	VXLAN     string
	VXLANv6   string
	IPIP      string
	WireGuard string
}

// WithDefaults returns d with every empty name set to its default.
func (d Devices) WithDefaults() Devices {
	if d.VXLAN == "" {
		d.VXLAN = DeviceVXLAN
	}
	if d.VXLANv6 == "" {
		d.VXLANv6 = DeviceVXLANv6
	}
	if d.IPIP == "" {
		d.IPIP = DeviceIPIP
	}
	return d
}

// Names lists the device names, defaults filled in (the WireGuard device
// when there is one).
func (d Devices) Names() []string {
	d = d.WithDefaults()
	if d.WireGuard != "" {
		return []string{d.VXLAN, d.VXLANv6, d.IPIP, d.WireGuard}
	}
	return []string{d.VXLAN, d.VXLANv6, d.IPIP}
}

// OwnedLinks returns the rule by which a link is one routelet creates, so
// that its addresses and routes are routelet's and not the node's own: a
// pod veth (a name with prefix and type veth, nodespace.Owned) or one of the
// overlay devices devs names, by name and kind (a link of another kind
// under such a name is someone else's): "vxlan", "ipip", and for the
// WireGuard device "wireguard" (the kernel's) or "tuntap" (the userspace
// datapath's tun link, as the netlink library names its type).
func OwnedLinks(prefix string, devs Devices) func(nodespace.Link) bool {
	devs = devs.WithDefaults()
	return func(l nodespace.Link) bool {
		switch {
		case nodespace.Owned(l, prefix):
			return true
		case l.Name == devs.VXLAN || l.Name == devs.VXLANv6:
			return l.Type == "vxlan"
		case l.Name == devs.IPIP:
			return l.Type == "ipip"
		case devs.WireGuard != "" && l.Name == devs.WireGuard:
			return l.Type == "wireguard" || l.Type == "tuntap"
		}
		return false
	}
}
