package overlay

import (
	"testing"

	"github.com/routelet/routelet/pkg/netguard"
)

// TestOwnedLinks: pod veths by prefix and type, the overlay devices by
// their configured names and kind; the default names when none are given;
// a link of another kind under a device's name is not routelet's.
func TestOwnedLinks(t *testing.T) {
	configured := OwnedLinks("cali", Devices{VXLAN: "vx4", VXLANv6: "vx6", IPIP: "ipip0"})
	defaults := OwnedLinks("cali", Devices{})
	for _, tc := range []struct {
		link                 netguard.Link
		configured, defaults bool
	}{
		{netguard.Link{Name: "cali12345", Type: "veth"}, true, true},
		{netguard.Link{Name: "cali12345", Type: "dummy"}, false, false},
		{netguard.Link{Name: "eth0", Type: "veth"}, false, false},
		{netguard.Link{Name: "vx4", Type: "vxlan"}, true, false},
		{netguard.Link{Name: "vx6", Type: "vxlan"}, true, false},
		{netguard.Link{Name: "ipip0", Type: "ipip"}, true, false},
		{netguard.Link{Name: "vx4", Type: "dummy"}, false, false},
		{netguard.Link{Name: "ipip0", Type: "vxlan"}, false, false},
		{netguard.Link{Name: DeviceVXLAN, Type: "vxlan"}, false, true},
		{netguard.Link{Name: DeviceVXLANv6, Type: "vxlan"}, false, true},
		{netguard.Link{Name: DeviceIPIP, Type: "ipip"}, false, true},
		{netguard.Link{Name: DeviceIPIP, Type: "gre"}, false, false},
	} {
		if got := configured(tc.link); got != tc.configured {
			t.Errorf("configured names: %s (%s) owned = %v, want %v", tc.link.Name, tc.link.Type, got, tc.configured)
		}
		if got := defaults(tc.link); got != tc.defaults {
			t.Errorf("default names: %s (%s) owned = %v, want %v", tc.link.Name, tc.link.Type, got, tc.defaults)
		}
	}
}
