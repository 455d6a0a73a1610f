package hostread

import (
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
