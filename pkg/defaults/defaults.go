// Package defaults holds the names and the ports routelet's dataplane uses
// on every node unless configured otherwise: the overlay and WireGuard
// devices, the VXLAN and WireGuard ports, the host veth prefix and the
// userspace WireGuard datapath's subcommand. pkg/overlay creates the devices,
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
	// DeviceWireGuard is the WireGuard device carrying pod traffic
	// between nodes when encryption is on (both IP families).
	DeviceWireGuard = "wireguard.cali"
	// WireGuardPort is the WireGuard UDP listen port (Calico's).
	WireGuardPort = 51820
	// WireGuardDatapathCommand is routeletd's hidden subcommand that runs
	// the userspace WireGuard datapath; cleanup and the test harness
	// recognise its processes by it.
	WireGuardDatapathCommand = "wireguard-datapath"
)
