package firewall

import (
	"slices"
	"testing"
)

// TestSplitTable parses `iptables -S` of a whole table as both backends
// print it into what `iptables -S <chain>` prints for each chain.
func TestSplitTable(t *testing.T) {
	out := []string{
		"-P INPUT DROP",
		"-P FORWARD ACCEPT",
		"-P OUTPUT ACCEPT",
		"-N DOCKER",
		"-N ROUTELET-FORWARD",
		"-N ROUTELET-INPUT",
		"-A INPUT -j ROUTELET-INPUT",
		"-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
		"-A FORWARD -j ROUTELET-FORWARD",
		"-A FORWARD -o docker0 -j DOCKER",
		"-A ROUTELET-FORWARD -i cali+ -j ACCEPT",
		"-A ROUTELET-INPUT -p ipencap -j DROP",
	}
	got := splitTable(out)
	want := map[string][]string{
		"INPUT":            {"-P INPUT DROP", "-A INPUT -j ROUTELET-INPUT", "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT"},
		"FORWARD":          {"-P FORWARD ACCEPT", "-A FORWARD -j ROUTELET-FORWARD", "-A FORWARD -o docker0 -j DOCKER"},
		"OUTPUT":           {"-P OUTPUT ACCEPT"},
		"DOCKER":           {"-N DOCKER"},
		"ROUTELET-FORWARD": {"-N ROUTELET-FORWARD", "-A ROUTELET-FORWARD -i cali+ -j ACCEPT"},
		"ROUTELET-INPUT":   {"-N ROUTELET-INPUT", "-A ROUTELET-INPUT -p ipencap -j DROP"},
	}
	if len(got) != len(want) {
		t.Fatalf("splitTable: %d chains %q, want %d", len(got), got, len(want))
	}
	for ch, w := range want {
		if !slices.Equal(got[ch], w) {
			t.Fatalf("chain %s = %q, want %q", ch, got[ch], w)
		}
	}
	if len(splitTable(nil)) != 0 {
		t.Fatal("empty listing has chains")
	}
}

// TestWaitArgs: the lock-wait arguments are those go-iptables appends for
// the same version.
func TestWaitArgs(t *testing.T) {
	for _, tc := range []struct {
		v    [3]int
		want []string
	}{
		{[3]int{1, 8, 9}, []string{"--wait", "5"}},
		{[3]int{1, 6, 0}, []string{"--wait", "5"}},
		{[3]int{1, 4, 21}, []string{"--wait"}},
		{[3]int{1, 4, 20}, []string{"--wait"}},
		{[3]int{1, 4, 19}, nil},
	} {
		if got := waitArgs(tc.v[0], tc.v[1], tc.v[2]); !slices.Equal(got, tc.want) {
			t.Errorf("waitArgs(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
