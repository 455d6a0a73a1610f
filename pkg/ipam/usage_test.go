package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
)

// TestUsage: Usage counts the addresses automatic allocation can hand out
// (reserved ones left out) and those claimed, per block, as allocations
// and releases happen, also those of another Allocator on the directory.
func TestUsage(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ipam")
	a := newAt(t, dir, "10.0.0.0/30", "fd00::/126")
	want := func(what string, w ...BlockUsage) {
		t.Helper()
		got, err := a.Usage()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s: usage %+v, want %+v", what, got, w)
		}
	}
	b4, b6 := netip.MustParsePrefix("10.0.0.0/30"), netip.MustParsePrefix("fd00::/126")
	want("empty", BlockUsage{b4, 2, 0}, BlockUsage{b6, 3, 0})
	for i := range 2 {
		if _, err := a.Allocate(ctx, Attachment{ContainerID: fmt.Sprint("c", i), IfName: "eth0"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want("two pods", BlockUsage{b4, 2, 2}, BlockUsage{b6, 3, 2})
	// A second block of the family, as after a claim: the first stays full.
	wider := newAt(t, dir, "10.0.0.0/30", "10.0.0.4/30", "fd00::/126")
	if _, err := wider.Allocate(ctx, Attachment{ContainerID: "c2", IfName: "eth0"}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := wider.Usage()
	if err != nil {
		t.Fatal(err)
	}
	b4b := netip.MustParsePrefix("10.0.0.4/30")
	if w := []BlockUsage{{b4, 2, 2}, {b4b, 2, 1}, {b6, 3, 3}}; !slices.Equal(got, w) {
		t.Errorf("after a third pod in the wider allocator: %+v, want %+v", got, w)
	}
	if got[2].Free() != 0 || got[1].Free() != 1 {
		t.Errorf("Free: %d, %d; want 0 for the full IPv6 block, 1 for the new IPv4 block", got[2].Free(), got[1].Free())
	}
	if err := a.Release(ctx, Attachment{ContainerID: "c0", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	want("c0 released", BlockUsage{b4, 2, 1}, BlockUsage{b6, 3, 2})

	// Reserved addresses are not usable.
	gw := netip.MustParseAddr("10.0.8.1")
	r, err := New(filepath.Join(t.TempDir(), "ipam"), []netip.Prefix{netip.MustParsePrefix("10.0.8.0/29")}, Options{Reserved: []netip.Addr{gw, netip.MustParseAddr("10.0.8.0")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Usage(); err != nil || got[0].Usable != 5 {
		t.Errorf("/29 with one more reserved address: %+v, %v; want 5 usable", got, err)
	}
}
