package nlutil

import (
	"net"
	"net/netip"
	"testing"
)

func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    *net.IPNet
		want string // "" for not ok
	}{
		{"IPv4 address with its host bits", &net.IPNet{IP: net.ParseIP("10.0.1.5"), Mask: net.CIDRMask(24, 32)}, "10.0.1.5/24"},
		{"IPv4 in 4 bytes", &net.IPNet{IP: net.IPv4(10, 0, 1, 5).To4(), Mask: net.CIDRMask(32, 32)}, "10.0.1.5/32"},
		{"IPv6", &net.IPNet{IP: net.ParseIP("fd00::1"), Mask: net.CIDRMask(64, 128)}, "fd00::1/64"},
		{"nil", nil, ""},
		{"no address", &net.IPNet{Mask: net.CIDRMask(24, 32)}, ""},
		{"mask with a hole", &net.IPNet{IP: net.ParseIP("10.0.1.5"), Mask: net.IPv4Mask(255, 0, 255, 0)}, ""},
	} {
		p, ok := Prefix(tc.n)
		switch {
		case tc.want == "" && ok:
			t.Errorf("%s: Prefix = %s, want not ok", tc.name, p)
		case tc.want != "" && (!ok || p != netip.MustParsePrefix(tc.want)):
			t.Errorf("%s: Prefix = %s, %v; want %s", tc.name, p, ok, tc.want)
		}
	}
}
