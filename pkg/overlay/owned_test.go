package overlay_test

import (
	"slices"
	"testing"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
)

// TestOwnedLinks: pod veths by prefix and type, the overlay devices by
// their configured names and kind; the default names when none are given;
// a link of another kind under a device's name is not routelet's.
func TestOwnedLinks(t *testing.T) {
	configured := overlay.OwnedLinks("cali", overlay.Devices{VXLAN: "vx4", VXLANv6: "vx6", IPIP: "ipip0", WireGuard: "wg-pods"})
	defaults := overlay.OwnedLinks("cali", overlay.Devices{})
	for _, tc := range []struct {
		link                 nodespace.Link
		configured, defaults bool
	}{
		{nodespace.Link{Name: "cali12345", Type: "veth"}, true, true},
		{nodespace.Link{Name: "cali12345", Type: "dummy"}, false, false},
		{nodespace.Link{Name: "eth0", Type: "veth"}, false, false},
		{nodespace.Link{Name: "vx4", Type: "vxlan"}, true, false},
		{nodespace.Link{Name: "vx6", Type: "vxlan"}, true, false},
		{nodespace.Link{Name: "ipip0", Type: "ipip"}, true, false},
		{nodespace.Link{Name: "vx4", Type: "dummy"}, false, false},
		{nodespace.Link{Name: "ipip0", Type: "vxlan"}, false, false},
		{nodespace.Link{Name: overlay.DeviceVXLAN, Type: "vxlan"}, false, true},
		{nodespace.Link{Name: overlay.DeviceVXLANv6, Type: "vxlan"}, false, true},
		{nodespace.Link{Name: overlay.DeviceIPIP, Type: "ipip"}, false, true},
		{nodespace.Link{Name: overlay.DeviceIPIP, Type: "gre"}, false, false},
		// The WireGuard device, the kernel's or the userspace one, only
		// when there is one: it has no default name.
		{nodespace.Link{Name: "wg-pods", Type: "wireguard"}, true, false},
		{nodespace.Link{Name: "wg-pods", Type: "tuntap"}, true, false},
		{nodespace.Link{Name: "wg-pods", Type: "dummy"}, false, false},
		{nodespace.Link{Name: "wireguard.cali", Type: "wireguard"}, false, false},
		{nodespace.Link{Name: "", Type: "wireguard"}, false, false},
	} {
		if got := configured(tc.link); got != tc.configured {
			t.Errorf("configured names: %s (%s) owned = %v, want %v", tc.link.Name, tc.link.Type, got, tc.configured)
		}
		if got := defaults(tc.link); got != tc.defaults {
			t.Errorf("default names: %s (%s) owned = %v, want %v", tc.link.Name, tc.link.Type, got, tc.defaults)
		}
	}
}

// TestDevicesNames: the device names with defaults, the WireGuard device
// only when there is one.
func TestDevicesNames(t *testing.T) {
	got := overlay.Devices{VXLAN: "vx4"}.Names()
	if want := []string{"vx4", overlay.DeviceVXLANv6, overlay.DeviceIPIP}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	got = overlay.Devices{WireGuard: "wireguard.cali"}.Names()
	if want := []string{overlay.DeviceVXLAN, overlay.DeviceVXLANv6, overlay.DeviceIPIP, "wireguard.cali"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}
