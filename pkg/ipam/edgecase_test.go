package ipam

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// TestTinyBlocksAndMappedRequests: the smallest blocks hand out exactly
// their usable addresses and then ErrExhausted; a requested address spelled
// IPv4-mapped is the same address as its plain form (one claim, never two
// owners); the collided record file of (a, b_c) and (a_b, c) is never taken
// for the other attachment's.
func TestTinyBlocksAndMappedRequests(t *testing.T) {
	ctx := context.Background()
	for block, want := range map[string][]string{
		"10.5.0.0/30": {"10.5.0.1", "10.5.0.2"},
		"fd05::/127":  {"fd05::1"},
		"fd05::/126":  {"fd05::1", "fd05::2", "fd05::3"},
	} {
		a := newTest(t, block)
		var got []string
		for i := range len(want) {
			got = append(got, addrs(mustAllocate(t, a, att("c"+string(rune('a'+i)))))...)
		}
		if len(got) != len(want) {
			t.Errorf("%s: got %v, want %v", block, got, want)
		}
		seen := map[string]bool{}
		for _, g := range got {
			if seen[g] || !usable(netip.MustParsePrefix(block))[netip.MustParseAddr(g)] {
				t.Errorf("%s: handed out %s (all: %v)", block, g, got)
			}
			seen[g] = true
		}
		if _, err := a.Allocate(ctx, att("one-too-many"), nil); !errors.Is(err, ErrExhausted) {
			t.Errorf("%s: allocation past the end: %v, want ErrExhausted", block, err)
		}
	}

	a := newTest(t, "10.6.0.0/24")
	mustAllocate(t, a, att("plain"), netip.MustParseAddr("10.6.0.7"))
	if _, err := a.Allocate(ctx, att("mapped"), []netip.Addr{netip.MustParseAddr("::ffff:10.6.0.7")}); !errors.Is(err, ErrInUse) {
		t.Errorf("requesting ::ffff:10.6.0.7 while 10.6.0.7 is held: %v, want ErrInUse", err)
	}

	first, second := Attachment{ContainerID: "a", IfName: "b_c"}, Attachment{ContainerID: "a_b", IfName: "c"}
	held := mustAllocate(t, a, first)
	if _, err := a.Allocate(ctx, second, nil); err == nil {
		t.Errorf("Allocate for %v succeeded although its record file holds %v's record", second, first)
	}
	if err := a.Release(ctx, second); err != nil {
		t.Errorf("Release(%v): %v", second, err)
	}
	if got, err := a.Get(ctx, first); err != nil || len(got) != len(held) {
		t.Errorf("after Release(%v): Get(%v) = %v, %v; want %v", second, first, got, err, held)
	}
	if err := a.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.List(ctx); len(got) != 1 { // only "plain" is left
		t.Errorf("List after releasing both: %v", got)
	}
}
