package ipset

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func strs(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if p.IsSingleIP() {
			out[i] = p.Addr().String() // `ipset list` prints hosts without /32
		} else {
			out[i] = p.String()
		}
	}
	slices.Sort(out)
	return out
}

// TestSetsKernel drives Sets against the real kernel in a fresh namespace
// and checks every step with the ipset binary, as an operator would.
func TestSetsKernel(t *testing.T) {
	k, n := newTestNetlink(t)
	s := NewSets(k, quiet)
	v4 := pfx("192.0.2.1/32", "192.0.2.2/32", "198.51.100.0/24")
	v6 := pfx("2001:db8::1/128", "2001:db8:1::/64")
	if err := s.Set(VXLANPeers, IPv4, v4); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(Name(VXLANPeers, IPv6), IPv6, v6); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := cliMembers(t, n, VXLANPeers); !slices.Equal(got, strs(v4)) {
		t.Fatalf("ipset list %s = %v, want %v", VXLANPeers, got, strs(v4))
	}
	if got := cliMembers(t, n, VXLANPeers+V6Suffix); !slices.Equal(got, strs(v6)) {
		t.Fatalf("ipset list %s-v6 = %v, want %v", VXLANPeers, got, strs(v6))
	}
	if out := ipsetCLI(t, n, "list", "-n"); slices.Contains(splitLines(out), VXLANPeers+TmpSuffix) {
		t.Fatalf("scratch set left behind: %q", out)
	}

	// By difference: one member replaced → exactly two writes.
	before := s.Stats()
	v4b := pfx("192.0.2.1/32", "192.0.2.3/32", "198.51.100.0/24")
	_ = s.Set(VXLANPeers, IPv4, v4b)
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if d := s.Stats().Writes - before.Writes; d != 2 {
		t.Fatalf("one-member change made %d writes, want 2", d)
	}
	if got := cliMembers(t, n, VXLANPeers); !slices.Equal(got, strs(v4b)) {
		t.Fatalf("after change: %v, want %v", got, strs(v4b))
	}

	// Large difference → swap: the result is right and no scratch set stays.
	big := memberRange(200)
	_ = s.Set(VXLANPeers, IPv4, big)
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := cliMembers(t, n, VXLANPeers); len(got) != 200 || !slices.Contains(got, "10.0.0.199") {
		t.Fatalf("after rewrite: %d members, want 200 including 10.0.0.199", len(got))
	}
	if out := ipsetCLI(t, n, "list", "-n"); slices.Contains(splitLines(out), VXLANPeers+TmpSuffix) {
		t.Fatalf("scratch set left behind after swap: %q", out)
	}

	// Tamper with the ipset binary; Check repairs each.
	_ = s.Set(VXLANPeers, IPv4, v4)
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	for _, tamper := range [][]string{
		{"del", VXLANPeers, "192.0.2.1"},
		{"add", VXLANPeers, "203.0.113.66"},
		{"destroy", VXLANPeers},
		{"flush", VXLANPeers + V6Suffix},
	} {
		ipsetCLI(t, n, tamper...)
		drifted, err := s.Check()
		if err != nil || drifted != 1 {
			t.Fatalf("after ipset %v: Check = %d, %v; want 1 repaired", tamper, drifted, err)
		}
		if got := cliMembers(t, n, VXLANPeers); !slices.Equal(got, strs(v4)) {
			t.Fatalf("after ipset %v and Check: %v, want %v", tamper, got, strs(v4))
		}
		if got := cliMembers(t, n, VXLANPeers+V6Suffix); !slices.Equal(got, strs(v6)) {
			t.Fatalf("after ipset %v and Check: v6 %v, want %v", tamper, got, strs(v6))
		}
	}

	// A set of the wrong type under our name is replaced.
	ipsetCLI(t, n, "create", Pools, "hash:ip")
	ipsetCLI(t, n, "create", "foreign-set", "hash:ip")
	_ = s.Set(Pools, IPv4, pfx("10.244.0.0/16"))
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := cliMembers(t, n, Pools); !slices.Equal(got, []string{"10.244.0.0/16"}) {
		t.Fatalf("%s = %v after replacing the hash:ip set", Pools, got)
	}

	// Cleanup removes ours only.
	if err := Cleanup(k, quiet); err != nil {
		t.Fatal(err)
	}
	if got := splitLines(ipsetCLI(t, n, "list", "-n")); !slices.Equal(got, []string{"foreign-set"}) {
		t.Fatalf("after Cleanup sets = %v, want only foreign-set", got)
	}
}

// splitLines returns the non-empty lines of s.
func splitLines(s string) []string { return strings.Fields(s) }
