package hostread

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/nodespace"
)

// TestHostReaderReadsBesideTheLoop: a host change returns at once and the
// read it asks for runs on its own; changes before it begins make no read
// of their own, changes during it one more read after it, not one each; each read done is handed over once (done,
// then the validator's Read takes it without reading again), and a Read
// with nothing handed over reads at once.
func TestHostReaderReadsBesideTheLoop(t *testing.T) {
	release := make(chan struct{})
	var reads, dones atomic.Int32
	r := &Reader{ctx: context.Background(), read: func() (nodespace.Host, error) {
		n := reads.Add(1)
		if n <= 2 {
			<-release // the reads beside the loop wait to be let go
		}
		return nodespace.Host{Addrs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(n)}), 32)}}, nil
	}}
	r.Done = func() { dones.Add(1) }
	r.changed()
	r.changed() // before the read begins: the same read
	netnstest.Eventually(t, 5*time.Second, "the first read running", func() bool { return reads.Load() == 1 })
	r.changed() // during the read: one more after it
	r.changed()
	release <- struct{}{}
	netnstest.Eventually(t, 5*time.Second, "the second read running", func() bool { return reads.Load() == 2 })
	release <- struct{}{}
	netnstest.Eventually(t, 5*time.Second, "both reads handed over", func() bool { return dones.Load() == 2 })
	h, err := r.Read()
	if err != nil || h.Addrs[0].Addr() != netip.MustParseAddr("192.0.2.2") || reads.Load() != 2 {
		t.Fatalf("Read after the reads beside the loop: %v %v after %d reads; want the second read's, no new read", h.Addrs, err, reads.Load())
	}
	if h, _ := r.Read(); h.Addrs[0].Addr() != netip.MustParseAddr("192.0.2.3") || reads.Load() != 3 {
		t.Fatalf("Read with nothing handed over: %v after %d reads; want a read of its own", h.Addrs, reads.Load())
	}
	if dones.Load() != 2 {
		t.Fatalf("done called %d times, want 2", dones.Load())
	}
}
