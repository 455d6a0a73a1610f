package overlay

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestClaimsMatchScan: the indexed claims answer as a scan of every
// accepted block in order would, for random IPv4 blocks of mixed sizes
// (accepting only those that overlap nothing, as Routes does).
func TestClaimsMatchScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var local []netip.Prefix
		for range r.IntN(3) {
			local = append(local, randomBlock(r))
		}
		c := newClaims(local)
		all := slices.Clone(local)
		for range 60 {
			b := randomBlock(r)
			want := slices.IndexFunc(all, b.Overlaps)
			if got := c.first(b); got != want {
				t.Fatalf("round %d: first(%s) = %d, want %d (claims %v)", round, b, got, want, all)
			}
			if want < 0 {
				c.add(b)
				all = append(all, b)
			}
		}
	}
}

// randomBlock is a block of 10.0.0.0/8 between /12 and /28.
func randomBlock(r *rand.Rand) netip.Prefix {
	a := netip.AddrFrom4([4]byte{10, byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256))})
	return netip.PrefixFrom(a, 12+r.IntN(17)).Masked()
}
