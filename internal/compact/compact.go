// Package compact keeps the daemon's long-lived maps from holding memory
// they needed once: Go's clear (and deleting every key) keeps every
// bucket a map ever grew, so a map that held the start-up burst (an
// entry per peer or route) would keep that memory for the life of the
// process.
package compact

// Small is how many entries a map may hold and still be emptied in place.
const Small = 64

// Clear returns m emptied: m itself, cleared, when it holds at most Small
// entries; a new map otherwise (and for a nil m), leaving m's buckets to
// the collector.
func Clear[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil || len(m) > Small {
		return make(M)
	}
	clear(m)
	return m
}
