package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/nodeid"
)

// TestWireGuardPodMTU: with encryption on, pods get the uplink's MTU less
// WireGuard's 60 bytes over IPv4, 80 over an IPv6-only underlay; a
// configured MTU wins; an uplink too small for it is refused, naming it.
func TestWireGuardPodMTU(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	for _, tc := range []struct {
		configured int
		id         nodeid.Identity
		want       int
	}{
		{0, nodeid.Identity{IPv4: v4, IPv6: v6, MTU: 1500}, 1440},
		{0, nodeid.Identity{IPv6: v6, MTU: 1500}, 1420},
		{0, nodeid.Identity{IPv4: v4, MTU: 9000}, 8940},
		{0, nodeid.Identity{IPv4: v4}, 1440}, // MTU unknown: 1500
		{1300, nodeid.Identity{IPv4: v4, MTU: 1500}, 1300},
	} {
		if got, err := wireGuardPodMTU(tc.configured, tc.id); err != nil || got != tc.want {
			t.Errorf("mtu %d, identity %+v: %d, %v; want %d", tc.configured, tc.id, got, err, tc.want)
		}
	}
	if _, err := wireGuardPodMTU(0, nodeid.Identity{IPv4: v4, MTU: 600, Iface: "eth9"}); err == nil || !strings.Contains(err.Error(), "eth9") {
		t.Errorf("uplink MTU 600: %v, want an error naming eth9", err)
	}
}
