package overlay

import (
	"net/netip"
	"slices"
)

// claims are the blocks Routes has accepted (ours, then peers' in name
// order), indexed so that "which accepted block does b overlap first" is a
// binary search instead of a scan: two prefixes overlap exactly when one
// contains the other, and accepted blocks never overlap each other, so
// the only candidates are the accepted block just before b's address
// (which may contain b) and those from b's address to its last (inside b).
type claims struct {
	sorted []claim // by address, then length
	all    []netip.Prefix
	// scan: our own blocks overlap each other, so the index does not hold;
	// fall back to scanning every claim in order.
	scan bool
	// disjoint: every block that will be checked is known to overlap no
	// other (claimsFor): nothing is recorded, nothing overlaps.
	disjoint bool
}

// claim is one accepted block and its place in acceptance order.
type claim struct {
	p   netip.Prefix
	seq int
}

// claimsFor returns the claims Routes checks peers' blocks of family v
// against, starting with our own blocks, and how many peer blocks of the
// family there are. When no two of all those blocks overlap (the usual
// case) nothing needs checking: the claims accept everything without
// building an index. x carries what the last call found (nil: nothing).
func claimsFor(local []netip.Prefix, peers []Peer, v int, x *blockIndex) (*claims, int) {
	if x == nil {
		x = &blockIndex{}
	}
	next := x.spare[:0]
	for _, b := range local {
		next = append(next, b.Masked())
	}
	for _, p := range peers {
		for _, b := range p.Blocks {
			if b.IsValid() && familyOf(b.Addr()) == v {
				next = append(next, b.Masked())
			}
		}
	}
	x.update(next)
	total := len(next) - len(local)
	if x.disjoint {
		return &claims{disjoint: true}, total
	}
	return newClaims(local), total
}

// blockIndex is every block Routes looked at (ours and the peers'), in
// the order gathered and sorted, and whether no two overlap. A call with
// the same blocks but a few changed updates the sorted list in place
// instead of sorting it again.
type blockIndex struct {
	gathered, spare []netip.Prefix
	sorted          []netip.Prefix
	disjoint        bool
}

// maxIncremental is how many changed blocks blockIndex.update handles in
// place; more are sorted afresh.
const maxIncremental = 16

// update makes next the gathered blocks (x keeps the slice) and works out
// whether they are disjoint.
func (x *blockIndex) update(next []netip.Prefix) {
	prev := x.gathered
	x.gathered, x.spare = next, prev
	if x.disjoint && len(prev) == len(next) {
		var changed []int
		for i := range next {
			if next[i] != prev[i] {
				if changed = append(changed, i); len(changed) > maxIncremental {
					break
				}
			}
		}
		if len(changed) <= maxIncremental && x.replace(prev, next, changed) {
			return
		}
	}
	x.sorted = append(x.sorted[:0], next...)
	slices.SortFunc(x.sorted, comparePrefixes)
	// Sorted by address then length, a block that overlaps a later one
	// contains it and every block between them: an overlap anywhere
	// shows between neighbours.
	x.disjoint = true
	for i := 1; i < len(x.sorted); i++ {
		if x.sorted[i-1].Overlaps(x.sorted[i]) {
			x.disjoint = false
			return
		}
	}
}

// replace swaps the changed blocks (prev[i] → next[i] for i in changed)
// in the sorted, disjoint list; it reports false when the result is not
// known to be disjoint (the caller then sorts afresh). A block inserted
// into a disjoint sorted list overlaps another exactly when it overlaps
// one of its neighbours there.
func (x *blockIndex) replace(prev, next []netip.Prefix, changed []int) bool {
	for _, i := range changed {
		j, found := slices.BinarySearchFunc(x.sorted, prev[i], comparePrefixes)
		if !found {
			return false
		}
		x.sorted = slices.Delete(x.sorted, j, j+1)
	}
	for _, i := range changed {
		b := next[i]
		j, _ := slices.BinarySearchFunc(x.sorted, b, comparePrefixes)
		if j > 0 && x.sorted[j-1].Overlaps(b) || j < len(x.sorted) && x.sorted[j].Overlaps(b) {
			return false
		}
		x.sorted = slices.Insert(x.sorted, j, b)
	}
	return true
}

// newClaims starts with our own blocks.
func newClaims(local []netip.Prefix) *claims {
	c := &claims{}
	for _, b := range local {
		if c.first(b) >= 0 {
			c.scan = true
		}
		c.add(b)
	}
	return c
}

// comparePrefixes orders by address, then length.
func comparePrefixes(a, b netip.Prefix) int {
	if x := a.Addr().Compare(b.Addr()); x != 0 {
		return x
	}
	return a.Bits() - b.Bits()
}

// first returns the acceptance index of the first accepted block b
// overlaps, or -1.
func (c *claims) first(b netip.Prefix) int {
	if c.disjoint {
		return -1
	}
	if c.scan {
		return slices.IndexFunc(c.all, b.Overlaps)
	}
	b = b.Masked()
	i, _ := slices.BinarySearchFunc(c.sorted, b, func(e claim, t netip.Prefix) int { return comparePrefixes(e.p, t) })
	best := -1
	if i > 0 && c.sorted[i-1].p.Overlaps(b) {
		best = c.sorted[i-1].seq
	}
	for j := i; j < len(c.sorted) && b.Contains(c.sorted[j].p.Addr()); j++ {
		if s := c.sorted[j].seq; best < 0 || s < best {
			best = s
		}
	}
	return best
}

// add accepts b.
func (c *claims) add(b netip.Prefix) {
	if c.disjoint {
		return
	}
	i, _ := slices.BinarySearchFunc(c.sorted, b.Masked(), func(e claim, t netip.Prefix) int { return comparePrefixes(e.p, t) })
	c.sorted = slices.Insert(c.sorted, i, claim{p: b.Masked(), seq: len(c.all)})
	c.all = append(c.all, b)
}
