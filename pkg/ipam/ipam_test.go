package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/nodespace"
)

var (
	v4Block29  = netip.MustParsePrefix("10.0.0.0/29")
	v6Block125 = netip.MustParsePrefix("fd00::/125")
)

func newTest(t testing.TB, blocks ...string) *Allocator {
	t.Helper()
	return newAt(t, filepath.Join(t.TempDir(), "ipam"), blocks...)
}

func newAt(t testing.TB, dir string, blocks ...string) *Allocator {
	t.Helper()
	var ps []netip.Prefix
	for _, b := range blocks {
		ps = append(ps, netip.MustParsePrefix(b))
	}
	a, err := New(dir, ps, Options{})
	if err != nil {
		t.Fatalf("New(%v): %v", blocks, err)
	}
	return a
}

func att(id string) Attachment { return Attachment{ContainerID: id, IfName: "eth0"} }

func mustAllocate(t testing.TB, a *Allocator, at Attachment, req ...netip.Addr) []Allocation {
	t.Helper()
	got, err := a.Allocate(context.Background(), at, req)
	if err != nil {
		t.Fatalf("Allocate(%v, %v): %v", at, req, err)
	}
	return got
}

func addrs(allocs []Allocation) []string {
	var s []string
	for _, al := range allocs {
		s = append(s, al.Addr.String())
	}
	return s
}

// usable lists the addresses of block a user may be given.
func usable(block netip.Prefix) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for a := block.Addr().Next(); block.Contains(a); a = a.Next() {
		m[a] = true
	}
	if block.Addr().Is4() {
		delete(m, nodespace.LastAddr(block))
	}
	return m
}

func TestExhaustionAndReservedAddresses(t *testing.T) {
	a := newTest(t, "10.0.0.0/29")
	seen := map[netip.Addr]bool{}
	for i := 0; i < 6; i++ {
		got := mustAllocate(t, a, att(fmt.Sprintf("c%d", i)))
		if len(got) != 1 || got[0].Block != v4Block29 {
			t.Fatalf("allocation %d = %v, want one address from %s", i, got, v4Block29)
		}
		seen[got[0].Addr] = true
	}
	if want := usable(v4Block29); len(seen) != len(want) || !func() bool {
		for a := range seen {
			if !want[a] {
				return false
			}
		}
		return true
	}() {
		t.Fatalf("handed out %v, want exactly 10.0.0.1-10.0.0.6 (never .0 or .7)", seen)
	}
	_, err := a.Allocate(context.Background(), att("c6"), nil)
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "10.0.0.0/29") {
		t.Fatalf("7th Allocate err = %v, want ErrExhausted naming 10.0.0.0/29", err)
	}
	if got, _ := a.Get(context.Background(), att("c6")); len(got) != 0 {
		t.Errorf("failed Allocate left %v behind", got)
	}
	if _, err := os.Lstat(filepath.Join(a.dir, attachmentsSubdir, "c6_eth0.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed Allocate left a record: %v", err)
	}

	// IPv6: only the first address is reserved.
	b := newTest(t, "fd00::/125")
	for i := 0; i < 7; i++ {
		got := mustAllocate(t, b, att(fmt.Sprintf("c%d", i)))
		if got[0].Addr == v6Block125.Addr() {
			t.Fatalf("handed out the reserved IPv6 address %s", got[0].Addr)
		}
	}
	if _, err := b.Allocate(context.Background(), att("c7"), nil); !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "fd00::/125") {
		t.Fatalf("8th IPv6 Allocate err = %v, want ErrExhausted naming fd00::/125", err)
	}
}

func TestSeveralBlocksTriedInOrder(t *testing.T) {
	a := newTest(t, "10.0.0.0/30", "10.0.1.0/30")
	var got []string
	for i := 0; i < 4; i++ {
		got = append(got, addrs(mustAllocate(t, a, att(fmt.Sprintf("c%d", i))))...)
	}
	if want := "10.0.0.1,10.0.0.2,10.0.1.1,10.0.1.2"; strings.Join(got, ",") != want {
		t.Fatalf("allocations = %v, want %s", got, want)
	}
	if _, err := a.Allocate(context.Background(), att("c4"), nil); !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "10.0.0.0/30, 10.0.1.0/30") {
		t.Fatalf("err = %v, want ErrExhausted naming both blocks", err)
	}
}

func TestReuseAfterRelease(t *testing.T) {
	ctx := context.Background()
	a := newTest(t, "10.0.0.0/29")
	var held []netip.Addr
	for i := 0; i < 6; i++ {
		held = append(held, mustAllocate(t, a, att(fmt.Sprintf("c%d", i)))[0].Addr)
	}
	for i := 0; i < 2; i++ { // release is idempotent
		if err := a.Release(ctx, att("c3")); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
	if err := a.Release(ctx, att("never-allocated")); err != nil {
		t.Fatalf("Release of an unknown attachment: %v", err)
	}
	got := mustAllocate(t, a, att("new"))
	if got[0].Addr != held[3] {
		t.Fatalf("after releasing %s in a full block, got %s", held[3], got[0].Addr)
	}
	if got, err := a.Get(ctx, att("c3")); err != nil || len(got) != 0 {
		t.Fatalf("Get of released attachment = %v, %v; want none", got, err)
	}
}

func TestReleasedAddressNotReusedAtOnce(t *testing.T) {
	ctx := context.Background()
	a := newTest(t, "10.0.0.0/24")
	first := mustAllocate(t, a, att("a"))[0].Addr
	if err := a.Release(ctx, att("a")); err != nil {
		t.Fatal(err)
	}
	if next := mustAllocate(t, a, att("b"))[0].Addr; next == first {
		t.Errorf("released %s was handed out again immediately; want the cursor to move on", first)
	}
}

func TestIdempotentAllocate(t *testing.T) {
	ctx := context.Background()
	a := newTest(t, "10.0.0.0/29", "fd00::/125")
	first := mustAllocate(t, a, att("c"))
	again := mustAllocate(t, a, att("c"))
	if !slices.Equal(first, again) {
		t.Fatalf("second Allocate = %v, want %v", again, first)
	}
	all, err := a.List(ctx)
	if err != nil || len(all) != 1 || !slices.Equal(all[att("c")], first) {
		t.Fatalf("List = %v, %v; want only c with %v", all, err, first)
	}
	got, err := a.Get(ctx, att("c"))
	if err != nil || !slices.Equal(got, first) {
		t.Fatalf("Get = %v, %v; want %v", got, err, first)
	}
	// The same container on another interface is another attachment.
	other := mustAllocate(t, a, Attachment{ContainerID: "c", IfName: "net1"})
	if other[0].Addr == first[0].Addr {
		t.Fatalf("c/net1 got c/eth0's address %s", other[0].Addr)
	}
}

func TestDualStack(t *testing.T) {
	a := newTest(t, "10.0.0.0/29", "fd00::/125")
	got := mustAllocate(t, a, att("c"))
	if len(got) != 2 || !got[0].Addr.Is4() || !got[1].Addr.Is6() || got[0].Block != v4Block29 || got[1].Block != v6Block125 {
		t.Fatalf("dual-stack Allocate = %v, want one IPv4 from %s then one IPv6 from %s", got, v4Block29, v6Block125)
	}
	only6 := newTest(t, "fd00::/125")
	if got := mustAllocate(t, only6, att("c")); len(got) != 1 || !got[0].Addr.Is6() {
		t.Fatalf("IPv6-only Allocate = %v", got)
	}
}

func TestRequestedAddresses(t *testing.T) {
	ctx := context.Background()
	a := newTest(t, "10.0.0.0/29", "fd00::/125")
	ip := netip.MustParseAddr

	got := mustAllocate(t, a, att("a"), ip("10.0.0.5"))
	if strings.Join(addrs(got), ",") != "10.0.0.5,fd00::1" {
		t.Fatalf("requested 10.0.0.5 got %v; want it plus an automatic IPv6 address", addrs(got))
	}
	if again := mustAllocate(t, a, att("a"), ip("10.0.0.5")); !slices.Equal(again, got) {
		t.Fatalf("repeated request = %v, want %v", again, got)
	}
	both := mustAllocate(t, a, att("b"), ip("10.0.0.6"), ip("fd00::7"))
	if strings.Join(addrs(both), ",") != "10.0.0.6,fd00::7" {
		t.Fatalf("requested both families: got %v", addrs(both))
	}

	for _, tc := range []struct {
		name string
		at   Attachment
		req  []netip.Addr
		is   error
		want string
	}{
		{"held by another", att("c"), []netip.Addr{ip("10.0.0.5")}, ErrInUse, "10.0.0.5 for c/eth0: address already allocated by a/eth0"},
		{"v6 held by another", att("c"), []netip.Addr{ip("fd00::7")}, ErrInUse, "by b/eth0"},
		{"network address", att("c"), []netip.Addr{ip("10.0.0.0")}, nil, "10.0.0.0 is reserved"},
		{"broadcast", att("c"), []netip.Addr{ip("10.0.0.7")}, nil, "10.0.0.7 is reserved"},
		{"v6 first", att("c"), []netip.Addr{ip("fd00::")}, nil, "fd00:: is reserved"},
		{"outside blocks", att("c"), []netip.Addr{ip("10.0.1.5")}, nil, "10.0.1.5 is not in any block"},
		{"two of a family", att("c"), []netip.Addr{ip("10.0.0.2"), ip("10.0.0.3")}, nil, "10.0.0.2 and 10.0.0.3"},
		{"differs from held", att("a"), []netip.Addr{ip("10.0.0.4")}, nil, "already holds 10.0.0.5"},
		{"invalid", att("c"), []netip.Addr{{}}, nil, "invalid requested address"},
	} {
		_, err := a.Allocate(ctx, tc.at, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: err = %v, want %q (is %v)", tc.name, err, tc.want, tc.is)
		}
	}
	if got, _ := a.Get(ctx, att("c")); len(got) != 0 {
		t.Errorf("failed requests left c with %v", got)
	}
	// Automatic allocation steps around requested addresses.
	for i := 0; i < 4; i++ {
		got := mustAllocate(t, a, att(fmt.Sprintf("auto%d", i)))
		if got[0].Addr == ip("10.0.0.5") || got[0].Addr == ip("10.0.0.6") || got[1].Addr == ip("fd00::7") {
			t.Fatalf("automatic allocation handed out a requested address: %v", got)
		}
	}
}

func TestNewRejectsBadBlocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ipam")
	for _, tc := range []struct {
		blocks []netip.Prefix
		want   string
	}{
		{[]netip.Prefix{{}}, "invalid block"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}, "10.0.0.1/24: host bits set"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/31")}, "10.0.0.0/31 too small"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}, "10.0.0.1/32 too small"},
		{[]netip.Prefix{netip.MustParsePrefix("fd00::1/128")}, "fd00::1/128 too small"},
		{[]netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/120")}, "plain IPv4 or IPv6"},
		{[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.0.64/26")}, "10.0.0.0/24 and 10.0.0.64/26 overlap"},
	} {
		if _, err := New(dir, tc.blocks, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v) err = %v, want %q", tc.blocks, err, tc.want)
		}
	}
	if _, err := New(dir, nil, Options{LockTimeout: -time.Second}); err == nil {
		t.Error("New with a negative lock timeout succeeded")
	}
	// No blocks is fine for Release/Get/List, but Allocate says why it fails.
	a, err := New(dir, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(context.Background(), att("c"), nil); err == nil || !strings.Contains(err.Error(), "no blocks") {
		t.Errorf("Allocate without blocks: err = %v", err)
	}
	if err := a.Release(context.Background(), att("c")); err != nil {
		t.Errorf("Release without blocks: %v", err)
	}
}

func TestNewRefusesSymlinkedDir(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "ipam")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(filepath.Join(base, "ipam"), []netip.Prefix{v4Block29}, Options{}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("New on a symlinked dir: err = %v, want a symlink refusal", err)
	}
}

func TestBadAttachmentNames(t *testing.T) {
	a := newTest(t, "10.0.0.0/29")
	ctx := context.Background()
	for _, at := range []Attachment{
		{"", "eth0"}, {"../x", "eth0"}, {"a/b", "eth0"}, {"-a", "eth0"},
		{"c", ""}, {"c", ".."}, {"c", "a/b"}, {"c", "eth0123456789012"},
	} {
		if _, err := a.Allocate(ctx, at, nil); err == nil {
			t.Errorf("Allocate(%q) succeeded", at)
		}
		if err := a.Release(ctx, at); err == nil {
			t.Errorf("Release(%q) succeeded", at)
		}
		if _, err := a.Get(ctx, at); err == nil {
			t.Errorf("Get(%q) succeeded", at)
		}
	}
	if all, _ := a.List(ctx); len(all) != 0 {
		t.Errorf("bad names allocated %v", all)
	}
}

func TestPermissions(t *testing.T) {
	a := newTest(t, "10.0.0.0/29")
	mustAllocate(t, a, att("c"))
	err := filepath.Walk(a.dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700 | os.ModeDir
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %s, want %s", path, fi.Mode(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ipam")
	const workers, each = 8, 7 // 56 of the 62 usable addresses of a /26
	shared := newAt(t, dir, "10.0.0.0/26")
	var wg sync.WaitGroup
	results := make(chan netip.Addr, workers*each)
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		// Half share one Allocator, half have their own: the lock must hold
		// both within one process and across handles.
		a := shared
		if w%2 == 1 {
			a = newAt(t, dir, "10.0.0.0/26")
		}
		wg.Add(1)
		go func(w int, a *Allocator) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				got, err := a.Allocate(context.Background(), att(fmt.Sprintf("g%d-%d", w, i)), nil)
				if err != nil {
					errs <- err
					continue
				}
				results <- got[0].Addr
			}
		}(w, a)
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkDistinct(t, results, workers*each)
	all, err := shared.List(context.Background())
	if err != nil || len(all) != workers*each {
		t.Fatalf("List has %d attachments (err %v), want %d", len(all), err, workers*each)
	}
}

func checkDistinct(t *testing.T, results <-chan netip.Addr, want int) {
	t.Helper()
	seen := map[netip.Addr]bool{}
	for a := range results {
		if seen[a] {
			t.Errorf("address %s handed out twice", a)
		}
		seen[a] = true
	}
	if len(seen) != want {
		t.Errorf("%d distinct addresses, want %d", len(seen), want)
	}
}

// allocateLockedOut opens an allocator on dir (block v4Block29) that waits
// timeout for the lock and fails t unless Allocate for "waiter" gives up
// with a *LockTimeoutError; it returns the allocator, that error as
// *LockTimeoutError and as returned.
func allocateLockedOut(t *testing.T, dir string, timeout time.Duration) (*Allocator, *LockTimeoutError, error) {
	t.Helper()
	a, err := New(dir, []netip.Prefix{v4Block29}, Options{LockTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Allocate(context.Background(), att("waiter"), nil)
	var lte *LockTimeoutError
	if !errors.As(err, &lte) {
		t.Fatalf("Allocate while locked: err = %v, want *LockTimeoutError", err)
	}
	return a, lte, err
}

func TestLockTimeoutNamesHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ipam")
	holder := newAt(t, dir, "10.0.0.0/29")
	holderAtt := att("holder")
	l, err := holder.lock(context.Background(), "allocate", &holderAtt)
	if err != nil {
		t.Fatal(err)
	}
	defer l.unlock()

	waiter, lte, err := allocateLockedOut(t, dir, 50*time.Millisecond)
	if lte.Path != filepath.Join(dir, "lock") || !strings.Contains(lte.Holder, fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(lte.Holder, "holder/eth0") {
		t.Fatalf("LockTimeoutError = %+v, want path %s and a holder naming this pid and holder/eth0", lte, filepath.Join(dir, "lock"))
	}
	if !strings.Contains(err.Error(), "held by pid") {
		t.Errorf("error text %q does not say who holds the lock", err)
	}
	if err := waiter.Release(context.Background(), att("waiter")); !errors.As(err, &lte) {
		t.Errorf("Release while locked: err = %v, want *LockTimeoutError", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := waiter.Get(ctx, att("waiter")); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: err = %v, want context.Canceled", err)
	}
	// A context that ends while waiting stops the wait too.
	patient := newAt(t, dir, "10.0.0.0/29")
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := patient.Allocate(ctx, att("waiter"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allocate whose context ends while waiting: err = %v, want context.DeadlineExceeded", err)
	}

	l.unlock()
	l = &ipamLock{fd: -1} // keep the deferred unlock harmless
	// The abandoned waits may take the lock for an instant before dropping
	// it; a patient allocator gets it after them.
	if _, err := newAt(t, dir, "10.0.0.0/29").Allocate(context.Background(), att("waiter"), nil); err != nil {
		t.Fatalf("Allocate after the holder let go: %v", err)
	}
}

// A clear hint over a taken address (lost or stale block file) is repaired,
// and a hint that claims everything is taken (power loss on disk) is
// re-checked before ErrExhausted; neither leads to a double allocation.
func TestStaleHintsAreRepaired(t *testing.T) {
	a := newTest(t, "10.0.0.0/29")
	taken := map[netip.Addr]bool{}
	for i := 0; i < 3; i++ {
		taken[mustAllocate(t, a, att(fmt.Sprintf("c%d", i)))[0].Addr] = true
	}
	hint := filepath.Join(a.dir, blocksSubdir, "10.0.0.0_29")
	if err := os.Remove(hint); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		got := mustAllocate(t, a, att(fmt.Sprintf("c%d", i)))[0].Addr
		if taken[got] {
			t.Fatalf("after losing the hint file, %s was handed out twice", got)
		}
		taken[got] = true
	}
	ctx := context.Background()
	for i := 0; i < 6; i += 2 {
		if err := a.Release(ctx, att(fmt.Sprintf("c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Every bit set, though three addresses are free.
	data, err := os.ReadFile(hint)
	if err != nil {
		t.Fatal(err)
	}
	data[bitmapHeader] = 0xff
	if err := os.WriteFile(hint, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := a.Allocate(ctx, att(fmt.Sprintf("again%d", i)), nil); err != nil {
			t.Fatalf("Allocate %d with an all-set hint: %v", i, err)
		}
	}
	if _, err := a.Allocate(ctx, att("extra"), nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("block should be full now: err = %v", err)
	}
	checkOwnership(t, a)
}

// checkOwnership verifies the on-disk invariants: every claim names an
// attachment whose record lists that address, and no address is listed as
// owned by two attachments.
func checkOwnership(t *testing.T, a *Allocator) {
	t.Helper()
	all, err := a.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	owners := map[netip.Addr]Attachment{}
	for at, allocs := range all {
		for _, al := range allocs {
			if prev, dup := owners[al.Addr]; dup {
				t.Errorf("%s owned by both %v and %v", al.Addr, prev, at)
			}
			owners[al.Addr] = at
		}
	}
	entries, err := os.ReadDir(filepath.Join(a.dir, addrsSubdir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		addr := netip.MustParseAddr(e.Name())
		if _, ok := owners[addr]; !ok {
			owner, _, _ := a.readOwner(addr)
			t.Errorf("claim %s (owner %v) is not listed in its owner's record: leaked", addr, owner)
		}
	}
}

func TestCorruptRecord(t *testing.T) {
	ctx := context.Background()
	a := newTest(t, "10.0.0.0/29")
	mustAllocate(t, a, att("good"))
	mustAllocate(t, a, att("bad"))
	rec := filepath.Join(a.dir, attachmentsSubdir, "bad_eth0.json")
	if err := os.WriteFile(rec, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, att("bad")); err == nil || !strings.Contains(err.Error(), rec) {
		t.Errorf("Get of a corrupt record: err = %v, want it to name %s", err, rec)
	}
	all, err := a.List(ctx)
	if err != nil || len(all) != 1 || all[att("good")] == nil {
		t.Errorf("List with one corrupt record = %v, %v; want only good", all, err)
	}
	if _, err := a.Allocate(ctx, att("bad"), nil); err == nil || !strings.Contains(err.Error(), rec) {
		t.Errorf("Allocate over a corrupt record: err = %v, want it to name %s", err, rec)
	}
	if err := a.Release(ctx, att("bad")); err != nil {
		t.Errorf("Release of a corrupt record must converge: %v", err)
	}
	// The corrupt record's claim was found and freed: the block has room
	// for exactly five more.
	for i := 0; i < 5; i++ {
		mustAllocate(t, a, att(fmt.Sprintf("c%d", i)))
	}
	if _, err := a.Allocate(ctx, att("c5"), nil); !errors.Is(err, ErrExhausted) {
		t.Errorf("err = %v, want ErrExhausted", err)
	}
	checkOwnership(t, a)
}

func TestListSweepsWhatDeadWritersLeft(t *testing.T) {
	a := newTest(t, "10.0.0.0/29")
	mustAllocate(t, a, att("c"))
	var planted []string
	for _, sub := range []string{addrsSubdir, attachmentsSubdir} {
		p := filepath.Join(a.dir, sub, tempPrefix+"123")
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		planted = append(planted, p)
	}
	// The intent record of an Allocate that died before claiming.
	stale := Attachment{ContainerID: "dead", IfName: "eth0"}
	if err := a.writeAttachment(stale, []Allocation{{Addr: netip.MustParseAddr("10.0.0.6"), Block: v4Block29}}); err != nil {
		t.Fatal(err)
	}
	planted = append(planted, filepath.Join(a.dir, attachmentsSubdir, "dead_eth0.json"))
	all, err := a.List(context.Background())
	if err != nil || len(all) != 1 || all[att("c")] == nil {
		t.Fatalf("List = %v, %v; want only c", all, err)
	}
	for _, p := range planted {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temp file %s survived List: %v", p, err)
		}
	}
}

func TestPlantedSymlinksAreNotFollowed(t *testing.T) {
	ctx := context.Background()
	a := newTest(t, "10.0.0.0/29")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A symlink at a claim path: the address counts as taken by an unknown
	// owner, and nothing is written through it.
	if err := os.Symlink(victim, filepath.Join(a.dir, addrsSubdir, "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if got := mustAllocate(t, a, att("a")); got[0].Addr.String() != "10.0.0.2" {
		t.Errorf("Allocate next to a planted claim symlink = %v, want 10.0.0.2", got)
	}
	if _, err := a.Allocate(ctx, att("b"), []netip.Addr{netip.MustParseAddr("10.0.0.1")}); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("requesting the symlinked address: err = %v, want ErrInUse mentioning the symlink", err)
	}
	// A symlink at a record path is refused on read and replaced on write.
	rec := filepath.Join(a.dir, attachmentsSubdir, "c_eth0.json")
	if err := os.Symlink(victim, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, att("c")); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Get through a record symlink: err = %v, want a refusal", err)
	}
	if err := a.Release(ctx, att("c")); err != nil {
		t.Errorf("Release with a planted record symlink: %v", err)
	}
	// An unreadable claim of a listed address does not wedge DEL: the
	// address stays taken (its owner cannot be told) and the release ends.
	claim := filepath.Join(a.dir, addrsSubdir, "10.0.0.2")
	if err := os.Remove(claim); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, claim); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, att("a")); err != nil {
		t.Errorf("Release with an unreadable claim: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(a.dir, attachmentsSubdir, "a_eth0.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Release left a's record: %v", err)
	}
	if data, _ := os.ReadFile(victim); string(data) != "precious" {
		t.Errorf("symlink target changed to %q", data)
	}
}

// TestAllocationCostIsFlat counts claim lookups (the filesystem work that
// would grow with a scan or a linear probe) per Allocate+Release cycle: a
// nearly full /24 must cost exactly what an empty one does, also while the
// cursor wraps around the block many times.
func TestAllocationCostIsFlat(t *testing.T) {
	ctx := context.Background()
	worst := map[int]int64{}
	for _, allocated := range []int{1, 250} {
		a := newTest(t, "10.0.0.0/24")
		for i := 0; i < allocated-1; i++ {
			mustAllocate(t, a, att(fmt.Sprintf("filler%d", i)))
		}
		for i := 0; i < 40; i++ { // 8 trips around the 5 free addresses
			before := a.lookups.Load()
			mustAllocate(t, a, att("me"))
			if err := a.Release(ctx, att("me")); err != nil {
				t.Fatal(err)
			}
			worst[allocated] = max(worst[allocated], a.lookups.Load()-before)
		}
	}
	if worst[250] > worst[1] || worst[1] > 3 {
		t.Fatalf("claim lookups per Allocate+Release: %d at 250 allocated, %d at 1; want equal and at most 3", worst[250], worst[1])
	}
}

// TestReservedAddresses: Options.Reserved addresses inside a block (a
// narrower block's first and last, a tunnel address) are never handed out
// and are refused when requested; exhaustion names the block.
func TestReservedAddresses(t *testing.T) {
	block := netip.MustParsePrefix("10.0.0.0/28")
	reserved := []netip.Addr{netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("10.0.0.8"), netip.MustParseAddr("192.0.2.1")}
	a, err := New(filepath.Join(t.TempDir(), "ipam"), []netip.Prefix{block}, Options{Reserved: reserved})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for i := 0; ; i++ {
		al, err := a.Allocate(context.Background(), att(fmt.Sprintf("r%d", i)), nil)
		if err != nil {
			var ee *ExhaustedError
			if !errors.As(err, &ee) || !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "no addresses left in block 10.0.0.0/28") {
				t.Fatalf("exhaustion error %v, want an ExhaustedError naming the block", err)
			}
			break
		}
		got[al[0].Addr.String()] = true
	}
	if len(got) != 11 {
		t.Errorf("%d addresses handed out (%v), want 11 (16 - first - last - 3 reserved)", len(got), got)
	}
	for _, r := range reserved {
		if got[r.String()] {
			t.Errorf("reserved address %s handed out", r)
		}
	}
	b, err := New(filepath.Join(t.TempDir(), "ipam"), []netip.Prefix{block}, Options{Reserved: reserved})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Allocate(context.Background(), att("req"), []netip.Addr{netip.MustParseAddr("10.0.0.7")}); err == nil || !strings.Contains(err.Error(), "10.0.0.7") {
		t.Errorf("requesting reserved 10.0.0.7: %v, want an error naming it", err)
	}
}

// TestReservedGateway: a block that holds the pod gateway (which the plugin
// refuses anyway) never hands it out when it is reserved.
func TestReservedGateway(t *testing.T) {
	gw := netip.MustParseAddr("169.254.1.1")
	a, err := New(filepath.Join(t.TempDir(), "ipam"), []netip.Prefix{netip.MustParsePrefix("169.254.1.0/30")}, Options{Reserved: []netip.Addr{gw}})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustAllocate(t, a, att("only")); len(got) != 1 || got[0].Addr.String() != "169.254.1.2" {
		t.Errorf("allocation %v, want 169.254.1.2 (the gateway .1 is reserved)", got)
	}
	if _, err := a.Allocate(context.Background(), att("second"), nil); !errors.Is(err, ErrExhausted) {
		t.Errorf("second allocation: %v, want exhaustion", err)
	}
}
