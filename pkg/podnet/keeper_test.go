package podnet

import (
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestUpdateVethsMatchesSetVeths: random changes handed over one by one
// (UpdateVeths) leave the keeper keeping what handing it the whole list
// (SetVeths) does, with the same veths to read at the next Check.
func TestUpdateVethsMatchesSetVeths(t *testing.T) {
	newKeeper := func() *Keeper {
		k, err := NewKeeper("cali", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Close)
		return k
	}
	rng := rand.New(rand.NewPCG(5, 6))
	inc, full := newKeeper(), newKeeper()
	cur := map[string]HostVeth{}
	for step := range 2000 {
		changed := map[string]bool{}
		for range 1 + rng.IntN(3) {
			name := fmt.Sprintf("%s%d", []string{"cali", "cali", "eth"}[rng.IntN(3)], rng.IntN(8))
			changed[name] = true
			if _, ok := cur[name]; ok && rng.IntN(3) == 0 {
				delete(cur, name)
				continue
			}
			v := HostVeth{Name: name, IPv6: rng.IntN(2) == 0}
			if v.IPv6 && rng.IntN(2) == 0 {
				v.Neighbours = []netip.Addr{netip.MustParseAddr(fmt.Sprintf("fd00::%d", rng.IntN(3)))}
			}
			cur[name] = v
		}
		var set []HostVeth
		var gone []string
		for name := range changed {
			if v, ok := cur[name]; ok {
				set = append(set, v)
			} else {
				gone = append(gone, name)
			}
		}
		inc.UpdateVeths(set, gone)
		full.SetVeths(slices.Collect(maps.Values(cur)))
		if !maps.EqualFunc(inc.veths, full.veths, func(a, b keptVeth) bool {
			return sameVeth(a.HostVeth, b.HostVeth) && slices.Equal(a.polled, b.polled) && slices.Equal(a.all, b.all)
		}) {
			t.Fatalf("step %d: kept %v, want %v", step, slices.Sorted(maps.Keys(inc.veths)), slices.Sorted(maps.Keys(full.veths)))
		}
		if !slices.Equal(inc.names, full.names) || !slices.IsSorted(inc.names) || inc.n6 != full.n6 {
			t.Fatalf("step %d: names %v (IPv6 %d), want %v (%d)", step, inc.names, inc.n6, full.names, full.n6)
		}
		for _, hinted := range []struct {
			what      string
			got, want map[string]bool
		}{{"links", inc.links, full.links}, {"neighbours", inc.neighs, full.neighs}, {"fresh", inc.fresh, full.fresh}} {
			if !maps.Equal(hinted.got, hinted.want) {
				t.Fatalf("step %d: %s to read %v, want %v", step, hinted.what, hinted.got, hinted.want)
			}
		}
		if rng.IntN(4) == 0 { // a Check reads and clears the hints
			for _, k := range []*Keeper{inc, full} {
				clear(k.links)
				clear(k.neighs)
				clear(k.fresh)
			}
		}
	}
}
