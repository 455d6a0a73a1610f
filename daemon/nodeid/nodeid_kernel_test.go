package nodeid

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestDetectKernel runs autodetection against a real namespace with a dummy
// uplink and a default route.
func TestDetectKernel(t *testing.T) {
	n := netnstest.NewT(t)
	err := n.Do(func() error {
		// No dummy driver on every kernel: a veth pair whose both ends
		// stay here works as an uplink.
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0", MTU: 1400}, PeerName: "uplink1"}); err != nil {
			return err
		}
		l, err := netlink.LinkByName("uplink0")
		if err != nil {
			return err
		}
		for _, name := range []string{"uplink0", "uplink1"} {
			if err := netlink.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
				return err
			}
		}
		addr, _ := netlink.ParseAddr("192.0.2.10/24")
		if err := netlink.AddrAdd(l, addr); err != nil {
			return err
		}
		gw := net.ParseIP("192.0.2.1")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw}); err != nil {
			return err
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		id, err := Detect(h, "", nil)
		if err != nil {
			return err
		}
		if id.IPv4 != netip.MustParseAddr("192.0.2.10") || id.Iface != "uplink0" || id.MTU != 1400 {
			t.Errorf("Detect = %+v, want 192.0.2.10 on uplink0 mtu 1400", id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
