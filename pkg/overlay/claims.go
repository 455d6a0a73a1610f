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
// building an index. scratch is appended to and returned for reuse.
func claimsFor(local []netip.Prefix, peers []Peer, v int, scratch []netip.Prefix) (*claims, int, []netip.Prefix) {
	all := scratch
	for _, b := range local {
		all = append(all, b.Masked())
	}
	for _, p := range peers {
		for _, b := range p.Blocks {
			if b.IsValid() && familyOf(b.Addr()) == v {
				all = append(all, b.Masked())
			}
		}
	}
	total := len(all) - len(local)
	slices.SortFunc(all, comparePrefixes)
	// Sorted by address then length, a block that overlaps a later one
	// contains it and every block between them: an overlap anywhere
	// shows between neighbours.
	for i := 1; i < len(all); i++ {
		if all[i-1].Overlaps(all[i]) {
			return newClaims(local), total, all
		}
	}
	return &claims{disjoint: true}, total, all
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
