package diagnose

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// ctEnv is a fresh network namespace with a conntrack connection into it.
type ctEnv struct {
	ns ns.NetNS
	c  *conntrack.Conn
}

// newCTEnv creates the namespace; both go when the test ends.
func newCTEnv(t testing.TB) *ctEnv {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "network namespaces, conntrack")
	n, err := netnstest.New("rlct-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnstest.Remove(n) })
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, err := conntrack.Dial(&mdnetlink.Config{NetNS: int(h)})
	if err != nil {
		t.Fatalf("conntrack dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &ctEnv{ns: n, c: c}
}

// flow creates one unreplied flow src:sport → dst:dport.
func (e *ctEnv) flow(t testing.TB, proto uint8, src, dst string, sport, dport uint16) {
	t.Helper()
	f := conntrack.NewFlow(proto, 0, netip.MustParseAddr(src), netip.MustParseAddr(dst), sport, dport, 600, 0)
	if err := e.c.Create(f); err != nil {
		t.Fatalf("create flow %s:%d → %s:%d: %v", src, sport, dst, dport, err)
	}
}

// noise creates n flows between addresses of neither pair.
func (e *ctEnv) noise(t testing.TB, n int) {
	t.Helper()
	for i := range n {
		e.flow(t, unix.IPPROTO_TCP, fmt.Sprintf("10.%d.%d.%d", 50+i/65536, i/256%256, i%256), "10.100.1.5", uint16(1024+i%60000), 443)
	}
}

// pairFlows reads the flows between a and b inside e's namespace with
// read (the netlink Kernel's Conntrack, or a whole-table dump).
func (e *ctEnv) pairFlows(t testing.TB, read func(a, b netip.Addr) ([]Flow, error), a, b string) []string {
	t.Helper()
	var fs []Flow
	err := e.ns.Do(func(ns.NetNS) error {
		var err error
		fs, err = read(netip.MustParseAddr(a), netip.MustParseAddr(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %s:%d → %s:%d replied=%v", f.Proto, f.Src, f.SrcPort, f.Dst, f.DstPort, f.Replied))
	}
	slices.Sort(out)
	return out
}

// TestKernelConntrackPair: Conntrack returns exactly the pair's entries,
// both directions, IPv4 and IPv6, from a table holding others too (the
// same pod talking to a third address, a third address talking to the
// other pod, unrelated flows).
func TestKernelConntrackPair(t *testing.T) {
	e := newCTEnv(t)
	e.flow(t, unix.IPPROTO_TCP, "10.244.1.1", "10.100.1.5", 40000, 80)
	e.flow(t, unix.IPPROTO_UDP, "10.100.1.5", "10.244.1.1", 53, 5353)
	e.flow(t, unix.IPPROTO_TCP, "10.244.1.1", "10.100.1.6", 40001, 80)
	e.flow(t, unix.IPPROTO_TCP, "10.100.1.7", "10.100.1.5", 40002, 80)
	e.flow(t, unix.IPPROTO_TCP, "fd00:244:1::1", "fd00:245:1::9", 40003, 8080)
	e.flow(t, unix.IPPROTO_TCP, "fd00:244:1::1", "fd00:245:1::a", 40004, 8080)
	e.noise(t, 200)
	k := &netlinkKernel{}
	got := e.pairFlows(t, k.Conntrack, "10.244.1.1", "10.100.1.5")
	want := []string{"tcp 10.244.1.1:40000 → 10.100.1.5:80 replied=false", "udp 10.100.1.5:53 → 10.244.1.1:5353 replied=false"}
	if !slices.Equal(got, want) {
		t.Errorf("Conntrack(10.244.1.1, 10.100.1.5) = %q, want %q", got, want)
	}
	got = e.pairFlows(t, k.Conntrack, "fd00:245:1::9", "fd00:244:1::1")
	want = []string{"tcp fd00:244:1::1:40003 → fd00:245:1::9:8080 replied=false"}
	if !slices.Equal(got, want) {
		t.Errorf("Conntrack(fd00:245:1::9, fd00:244:1::1) = %q, want %q", got, want)
	}
	if got := e.pairFlows(t, k.Conntrack, "10.244.1.1", "10.100.9.9"); len(got) != 0 {
		t.Errorf("Conntrack of a pair without flows = %q, want none", got)
	}
}

// dumpAll is the whole-table read Conntrack replaced (one dump of every
// entry, filtered here), kept to compare in BenchmarkConntrackPair.
func dumpAll(a, b netip.Addr) ([]Flow, error) {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	flows, err := c.Dump(nil)
	if err != nil {
		return nil, err
	}
	return pairOf(flows, a, b), nil
}

// BenchmarkConntrackPair: the conntrack step's read on a table of 50,000
// entries (two of them the pair's): the kernel-filtered dumps against the
// whole-table dump.
func BenchmarkConntrackPair(b *testing.B) {
	e := newCTEnv(b)
	e.flow(b, unix.IPPROTO_TCP, "10.244.1.1", "10.100.1.5", 40000, 80)
	e.flow(b, unix.IPPROTO_UDP, "10.100.1.5", "10.244.1.1", 53, 5353)
	e.noise(b, 50000-2)
	k := &netlinkKernel{}
	for _, bc := range []struct {
		name string
		read func(a, b netip.Addr) ([]Flow, error)
	}{{"kernel-filter", k.Conntrack}, {"whole-table", dumpAll}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if got := e.pairFlows(b, bc.read, "10.244.1.1", "10.100.1.5"); len(got) != 2 {
					b.Fatalf("%d flows, want 2: %q", len(got), got)
				}
			}
		})
	}
}
