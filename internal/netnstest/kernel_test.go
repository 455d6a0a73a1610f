package netnstest

import (
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestMadeLinks: links a test made are listed; lo and the kernel's
// fallback tunnels (a stock kernel with the tunnel modules puts them in
// every namespace) are not. Veths named like them stand in for the
// fallbacks the kernel has not made, so the test holds on any kernel.
func TestMadeLinks(t *testing.T) {
	n := NewT(t)
	got, err := MadeLinks(n.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("fresh namespace: MadeLinks = %v, want none", got)
	}
	// Veth pairs named like the fallback devices the kernel has not put
	// there already (with ipip loaded, tunl0 is a real one), and one pair
	// of ordinary names.
	var free []string
	for _, name := range FallbackDevices {
		if _, err := n.Handle.LinkByName(name); err != nil {
			free = append(free, name)
		}
	}
	pairs := [][2]string{{"made0", "made1"}}
	for i := 0; i+1 < len(free); i += 2 {
		pairs = append(pairs, [2]string{free[i], free[i+1]})
	}
	for _, pair := range pairs {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: pair[0]}, PeerName: pair[1]}
		if err := n.Handle.LinkAdd(veth); err != nil {
			t.Fatalf("add veth %s/%s: %v", pair[0], pair[1], err)
		}
	}
	got, err = MadeLinks(n.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"made0", "made1"}) {
		t.Errorf("MadeLinks = %v, want [made0 made1]", got)
	}
}

// TestIPIPSupported: the probe agrees with what the kernel does. Where it
// reports support, an ipip link with a local address can be made in a
// fresh namespace (loading the module if need be) and tunl0 then exists
// there; where it does not, making one fails.
func TestIPIPSupported(t *testing.T) {
	n := NewT(t)
	probeErr := IPIPSupported()
	link := &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "rltest0"}, Local: []byte{192, 0, 2, 9}}
	addErr := n.Handle.LinkAdd(link)
	switch {
	case probeErr == nil && addErr != nil:
		t.Fatalf("IPIPSupported says yes, but an ipip link cannot be made: %v", addErr)
	case probeErr != nil && addErr == nil:
		t.Fatalf("IPIPSupported says no (%v), but an ipip link was made", probeErr)
	case probeErr != nil && os.Getenv(RequireIPIPEnv) != "":
		t.Fatalf("%s is set, but IPIPSupported says no: %v", RequireIPIPEnv, probeErr)
	case probeErr != nil:
		t.Logf("no IPIP on this kernel: %v", probeErr)
		return
	}
	fresh := NewT(t)
	if _, err := fresh.Handle.LinkByName("tunl0"); err != nil {
		t.Logf("no fallback tunl0 in a new namespace (fb_tunnels_only_for_init_net?): %v", err)
	}
	if loaded, err := IPIPLoaded(); err != nil || !loaded {
		t.Errorf("IPIPLoaded after an ipip link was made = %v, %v; want true", loaded, err)
	}
}
