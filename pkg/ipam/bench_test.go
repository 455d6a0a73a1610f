package ipam

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkAllocateRelease measures one Allocate plus one Release in a /24
// that holds 1 address (the one being allocated) or 250 (249 held by other
// attachments, plus that one). The two must cost the same: nothing in the
// allocation path grows with the number of allocations.
func BenchmarkAllocateRelease(b *testing.B) {
	for _, allocated := range []int{1, 250} {
		b.Run(fmt.Sprintf("allocated=%d", allocated), func(b *testing.B) {
			ctx := context.Background()
			a := newAt(b, filepath.Join(b.TempDir(), "ipam"), "10.0.0.0/24")
			for i := 0; i < allocated-1; i++ {
				mustAllocate(b, a, att(fmt.Sprintf("filler%d", i)))
			}
			me := att("bench")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := a.Allocate(ctx, me, nil); err != nil {
					b.Fatal(err)
				}
				if err := a.Release(ctx, me); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
