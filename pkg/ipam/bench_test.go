package ipam

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkAllocateRelease measures one Allocate plus one Release in a /24
// that holds 1 address (the one being allocated) or 250 (249 held by other
// attachments, plus that one). The two must cost the same: nothing in the
// allocation path grows with the number of allocations.
//
// The directory is on tmpfs when /dev/shm is one, as the state directory
// (/run/routelet) is in production; on a disk-backed directory the fsyncs
// dominate and their jitter hides what is being compared.
func BenchmarkAllocateRelease(b *testing.B) {
	for _, allocated := range []int{1, 250} {
		b.Run(fmt.Sprintf("allocated=%d", allocated), func(b *testing.B) {
			ctx := context.Background()
			a := newAt(b, filepath.Join(benchDir(b), "ipam"), "10.0.0.0/24")
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

// benchDir returns a fresh directory, on tmpfs when /dev/shm is tmpfs.
func benchDir(b *testing.B) string {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		b.Logf("/dev/shm is not tmpfs; benchmarking on %s", os.TempDir())
		return b.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "routelet-ipam-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
