package compact

import "testing"

// TestClear: a small map is emptied in place (the caller keeps using it);
// a large one is replaced by a new, empty map, and the old one is left
// as it was.
func TestClear(t *testing.T) {
	small := map[int]bool{1: true, 2: true}
	got := Clear(small)
	got[3] = true
	if len(got) != 1 || len(small) != 1 || !small[3] {
		t.Errorf("small map: cleared %v, original %v; want the same map emptied", got, small)
	}
	large := map[int]bool{}
	for i := range Small + 1 {
		large[i] = true
	}
	got = Clear(large)
	got[-1] = true
	if len(got) != 1 || len(large) != Small+1 {
		t.Errorf("large map: cleared %d entries, original %d; want a new map", len(got), len(large))
	}
	var none map[string]int
	if got := Clear(none); got == nil {
		t.Errorf("nil map cleared to nil; want a map to write to")
	}
}
