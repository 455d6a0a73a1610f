package ipset

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// newTestNS creates a fresh named network namespace removed at cleanup,
// skipping the test when not root.
func newTestNS(t *testing.T) ns.NetNS {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces and ipsets")
	return netnstest.NewFor(t, "rlipset-")
}

// newTestNetlink opens a Netlink bound to a fresh namespace.
func newTestNetlink(t *testing.T) (*Netlink, ns.NetNS) {
	t.Helper()
	n := newTestNS(t)
	k, err := NewNetlinkAt(n.Path())
	if err != nil {
		t.Fatalf("NewNetlinkAt: %v", err)
	}
	t.Cleanup(k.Close)
	return k, n
}

// ipsetCLI runs the ipset binary inside n, skipping when it is missing.
func ipsetCLI(t *testing.T, n ns.NetNS, args ...string) string {
	t.Helper()
	netnstest.SkipUnlessInstalled(t, "ipset", "ipset") // to inspect the sets
	out, err := netnstest.Exec(context.Background(), n, "ipset", args...)
	if err != nil {
		t.Fatalf("ipset %v: %v", args, err)
	}
	return out
}

// cliMembers returns the members `ipset list` shows for name, sorted.
func cliMembers(t *testing.T, n ns.NetNS, name string) []string {
	t.Helper()
	netnstest.SkipUnlessInstalled(t, "ipset", "ipset") // to inspect the sets
	members, err := netnstest.IPSetMembers(n, name)
	if err != nil {
		t.Fatal(err)
	}
	return members
}

func TestNetlinkCodec(t *testing.T) {
	k, n := newTestNetlink(t)
	a := netip.MustParsePrefix("10.0.0.0/24")
	b := netip.MustParsePrefix("192.0.2.7/32")
	if err := k.Create("routelet-a", IPv4, 1024); err != nil {
		t.Fatal(err)
	}
	for _, p := range []netip.Prefix{a, b, b} { // adding twice is success
		if err := k.Add("routelet-a", p); err != nil {
			t.Fatal(err)
		}
	}
	info, err := k.List("routelet-a")
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != HashNet || info.Family != IPv4 || len(info.Members) != 2 {
		t.Fatalf("List = %+v, want hash:net inet with 2 members", info)
	}
	if got, want := cliMembers(t, n, "routelet-a"), []string{"10.0.0.0/24", "192.0.2.7"}; !slices.Equal(got, want) {
		t.Fatalf("ipset list members = %v, want %v", got, want)
	}
	if err := k.Del("routelet-a", b); err != nil {
		t.Fatal(err)
	}
	if err := k.Del("routelet-a", b); err != nil { // deleting an absent member is success
		t.Fatalf("second Del: %v", err)
	}
	if _, err := k.List("routelet-missing"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("List(missing) err = %v, want ErrNotExist", err)
	}
	if err := k.Destroy("routelet-missing"); err != nil && !errors.Is(err, ErrNotExist) {
		t.Fatalf("Destroy(missing) err = %v, want success or ErrNotExist", err)
	}

	// v6 set, rename and swap.
	c := netip.MustParsePrefix("2001:db8::/64")
	if err := k.Create("routelet-b", IPv6, 1024); err != nil {
		t.Fatal(err)
	}
	if err := k.Add("routelet-b", c); err != nil {
		t.Fatal(err)
	}
	if err := k.Rename("routelet-b", "routelet-c"); err != nil {
		t.Fatal(err)
	}
	info, err = k.List("routelet-c")
	if err != nil || info.Family != IPv6 || len(info.Members) != 1 || info.Members[0] != c {
		t.Fatalf("List(renamed) = %+v, %v", info, err)
	}
	if err := k.Swap("routelet-a", "routelet-c"); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Swap(v4, v6) err = %v, want ErrTypeMismatch", err)
	}
	if err := k.Create("routelet-d", IPv4, 1024); err != nil {
		t.Fatal(err)
	}
	if err := k.Swap("routelet-a", "routelet-d"); err != nil {
		t.Fatal(err)
	}
	if info, _ := k.List("routelet-a"); len(info.Members) != 0 {
		t.Fatalf("after swap routelet-a = %v, want empty", info.Members)
	}
	names, err := k.ListNames()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{"routelet-a", "routelet-c", "routelet-d"}; !slices.Equal(names, want) {
		t.Fatalf("ListNames = %v, want %v", names, want)
	}
}

func TestNetlinkLargeDump(t *testing.T) {
	k, _ := newTestNetlink(t)
	if err := k.Create("routelet-big", IPv4, 1<<16); err != nil {
		t.Fatal(err)
	}
	want := memberRange(5000)
	for _, p := range want {
		if err := k.Add("routelet-big", p); err != nil {
			t.Fatal(err)
		}
	}
	info, err := k.List("routelet-big")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Members) != len(want) {
		t.Fatalf("List returned %d members, want %d (multi-part dump merged)", len(info.Members), len(want))
	}
}

// memberRange returns n distinct /32 members in 10.0.0.0/8.
func memberRange(n int) []netip.Prefix {
	out := make([]netip.Prefix, n)
	for i := range n {
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}
	return out
}
