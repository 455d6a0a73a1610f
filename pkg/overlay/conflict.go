package overlay

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrUnsupported marks a device the running kernel cannot create: its link
// kind is neither built in nor loadable as a module (e.g. ipip on a kernel
// without CONFIG_NET_IPIP). Retrying cannot help; the daemon reports the
// error as the reason it is not ready.
var ErrUnsupported = errors.New("not supported by this kernel")

// ErrForeignDevice marks a device that cannot be created or brought up
// because a link or socket routelet does not own holds what it needs (a
// VXLAN device of another name on the same VNI and UDP port, as flannel's
// flannel.1 with its defaults). The error names the other device.
var ErrForeignDevice = errors.New("taken by a device routelet does not own")

// unsupportedKind reports whether err, returned by LinkAdd, says the kernel
// does not know the link kind: rtnetlink answers EOPNOTSUPP ("Unknown
// device type") when no driver registered the kind and none could be
// loaded. The decision is the kernel's answer, never a guess made earlier.
func unsupportedKind(err error) bool {
	if errors.Is(err, unix.EOPNOTSUPP) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown device type") || strings.Contains(msg, "unknown link kind")
}

// vxlanUsers returns the names of VXLAN devices other than want that use
// want's UDP port (and, when sameVNI, also its VNI), sorted. A failed link
// dump yields none: the caller then reports the kernel's own error.
func vxlanUsers(nl Netlink, want *netlink.Vxlan, sameVNI bool) []string {
	links, err := nl.LinkList()
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range links {
		v, ok := l.(*netlink.Vxlan)
		if !ok || v.Attrs().Name == want.Name || v.Port != want.Port || (sameVNI && v.VxlanId != want.VxlanId) ||
			VXLANFamily(v) != VXLANFamily(want) {
			continue
		}
		out = append(out, v.Attrs().Name)
	}
	slices.Sort(out)
	return out
}

// foreignVNIError is the error for a create refused with EEXIST because
// other holds want's VNI and port, or nil when no such device exists (the
// EEXIST was then about our own name).
func foreignVNIError(nl Netlink, want *netlink.Vxlan, err error) error {
	others := vxlanUsers(nl, want, true)
	if len(others) == 0 {
		return nil
	}
	return fmt.Errorf("vxlan %s: VNI %d on UDP port %d is already used by the vxlan device %s, which routelet does not own (%w; kernel: %v): remove that device or give routelet another --vxlan-vni or --vxlan-port",
		want.Name, want.VxlanId, want.Port, strings.Join(others, ", "), ErrForeignDevice, err)
}

// portInUseError is the error for bringing want up refused with
// EADDRINUSE: its UDP port is bound by a socket whose settings differ from
// ours, another VXLAN device's when one uses the port.
func portInUseError(nl Netlink, want *netlink.Vxlan, err error) error {
	holder := "another socket"
	if others := vxlanUsers(nl, want, false); len(others) > 0 {
		holder = "the vxlan device " + strings.Join(others, ", ")
	}
	return fmt.Errorf("vxlan %s: UDP port %d is already in use by %s, which routelet does not own (%w; kernel: %v): free the port or give routelet another --vxlan-port",
		want.Name, want.Port, holder, ErrForeignDevice, err)
}

// VXLANFamily returns the underlay family (4 or 6) of a VXLAN device: 6
// when its local or group address is IPv6. Devices of different families
// open different sockets, so they may share a VNI and port.
func VXLANFamily(v *netlink.Vxlan) int {
	for _, a := range []net.IP{v.SrcAddr, v.Group} {
		if a != nil && a.To4() == nil {
			return 6
		}
	}
	return 4
}
