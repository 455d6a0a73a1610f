// Package defaults holds the names and the port routelet's dataplane uses
// on every node unless configured otherwise: the overlay devices, the
// VXLAN port and the host veth prefix. pkg/overlay creates the devices,
// pkg/podnet names the veths, pkg/podguard and pkg/firewall match on
// them; each reads the defaults here, so the packages that only match on
// a name need not import the package that creates it. It imports nothing.
package defaults

const (
	// DeviceVXLAN is the IPv4 VXLAN device.
	DeviceVXLAN = "vxlan.calico"
	// DeviceVXLANv6 is the IPv6 VXLAN device.
	DeviceVXLANv6 = "vxlan-v6.calico"
	// DeviceIPIP is the IPIP device (the kernel's fallback tunnel).
	DeviceIPIP = "tunl0"
	// VXLANPort is the VXLAN UDP port (IANA's).
	VXLANPort = 4789
	// VethPrefix is the name prefix of host-side pod veths.
	VethPrefix = "cali"
)
