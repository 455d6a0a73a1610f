package state

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// maxContainerIDLen is a sane bound; runtimes use 64 hex characters.
const maxContainerIDLen = 256

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ValidateContainerID checks id against the CNI spec's charset:
// ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$ and a sane length (≤ 256). The error names id.
func ValidateContainerID(id string) error {
	if id == "" {
		return fmt.Errorf("invalid container ID %q: empty", id)
	}
	if len(id) > maxContainerIDLen {
		return fmt.Errorf("invalid container ID %q: longer than %d bytes", id, maxContainerIDLen)
	}
	if !isAlnum(id[0]) {
		return fmt.Errorf("invalid container ID %q: must start with a letter or digit", id)
	}
	for i := 1; i < len(id); i++ {
		c := id[i]
		if !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return fmt.Errorf("invalid container ID %q: character %q not in [a-zA-Z0-9_.-]", id, c)
		}
	}
	return nil
}

// ValidateIfName checks a Linux interface name: 1..15 bytes, not "." or "..",
// no '/', ':', whitespace or NUL, mirroring the kernel's dev_valid_name. The
// error names the value.
func ValidateIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("invalid interface name %q: empty", name)
	case len(name) > 15:
		return fmt.Errorf("invalid interface name %q: longer than 15 bytes", name)
	case name == "." || name == "..":
		return fmt.Errorf("invalid interface name %q", name)
	}
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '/', ':', 0, ' ', '\t', '\n', '\v', '\f', '\r':
			return fmt.Errorf("invalid interface name %q: contains %q", name, name[i])
		}
	}
	return nil
}

// ValidateNodeName checks a node name usable as a file name (DNS-1123-ish,
// ≤ 253 bytes, no '/', "..", NUL).
func ValidateNodeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("invalid node name %q: empty", name)
	case len(name) > 253:
		return fmt.Errorf("invalid node name %q: longer than 253 bytes", name)
	case !isAlnum(name[0]) || !isAlnum(name[len(name)-1]):
		return fmt.Errorf("invalid node name %q: must start and end with a letter or digit", name)
	case strings.Contains(name, ".."):
		return fmt.Errorf("invalid node name %q: contains \"..\"", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && c != '-' && c != '.' {
			return fmt.Errorf("invalid node name %q: character %q not in [a-zA-Z0-9.-]", name, c)
		}
	}
	return nil
}

// validateCIDRs checks that every entry parses as a prefix; what names the field.
func validateCIDRs(what string, cidrs []string) error {
	for _, c := range cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("invalid %s %q: %w", what, c, err)
		}
	}
	return nil
}

// validateMAC accepts "" or a MAC address; what names the field.
func validateMAC(what, mac string) error {
	if mac == "" {
		return nil
	}
	if _, err := net.ParseMAC(mac); err != nil {
		return fmt.Errorf("invalid %s %q: %w", what, mac, err)
	}
	return nil
}

// validateIP accepts "" or an address of the given family (4 or 6).
func validateIP(what, s string, family int) error {
	if s == "" {
		return nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("invalid %s %q: %w", what, s, err)
	}
	if family == 4 && !a.Is4() || family == 6 && !(a.Is6() && !a.Is4In6()) {
		return fmt.Errorf("invalid %s %q: not an IPv%d address", what, s, family)
	}
	return nil
}

// validate checks every field a reader or the daemon relies on.
func (w *Workload) validate() error {
	if err := ValidateContainerID(w.ContainerID); err != nil {
		return err
	}
	if err := ValidateIfName(w.IfName); err != nil {
		return err
	}
	if err := ValidateIfName(w.HostIface); err != nil {
		return fmt.Errorf("host interface: %w", err)
	}
	if err := validateCIDRs("workload IP", w.IPs); err != nil {
		return err
	}
	if strings.ContainsRune(w.Netns, 0) {
		return fmt.Errorf("invalid netns path %q: contains NUL", w.Netns)
	}
	return validateMAC("container MAC", w.ContainerMAC)
}

// validate checks the node name and every address, block and MAC.
func (n *Node) validate() error {
	if err := ValidateNodeName(n.Name); err != nil {
		return err
	}
	if err := validateIP("host IPv4", n.HostIPv4, 4); err != nil {
		return err
	}
	if err := validateIP("host IPv6", n.HostIPv6, 6); err != nil {
		return err
	}
	if err := validateIP("tunnel IPv4", n.TunnelIPv4, 4); err != nil {
		return err
	}
	if err := validateIP("tunnel IPv6", n.TunnelIPv6, 6); err != nil {
		return err
	}
	if err := validateCIDRs("node block", n.Blocks); err != nil {
		return err
	}
	if err := validateMAC("VTEP MAC", n.VTEPMAC); err != nil {
		return err
	}
	// The WireGuard key and port and the BGP AS number are left to
	// pkg/peers, which refuses a bad one alone and keeps the rest of the
	// record.
	return validateMAC("VTEP MAC (IPv6)", n.VTEPMACv6)
}

// validate checks the MTU range, the route protocol (0 for unset, else
// 5–255: 0–4 are the kernel's own) and the blocks.
func (d *DaemonStatus) validate() error {
	if d.PodMTU < 0 || d.PodMTU > 65535 {
		return fmt.Errorf("invalid pod MTU %d", d.PodMTU)
	}
	if d.RouteProtocol != 0 && (d.RouteProtocol < 5 || d.RouteProtocol > 255) {
		return fmt.Errorf("invalid route protocol %d (want 5–255)", d.RouteProtocol)
	}
	return validateCIDRs("daemon block", d.Blocks)
}
