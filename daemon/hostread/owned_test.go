package hostread

import (
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/pkg/nodespace"
)

// TestOwnedLinksByConfiguredNames: the daemon's owned-link rule (the
// node-space check's and the peer check's, overlay.OwnedLinks) goes by the
// configured VXLAN device name and the overlay devices' kind.
func TestOwnedLinksByConfiguredNames(t *testing.T) {
	cfg := &config.Config{IfacePrefix: "cali", VXLANDevice: "vx-custom"}
	own := OwnLink(cfg)
	for _, tc := range []struct {
		link nodespace.Link
		want bool
	}{
		{nodespace.Link{Name: "vx-custom", Type: "vxlan"}, true},
		{nodespace.Link{Name: "vx-custom", Type: "dummy"}, false},
		{nodespace.Link{Name: "vxlan.calico", Type: "vxlan"}, false},
		{nodespace.Link{Name: "vxlan-v6.calico", Type: "vxlan"}, true},
		{nodespace.Link{Name: "tunl0", Type: "ipip"}, true},
		{nodespace.Link{Name: "cali0001", Type: "veth"}, true},
		{nodespace.Link{Name: "eth0", Type: "veth"}, false},
	} {
		if got := own(tc.link); got != tc.want {
			t.Errorf("OwnLink(%s %s) = %v, want %v", tc.link.Name, tc.link.Type, got, tc.want)
		}
	}
}

// TestOwnedWireGuardDevice: with encryption wireguard the configured
// WireGuard device, of kind wireguard (kernel) or tun (userspace), is
// routelet's and an interface prefix matching it is refused; without
// encryption a link of that name is the node's like any other.
func TestOwnedWireGuardDevice(t *testing.T) {
	wg := config.WireGuard{Device: "wg-pods", Port: 51820, Implementation: config.WireGuardAuto}
	on := &config.Config{IfacePrefix: "cali", Encryption: config.EncryptionWireGuard, WireGuard: wg}
	off := &config.Config{IfacePrefix: "cali", Encryption: config.EncryptionNone, WireGuard: wg}
	if d := OverlayDevices(on); d.WireGuard != "wg-pods" {
		t.Errorf("OverlayDevices with encryption = %+v, want WireGuard wg-pods", d)
	}
	if d := OverlayDevices(off); d.WireGuard != "" {
		t.Errorf("OverlayDevices without encryption = %+v, want no WireGuard device", d)
	}
	for _, tc := range []struct {
		link    nodespace.Link
		on, off bool
	}{
		{nodespace.Link{Name: "wg-pods", Type: "wireguard"}, true, false},
		{nodespace.Link{Name: "wg-pods", Type: "tuntap"}, true, false},
		{nodespace.Link{Name: "wg-pods", Type: "dummy"}, false, false},
		{nodespace.Link{Name: "wireguard.cali", Type: "wireguard"}, false, false},
	} {
		if got := OwnLink(on)(tc.link); got != tc.on {
			t.Errorf("encryption on: OwnLink(%s %s) = %v, want %v", tc.link.Name, tc.link.Type, got, tc.on)
		}
		if got := OwnLink(off)(tc.link); got != tc.off {
			t.Errorf("encryption off: OwnLink(%s %s) = %v, want %v", tc.link.Name, tc.link.Type, got, tc.off)
		}
	}
	prefixed := *on
	prefixed.IfacePrefix = "wg"
	if _, err := CheckConfig(&prefixed); err == nil || !strings.Contains(err.Error(), "interface-prefix") || !strings.Contains(err.Error(), "wg-pods") {
		t.Errorf("CheckConfig with interface-prefix wg and WireGuard device wg-pods: %v, want an interface-prefix error naming wg-pods", err)
	}
}
