package nlutil

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestRetry: an interrupted dump is taken again until it completes; other
// errors end it at once; a dump interrupted every time gives an error that
// still matches netlink.ErrDumpInterrupted.
func TestRetry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		interrupted int   // answers that are interrupted before the last one
		last        error // the last answer's error
		wantCalls   int
		wantOut     []int
	}{
		{"first answer", 0, nil, 1, []int{1}},
		{"after interruptions", 3, nil, 4, []int{4}},
		{"other error", 2, unix.EPERM, 3, []int{3}},
		{"always interrupted", DumpAttempts + 5, nil, DumpAttempts, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			out, err := Retry(func() ([]int, error) {
				calls++
				if calls <= tc.interrupted {
					return []int{calls}, fmt.Errorf("dump: %w", netlink.ErrDumpInterrupted)
				}
				return []int{calls}, tc.last
			})
			if calls != tc.wantCalls {
				t.Errorf("dump called %d times, want %d", calls, tc.wantCalls)
			}
			if fmt.Sprint(out) != fmt.Sprint(tc.wantOut) {
				t.Errorf("out %v, want %v", out, tc.wantOut)
			}
			switch {
			case tc.interrupted >= DumpAttempts:
				if !errors.Is(err, netlink.ErrDumpInterrupted) {
					t.Errorf("err %v, want one matching ErrDumpInterrupted", err)
				}
			case !errors.Is(err, tc.last) || (tc.last == nil && err != nil):
				t.Errorf("err %v, want %v", err, tc.last)
			}
		})
	}
}

// TestNotFound: which errors mean "not there", also when wrapped.
func TestNotFound(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("op: %w", err) }
	for _, tc := range []struct {
		err          error
		link, absent bool
	}{
		{netlink.LinkNotFoundError{}, true, true},
		{wrap(netlink.LinkNotFoundError{}), true, true},
		{unix.ENODEV, true, true},
		{wrap(unix.ENODEV), true, true},
		{wrap(unix.ESRCH), false, true},
		{wrap(unix.ENOENT), false, true},
		{wrap(unix.EEXIST), false, false},
		{wrap(unix.EPERM), false, false},
		{errors.New("no such thing"), false, false},
		{nil, false, false},
	} {
		if got := LinkNotFound(tc.err); got != tc.link {
			t.Errorf("LinkNotFound(%v) = %v, want %v", tc.err, got, tc.link)
		}
		if got := NotFound(tc.err); got != tc.absent {
			t.Errorf("NotFound(%v) = %v, want %v", tc.err, got, tc.absent)
		}
	}
}

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
