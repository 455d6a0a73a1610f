package nodespace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// checkErr fails t unless err is nil where want is "", else an error
// holding want and each of also; call is what returned err.
func checkErr(t *testing.T, call string, err error, want string, also ...string) {
	t.Helper()
	wants := append([]string{want}, also...)
	switch {
	case want == "" && err != nil:
		t.Errorf("%s = %v, want accepted", call, err)
	case want != "" && (err == nil || slices.ContainsFunc(wants, func(w string) bool { return !strings.Contains(err.Error(), w) })):
		t.Errorf("%s = %v, want an error with each of %q", call, err, wants)
	}
}

func TestCheckBlock(t *testing.T) {
	for _, tc := range []struct {
		block string
		want  string // substring of the error, "" for accepted
	}{
		{"10.244.1.0/24", ""},
		{"10.244.1.0/30", ""},
		{"fd00:10:244::/122", ""},
		{"fd00::/127", ""},
		{"0.0.0.0/0", "every address"},
		{"::/0", "every address"},
		{"128.0.0.0/1", "link-local"},
		{"240.0.0.0/8", "reserved range 240.0.0.0/4"},
		{"127.0.0.0/24", "loopback"},
		{"169.254.1.0/24", "pod gateway 169.254.1.1"},
		{"224.0.0.0/24", "multicast"},
		{"fe80::/64", "link-local"},
		{"ff02::/16", "multicast"},
		{"::1/128", "loopback"},
		{"10.0.0.0/31", "too small"},
		{"fd00::/128", "too small"},
		{"10.0.0.1/24", "did you mean 10.0.0.0/24"},
	} {
		checkErr(t, "CheckBlock("+tc.block+")", CheckBlock(netip.MustParsePrefix(tc.block)), tc.want, tc.block)
	}
}

func TestHostCheckBlock(t *testing.T) {
	h := Host{
		Addrs:     []netip.Prefix{netip.MustParsePrefix("192.168.50.7/24"), netip.MustParsePrefix("2001:db8:1::7/64")},
		Connected: []netip.Prefix{netip.MustParsePrefix("172.31.0.0/16")},
	}
	for _, tc := range []struct {
		block string
		want  string
	}{
		{"10.244.0.0/24", ""},
		{"192.168.51.0/24", ""},
		{"192.168.50.128/26", "connected subnet 192.168.50.0/24"},
		{"192.168.0.0/16", "address 192.168.50.7"},
		{"172.31.5.0/24", "connected route 172.31.0.0/16"},
		{"2001:db8:1::1:0/120", "connected subnet 2001:db8:1::/64"},
		{"2001:db8:2::/120", ""},
		{"0.0.0.0/0", "every address"},
	} {
		checkErr(t, "CheckBlock("+tc.block+")", h.CheckBlock(netip.MustParsePrefix(tc.block)), tc.want)
	}
}

func TestCheckInterfacePrefix(t *testing.T) {
	h := Host{
		Links:   []Link{{Name: "lo", Type: "device"}, {Name: "rtu0", Type: "veth"}, {Name: "br-x", Type: "bridge"}, {Name: "cali0123456789a", Type: "veth"}},
		Uplinks: []string{"rtu0"},
	}
	for _, tc := range []struct {
		prefix string
		want   string
	}{
		{"cali", ""},
		{"rtu", "uplink rtu0"},
		{"br", "bridge link br-x"},
		{"l", "device link lo"},
		{"", "empty"},
		{"abcdefghijkl", "longer than 11"},
		{"ca%d", "not allowed"},
	} {
		checkErr(t, fmt.Sprintf("CheckInterfacePrefix(%q)", tc.prefix), h.CheckInterfacePrefix(tc.prefix), tc.want)
	}
}

func TestOwned(t *testing.T) {
	for _, tc := range []struct {
		l    Link
		want bool
	}{
		{Link{Name: "cali12", Type: "veth"}, true},
		{Link{Name: "cali12", Type: "bridge"}, false},
		{Link{Name: "eth0", Type: "veth"}, false},
	} {
		if got := Owned(tc.l, "cali"); got != tc.want {
			t.Errorf("Owned(%+v) = %v, want %v", tc.l, got, tc.want)
		}
	}
}

func TestReserved(t *testing.T) {
	for _, tc := range []struct {
		block, addr string
		want        bool
	}{
		{"10.0.0.0/30", "10.0.0.0", true},
		{"10.0.0.0/30", "10.0.0.3", true},
		{"10.0.0.0/30", "10.0.0.1", false},
		{"10.0.0.0/24", "10.0.0.255", true},
		{"fd00::/127", "fd00::", true},
		{"fd00::/127", "fd00::1", false}, // IPv6 has no broadcast
		{"fd00::/120", "fd00::ff", false},
	} {
		if got := Reserved(netip.MustParsePrefix(tc.block), netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Reserved(%s, %s) = %v, want %v", tc.block, tc.addr, got, tc.want)
		}
	}
	if got := LastAddr(netip.MustParsePrefix("10.1.2.0/23")); got != netip.MustParseAddr("10.1.3.255") {
		t.Errorf("LastAddr(10.1.2.0/23) = %s", got)
	}
}
