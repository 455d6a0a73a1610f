package podguard

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// TestRules: the rendered rules are the drop of other Ethernet types, the
// encapsulation drops, one accept per distinct pod address in address
// order, an ARP accept per IPv4 address, the IPv6 link-local and
// unspecified accepts and the ARP and two family drops; the VXLAN port
// defaults.
func TestRules(t *testing.T) {
	s := Spec{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.5")}}
	r := Rules(s)
	if len(r) != 3+2+1+2+3 {
		t.Fatalf("%d rules, want 11", len(r))
	}
	if p := r[0][0].(*expr.Payload); p.Base != expr.PayloadBaseLLHeader || p.Offset != 12 || p.Len != 2 {
		t.Errorf("first rule loads %+v, want the Ethernet type from the link-layer header", p)
	}
	var allowed [][]byte
	for _, e := range r[0][1:4] {
		if c := e.(*expr.Cmp); c.Op == expr.CmpOpNeq {
			allowed = append(allowed, c.Data)
		}
	}
	if !slices.EqualFunc(allowed, [][]byte{{0x08, 0x00}, {0x86, 0xdd}, {0x08, 0x06}}, slices.Equal) {
		t.Errorf("Ethernet types let through %x, want IPv4, IPv6 and ARP", allowed)
	}
	if got := r[1][3].(*expr.Cmp).Data; got[0] != 0x12 || got[1] != 0xb5 {
		t.Errorf("VXLAN port %x, want 4789", got)
	}
	if got := r[3][3].(*expr.Cmp).Data; netip.AddrFrom4([4]byte(got)) != netip.MustParseAddr("10.0.0.5") {
		t.Errorf("first accept for %v, want 10.0.0.5", got)
	}
	if got := r[4][3].(*expr.Cmp).Data; netip.AddrFrom16([16]byte(got)) != netip.MustParseAddr("fd00::5") {
		t.Errorf("second accept for %v, want fd00::5", got)
	}
	if p := r[5][4].(*expr.Payload); p.Base != expr.PayloadBaseNetworkHeader || p.Offset != 14 || p.Len != 4 {
		t.Errorf("ARP accept loads %+v, want the sender protocol address", p)
	}
	if got := r[5][5].(*expr.Cmp).Data; netip.AddrFrom4([4]byte(got)) != netip.MustParseAddr("10.0.0.5") {
		t.Errorf("ARP accept for sender %v, want 10.0.0.5", got)
	}
	if got := r[8][1].(*expr.Cmp).Data; !slices.Equal(got, []byte{0x08, 0x06}) {
		t.Errorf("rule 8 drops protocol %x, want ARP", got)
	}
	for _, i := range []int{0, 1, 2, 8, 9, 10} {
		if v := r[i][len(r[i])-1].(*expr.Verdict); v.Kind != expr.VerdictDrop {
			t.Errorf("rule %d: verdict %v, want drop", i, v.Kind)
		}
		if _, ok := r[i][len(r[i])-2].(*expr.Counter); !ok {
			t.Errorf("rule %d: drop without counter", i)
		}
	}
	s.VXLANPort = 8472
	if got := Rules(s)[1][3].(*expr.Cmp).Data; got[0] != 0x21 || got[1] != 0x18 {
		t.Errorf("VXLAN port %x, want 8472", got)
	}
	// A pod without IPv4 has no ARP accept: all its ARP is dropped. The
	// guard of a pod without addresses is the shortest Drops reads.
	if n := len(Rules(Spec{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("fd00::5")}})); n != minRules+1 {
		t.Errorf("IPv6-only guard: %d rules, want %d", n, minRules+1)
	}
	if n := len(Rules(Spec{Device: "cali1"})); n != minRules {
		t.Errorf("guard without addresses: %d rules, want %d", n, minRules)
	}
}

// TestSameRules: counter values are ignored; any other difference in
// order, kind or value is drift.
func TestSameRules(t *testing.T) {
	s := Spec{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}
	want := Rules(s)
	have := Rules(s)
	have[0][4] = &expr.Counter{Packets: 7, Bytes: 700}
	if !sameRules(want, have) {
		t.Errorf("counted rules differ from fresh ones")
	}
	other := Rules(Spec{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.6")}})
	if sameRules(want, other) {
		t.Errorf("rules of another address compare equal")
	}
	if sameRules(want, want[1:]) {
		t.Errorf("a rule short compares equal")
	}
	swapped := Rules(s)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	if sameRules(want, swapped) {
		t.Errorf("reordered rules compare equal")
	}
	noCounter := Rules(s)
	noCounter[1] = append(noCounter[1][:2:2], &expr.Verdict{Kind: expr.VerdictDrop}, &expr.Verdict{Kind: expr.VerdictDrop})
	if sameRules(want, noCounter) {
		t.Errorf("a counter replaced by a verdict compares equal")
	}
}

// TestSpecValidate: bad device names and non-pod addresses are refused,
// naming the value.
func TestSpecValidate(t *testing.T) {
	for _, s := range []Spec{
		{Device: ""},
		{Device: "cali0123456789ab"},
		{Device: "cali/1"},
		{Device: "cali1", Addrs: []netip.Addr{{}}},
		{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("::")}},
		{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("224.0.0.1")}},
		{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: accepted", s)
		}
	}
	if err := (Spec{Device: "cali1", Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}).Validate(); err != nil {
		t.Errorf("a good spec: %v", err)
	}
}

// TestStale: only chains neither kept nor backed by an existing device are
// stale; an error asking about one device leaves the others decided.
func TestStale(t *testing.T) {
	have := map[string]*nftables.Chain{"cali1": {}, "cali2": {}, "cali3": {}, "cali4": {}}
	keep := map[string]bool{"cali1": true}
	exists := func(name string) (bool, error) {
		switch name {
		case "cali2":
			return true, nil
		case "cali4":
			return false, errors.New("netlink: interrupted")
		}
		return false, nil
	}
	got, err := Stale(have, keep, exists)
	if !slices.Equal(got, []string{"cali3"}) || err == nil {
		t.Errorf("Stale = %v, %v; want [cali3] and the error about cali4", got, err)
	}
}
