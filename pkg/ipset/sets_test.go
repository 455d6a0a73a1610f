package ipset_test

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netiptest"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/ipset/ipsettest"
)

// quiet discards the logs of the code under test.
var quiet = slog.New(slog.DiscardHandler)

// pfx parses CIDRs.
var pfx = netiptest.Prefixes

// wantSnapshot fails unless the fake holds exactly want (name → members).
func wantSnapshot(t *testing.T, f *ipsettest.Fake, want map[string][]netip.Prefix) {
	t.Helper()
	got := f.Snapshot()
	for _, m := range want {
		slices.SortFunc(m, func(a, b netip.Prefix) int { return a.Compare(b) })
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("kernel sets = %v, want %v", got, want)
	}
}

func TestSetsCreateThenApplyByDifference(t *testing.T) {
	f := ipsettest.NewFake()
	s := ipset.NewSets(f, quiet)
	if err := s.Set(ipset.VXLANPeers, ipset.IPv4, pfx("192.0.2.1/32", "192.0.2.2/32", "198.51.100.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ipset.Name(ipset.VXLANPeers, ipset.IPv6), ipset.IPv6, pfx("2001:db8::1/128")); err != nil {
		t.Fatal(err)
	}
	if f.Writes() != 0 {
		t.Fatalf("Set touched the kernel: %d writes", f.Writes())
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	wantSnapshot(t, f, map[string][]netip.Prefix{
		"routelet-vxlan-peers":    pfx("192.0.2.1/32", "192.0.2.2/32", "198.51.100.0/24"),
		"routelet-vxlan-peers-v6": pfx("2001:db8::1/128"),
	})
	if f.Calls("rename") != 2 || f.Calls("swap") != 0 {
		t.Fatalf("first creation: %d renames, %d swaps; want the scratch set renamed into place for each set", f.Calls("rename"), f.Calls("swap"))
	}

	// One member changed: one add, one del, no read, no rewrite.
	f.ResetCalls()
	if err := s.Set(ipset.VXLANPeers, ipset.IPv4, pfx("192.0.2.1/32", "192.0.2.3/32", "198.51.100.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if f.Calls("add") != 1 || f.Calls("del") != 1 || f.Writes() != 2 || f.Calls("list") != 0 {
		t.Fatalf("one-member change: add=%d del=%d writes=%d lists=%d; want 1 1 2 0",
			f.Calls("add"), f.Calls("del"), f.Writes(), f.Calls("list"))
	}
	wantSnapshot(t, f, map[string][]netip.Prefix{
		"routelet-vxlan-peers":    pfx("192.0.2.1/32", "192.0.2.3/32", "198.51.100.0/24"),
		"routelet-vxlan-peers-v6": pfx("2001:db8::1/128"),
	})

	// No change: the same members again, then Apply: no call at all.
	f.ResetCalls()
	if err := s.Set(ipset.VXLANPeers, ipset.IPv4, pfx("198.51.100.7/24", "192.0.2.3/32", "192.0.2.1/32")); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if n := f.Calls("list") + f.Writes(); n != 0 {
		t.Fatalf("no-change Apply made %d kernel calls, want 0", n)
	}
	// Check reads each set once and writes nothing.
	if n, err := s.Check(); err != nil || n != 0 {
		t.Fatalf("Check = %d, %v; want 0 drifted", n, err)
	}
	if f.Calls("list") != 2 || f.Writes() != 0 {
		t.Fatalf("clean Check: lists=%d writes=%d; want 2 0", f.Calls("list"), f.Writes())
	}
}

func TestSetsValidation(t *testing.T) {
	s := ipset.NewSets(ipsettest.NewFake(), quiet)
	for _, tc := range []struct {
		name    string
		family  ipset.Family
		members []netip.Prefix
		inErr   string
	}{
		{"kube-peers", ipset.IPv4, nil, `"kube-peers"`},
		{"routelet-a-very-long-name-beyond", ipset.IPv4, nil, "longer than"},
		{"routelet-x", ipset.Family(7), nil, "unknown family 7"},
		{"routelet-x", ipset.IPv4, pfx("2001:db8::/64"), "2001:db8::/64 is not an inet prefix"},
		{"routelet-x", ipset.IPv6, pfx("10.0.0.0/8"), "10.0.0.0/8 is not an inet6 prefix"},
		{"routelet-x", ipset.IPv4, pfx("0.0.0.0/0"), "0.0.0.0/0"},
		{"routelet-x", ipset.IPv4, []netip.Prefix{{}}, "invalid member"},
	} {
		err := s.Set(tc.name, tc.family, tc.members)
		if err == nil || !strings.Contains(err.Error(), tc.inErr) {
			t.Errorf("Set(%q, %v, %v) err = %v, want it to mention %q", tc.name, tc.family, tc.members, err, tc.inErr)
		}
	}
	if s.Dirty() {
		t.Fatal("rejected Set calls marked something dirty")
	}
	// Host bits are cleared.
	if err := s.Set("routelet-x", ipset.IPv4, pfx("10.1.2.3/16")); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Members("routelet-x"); !slices.Equal(m, pfx("10.1.0.0/16")) {
		t.Fatalf("Members = %v, want [10.1.0.0/16]", m)
	}
}

// TestSetNamesFit: every set routelet uses, in both families, is a name Set
// accepts (its scratch set within the kernel's limit) and Apply creates.
func TestSetNamesFit(t *testing.T) {
	k := ipsettest.NewFake()
	s := ipset.NewSets(k, quiet)
	want := map[string][]netip.Prefix{}
	for _, base := range []string{ipset.VXLANPeers, ipset.IPIPPeers, ipset.WireGuardPeers, ipset.Pools, ipset.NATPools} {
		for _, f := range []ipset.Family{ipset.IPv4, ipset.IPv6} {
			name := ipset.Name(base, f)
			if err := s.Set(name, f, nil); err != nil {
				t.Errorf("Set(%q): %v", name, err)
			}
			want[name] = nil
		}
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	wantSnapshot(t, k, want)
}

func TestSetsLargeDifferenceSwapsAtomically(t *testing.T) {
	f := ipsettest.NewFake()
	old := make([]netip.Prefix, 100)
	for i := range old {
		old[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 32)
	}
	f.Put(ipset.Pools, "", ipset.IPv4, old...)
	f.SetReferenced(ipset.Pools, true) // a rule uses it: swapping is fine, destroying is not
	s := ipset.NewSets(f, quiet)
	if err := s.Set(ipset.Pools, ipset.IPv4, pfx("10.244.0.0/16", "10.245.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if f.Calls("swap") != 1 || f.Calls("del") != 0 {
		t.Fatalf("large difference: swaps=%d dels=%d; want 1 swap and no member deletes", f.Calls("swap"), f.Calls("del"))
	}
	wantSnapshot(t, f, map[string][]netip.Prefix{ipset.Pools: pfx("10.244.0.0/16", "10.245.0.0/16")})
}

func TestSetsWrongTypeOrFamilyReplaced(t *testing.T) {
	f := ipsettest.NewFake()
	f.Put(ipset.Pools, "hash:ip", ipset.IPv4, pfx("10.0.0.1/32")...)
	f.Put(ipset.Name(ipset.Pools, ipset.IPv6), "", ipset.IPv4, pfx("10.0.0.2/32")...) // v4 set under the v6 name
	s := ipset.NewSets(f, quiet)
	if err := s.Set(ipset.Pools, ipset.IPv4, pfx("10.244.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ipset.Name(ipset.Pools, ipset.IPv6), ipset.IPv6, pfx("fd00::/48")); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	wantSnapshot(t, f, map[string][]netip.Prefix{ipset.Pools: pfx("10.244.0.0/16"), ipset.Pools + ipset.V6Suffix: pfx("fd00::/48")})
	info, _ := f.List(ipset.Pools)
	if info.Type != ipset.HashNet {
		t.Fatalf("type = %q, want %q", info.Type, ipset.HashNet)
	}

	// A wrong-family set a rule still uses cannot be replaced: the error
	// says why and the set stays dirty.
	f = ipsettest.NewFake()
	f.Put(ipset.Pools, "", ipset.IPv6)
	f.SetReferenced(ipset.Pools, true)
	s = ipset.NewSets(f, quiet)
	if err := s.Set(ipset.Pools, ipset.IPv4, pfx("10.244.0.0/16")); err != nil {
		t.Fatal(err)
	}
	err := s.Apply()
	if !errors.Is(err, ipset.ErrReferenced) || !strings.Contains(err.Error(), "cannot be replaced") {
		t.Fatalf("Apply err = %v, want ErrReferenced explaining the set cannot be replaced", err)
	}
	if !s.Dirty() {
		t.Fatal("failed set not left dirty")
	}
	f.SetReferenced(ipset.Pools, false)
	if err := s.Apply(); err != nil {
		t.Fatalf("retry after the rule is gone: %v", err)
	}
	wantSnapshot(t, f, map[string][]netip.Prefix{ipset.Pools: pfx("10.244.0.0/16")})
}

// scenario prepares a fake kernel and a Sets with a desired state that takes
// several kernel calls of every kind to reach.
type scenario struct {
	name  string
	setup func(f *ipsettest.Fake, s *ipset.Sets)
	want  map[string][]netip.Prefix
}

var scenarios = []scenario{
	{
		name: "create",
		setup: func(f *ipsettest.Fake, s *ipset.Sets) {
			_ = s.Set(ipset.VXLANPeers, ipset.IPv4, pfx("192.0.2.1/32", "192.0.2.2/32"))
			_ = s.Set(ipset.Name(ipset.VXLANPeers, ipset.IPv6), ipset.IPv6, pfx("2001:db8::1/128"))
		},
		want: map[string][]netip.Prefix{ipset.VXLANPeers: pfx("192.0.2.1/32", "192.0.2.2/32"), ipset.VXLANPeers + ipset.V6Suffix: pfx("2001:db8::1/128")},
	},
	{
		name: "diff",
		setup: func(f *ipsettest.Fake, s *ipset.Sets) {
			f.Put(ipset.IPIPPeers, "", ipset.IPv4, pfx("192.0.2.1/32", "192.0.2.9/32", "192.0.2.10/32")...)
			_ = s.Set(ipset.IPIPPeers, ipset.IPv4, pfx("192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32"))
		},
		want: map[string][]netip.Prefix{ipset.IPIPPeers: pfx("192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32")},
	},
	{
		name: "wrong-type-and-removed",
		setup: func(f *ipsettest.Fake, s *ipset.Sets) {
			f.Put(ipset.Pools, "hash:ip", ipset.IPv4, pfx("10.0.0.1/32")...)
			f.Put(ipset.IPIPPeers, "", ipset.IPv4, pfx("10.0.0.1/32")...)
			f.Put("other-set", "", ipset.IPv4, pfx("10.0.0.1/32")...)
			_ = s.Set(ipset.Pools, ipset.IPv4, pfx("10.244.0.0/16", "10.245.0.0/16"))
			_ = s.Set(ipset.IPIPPeers, ipset.IPv4, nil)
			s.Remove(ipset.IPIPPeers)
		},
		want: map[string][]netip.Prefix{ipset.Pools: pfx("10.244.0.0/16", "10.245.0.0/16"), "other-set": pfx("10.0.0.1/32")},
	},
}

// TestSetsFailureMatrixConverges fails each kernel call of each scenario in
// turn: Apply reports the failure and leaves the set dirty, and the next
// Apply reaches exactly the desired state with no scratch set left behind.
func TestSetsFailureMatrixConverges(t *testing.T) {
	for _, sc := range scenarios {
		// Count the calls a clean run makes.
		f := ipsettest.NewFake()
		s := ipset.NewSets(f, quiet)
		sc.setup(f, s)
		f.ResetCalls()
		if err := s.Apply(); err != nil {
			t.Fatalf("%s: clean run: %v", sc.name, err)
		}
		wantSnapshot(t, f, sc.want)
		total := f.Calls("list") + f.Writes()

		for i := 1; i <= total; i++ {
			t.Run(fmt.Sprintf("%s/fail-call-%d", sc.name, i), func(t *testing.T) {
				f := ipsettest.NewFake()
				s := ipset.NewSets(f, quiet)
				sc.setup(f, s)
				n := 0
				var failedOp string
				f.Inject = func(op, name string) error {
					n++
					if n == i {
						failedOp = op + " " + name
						return fmt.Errorf("injected failure of %s", failedOp)
					}
					return nil
				}
				if err := s.Apply(); err == nil || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("Apply with call %d failing: err = %v, want the injected error", i, err)
				}
				if !s.Dirty() {
					t.Fatalf("after failed %s nothing is dirty", failedOp)
				}
				f.Inject = nil
				if err := s.Apply(); err != nil {
					t.Fatalf("retry after failed %s: %v", failedOp, err)
				}
				if s.Dirty() {
					t.Fatal("still dirty after a clean retry")
				}
				wantSnapshot(t, f, sc.want)
			})
		}
	}
}

func TestSetsCheckRepairsDrift(t *testing.T) {
	f := ipsettest.NewFake()
	s := ipset.NewSets(f, quiet)
	want := pfx("192.0.2.1/32", "192.0.2.2/32")
	if err := s.Set(ipset.VXLANPeers, ipset.IPv4, want); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	for _, tamper := range []struct {
		name string
		do   func()
	}{
		{"member deleted", func() { _ = f.Del(ipset.VXLANPeers, want[0]) }},
		{"foreign member added", func() { _ = f.Add(ipset.VXLANPeers, netip.MustParsePrefix("203.0.113.66/32")) }},
		{"set destroyed", func() { _ = f.Destroy(ipset.VXLANPeers) }},
		{"set replaced by another type", func() { f.Put(ipset.VXLANPeers, "hash:ip", ipset.IPv4, want...) }},
	} {
		tamper.do()
		n, err := s.Check()
		if err != nil || n != 1 {
			t.Fatalf("%s: Check = %d, %v; want 1 drifted set repaired", tamper.name, n, err)
		}
		wantSnapshot(t, f, map[string][]netip.Prefix{ipset.VXLANPeers: want})
	}
}

func TestSetsRemoveAndCleanup(t *testing.T) {
	f := ipsettest.NewFake()
	f.Put("kube-something", "", ipset.IPv4, pfx("10.0.0.1/32")...)
	f.Put(ipset.Pools+ipset.TmpSuffix, "", ipset.IPv4) // left by a crash mid-rewrite
	s := ipset.NewSets(f, quiet)
	_ = s.Set(ipset.Pools, ipset.IPv4, pfx("10.244.0.0/16"))
	_ = s.Set(ipset.VXLANPeers, ipset.IPv4, pfx("192.0.2.1/32"))
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	s.Remove(ipset.VXLANPeers)
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.List(ipset.VXLANPeers); !errors.Is(err, ipset.ErrNotExist) {
		t.Fatalf("removed set still present (err %v)", err)
	}
	if err := ipset.Cleanup(f, quiet); err != nil {
		t.Fatal(err)
	}
	wantSnapshot(t, f, map[string][]netip.Prefix{"kube-something": pfx("10.0.0.1/32")})
}

// TestSetsKeepMembersOnce: once the kernel holds a set's desired members
// (after a rewrite, a change by difference, or a clean check), Sets keeps
// those members once, not a second copy as its view of the kernel.
func TestSetsKeepMembersOnce(t *testing.T) {
	const n = 20000
	members := make([]netip.Prefix, n)
	for i := range members {
		members[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}
	moved := slices.Clone(members)
	moved[7] = netip.MustParsePrefix("192.0.2.7/32")
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	for _, c := range []struct {
		what  string
		steps [][]netip.Prefix
		check bool
	}{
		{"after a rewrite", [][]netip.Prefix{members}, false},
		{"after a change by difference", [][]netip.Prefix{members, moved}, false},
		{"after a clean check", [][]netip.Prefix{members}, true},
	} {
		f := ipsettest.NewFake()
		s := ipset.NewSets(f, quiet)
		for _, ps := range c.steps {
			if err := s.Set(ipset.VXLANPeers, ipset.IPv4, ps); err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(); err != nil {
				t.Fatal(err)
			}
		}
		if c.check {
			if _, err := s.Check(); err != nil {
				t.Fatal(err)
			}
		}
		held := heap()
		runtime.KeepAlive(s)
		kept := held - heap() // Sets' own memory: the fake kernel's copy is still held
		// One map of n prefixes is about 80 bytes a member, two 160.
		if kept > 120*n {
			t.Errorf("%s: Sets holds %d bytes for %d members (%d a member); want one copy of them", c.what, kept, n, kept/n)
		}
		runtime.KeepAlive(f)
	}
}
