package peers

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/internal/netiptest"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/state"
)

// pfx parses CIDRs.
var pfx = netiptest.Prefixes

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// self is node a: 10.0.1.10 on 10.0.1.0/24 (and fd00:1::10/64), blocks
// 10.244.1.0/24 and fd00:244:1::/120.
var self = Self{
	Name:         "a",
	IPv4:         Endpoint{HostIP: netip.MustParseAddr("10.0.1.10"), VTEPMAC: mac("02:aa:00:00:00:04"), TunnelAddr: netip.MustParseAddr("10.244.1.0")},
	IPv6:         Endpoint{HostIP: netip.MustParseAddr("fd00:1::10"), VTEPMAC: mac("02:aa:00:00:00:06"), TunnelAddr: netip.MustParseAddr("fd00:244:1::")},
	Blocks:       pfx("10.244.1.0/24", "fd00:244:1::/120"),
	WireGuardKey: wgKey(0xaa),
}

// wgKey is a WireGuard key of 32 bytes b (any non-zero 32 bytes is one).
func wgKey(b byte) wgtypes.Key {
	var k wgtypes.Key
	for i := range k {
		k[i] = b
	}
	return k
}

var host = nodespace.Host{
	Addrs:     pfx("10.0.1.10/24", "fd00:1::10/64", "127.0.0.1/8", "::1/128"),
	Connected: pfx("172.31.0.0/16"),
}

// established peers b (same subnet) and c (routed), seen at t0.
var (
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b  = Record{Name: "b", HostIPv4: "10.0.1.11", HostIPv6: "fd00:1::11", Blocks: []string{"10.244.2.0/24", "fd00:244:2::/120"},
		VTEPMAC: "02:bb:00:00:00:04", VTEPMACv6: "02:bb:00:00:00:06", TunnelIPv4: "10.244.2.0", TunnelIPv6: "fd00:244:2::"}
	c = Record{Name: "c", HostIPv4: "10.0.2.10", Blocks: []string{"10.244.3.0/24"}, VTEPMAC: "02:cc:00:00:00:04", TunnelIPv4: "10.244.3.0"}
)

// establishedSeen is Seen after b and c were accepted at t0.
func establishedSeen() map[Claim]Sighting {
	return Resolve(Input{Self: self, Host: host, Records: []Record{b, c}, Now: t0}).Seen
}

// newcomer is a good record x with one good block; change makes it hostile.
func newcomer(change func(*Record)) Record {
	x := Record{Name: "x", HostIPv4: "10.0.1.77", Blocks: []string{"10.244.77.0/24"}, VTEPMAC: "02:77:00:00:00:04", TunnelIPv4: "10.244.77.0"}
	if change != nil {
		change(&x)
	}
	return x
}

// find returns the peer called name, ok false when there is none.
func find(ps []NodeInfo, name string) (NodeInfo, bool) {
	i := slices.IndexFunc(ps, func(n NodeInfo) bool { return n.Name == name })
	if i < 0 {
		return NodeInfo{}, false
	}
	return ps[i], true
}

func TestResolveRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Record)
		field  string // refused field ("" none)
		value  string
		reason string // substring of the reason
		blocks []string
	}{
		{"good", nil, "", "", "", []string{"10.244.77.0/24"}},
		{"every address", func(r *Record) { r.Blocks = append(r.Blocks, "0.0.0.0/0") }, FieldBlock, "0.0.0.0/0", "every address", []string{"10.244.77.0/24"}},
		{"every IPv6 address", func(r *Record) { r.Blocks = append(r.Blocks, "::/0") }, FieldBlock, "::/0", "every address", []string{"10.244.77.0/24"}},
		{"half of everything", func(r *Record) { r.Blocks = append(r.Blocks, "128.0.0.0/1") }, FieldBlock, "128.0.0.0/1", "overlaps", []string{"10.244.77.0/24"}},
		{"underlay subnet", func(r *Record) { r.Blocks = append(r.Blocks, "10.0.1.0/24") }, FieldBlock, "10.0.1.0/24", "the node's address 10.0.1.10", []string{"10.244.77.0/24"}},
		{"part of the underlay subnet", func(r *Record) { r.Blocks = append(r.Blocks, "10.0.1.128/26") }, FieldBlock, "10.0.1.128/26", "connected subnet 10.0.1.0/24", []string{"10.244.77.0/24"}},
		{"connected route", func(r *Record) { r.Blocks = append(r.Blocks, "172.31.4.0/24") }, FieldBlock, "172.31.4.0/24", "connected route 172.31.0.0/16", []string{"10.244.77.0/24"}},
		{"peer c's host IP", func(r *Record) { r.Blocks = append(r.Blocks, "10.0.2.8/30") }, FieldBlock, "10.0.2.8/30", "node c's established host IP 10.0.2.10", []string{"10.244.77.0/24"}},
		{"its own host IP", func(r *Record) { r.HostIPv4 = "10.9.0.5"; r.Blocks = append(r.Blocks, "10.9.0.0/24") }, FieldBlock, "10.9.0.0/24", "this record's own host IP 10.9.0.5", []string{"10.244.77.0/24"}},
		{"loopback", func(r *Record) { r.Blocks = append(r.Blocks, "127.0.0.0/8") }, FieldBlock, "127.0.0.0/8", "loopback", []string{"10.244.77.0/24"}},
		{"link-local", func(r *Record) { r.Blocks = append(r.Blocks, "169.254.0.0/16") }, FieldBlock, "169.254.0.0/16", "link-local", []string{"10.244.77.0/24"}},
		{"multicast", func(r *Record) { r.Blocks = append(r.Blocks, "224.0.0.0/4") }, FieldBlock, "224.0.0.0/4", "multicast", []string{"10.244.77.0/24"}},
		{"IPv6 link-local", func(r *Record) { r.Blocks = append(r.Blocks, "fe80::/10") }, FieldBlock, "fe80::/10", "link-local", []string{"10.244.77.0/24"}},
		{"our block", func(r *Record) { r.Blocks = append(r.Blocks, "10.244.1.0/24") }, FieldBlock, "10.244.1.0/24", "this node's block 10.244.1.0/24", []string{"10.244.77.0/24"}},
		{"inside our block", func(r *Record) { r.Blocks = append(r.Blocks, "10.244.1.64/26") }, FieldBlock, "10.244.1.64/26", "this node's block", []string{"10.244.77.0/24"}},
		{"b's block", func(r *Record) { r.Blocks = append(r.Blocks, "10.244.2.0/24") }, FieldBlock, "10.244.2.0/24", "node b's established block 10.244.2.0/24", []string{"10.244.77.0/24"}},
		{"overlapping b's block", func(r *Record) { r.Blocks = append(r.Blocks, "10.244.0.0/16") }, FieldBlock, "10.244.0.0/16", "overlaps", []string{"10.244.77.0/24"}},
		{"host bits", func(r *Record) { r.Blocks = append(r.Blocks, "10.244.88.1/24") }, FieldBlock, "10.244.88.1/24", "host bits", []string{"10.244.77.0/24"}},
		{"not a CIDR", func(r *Record) { r.Blocks = append(r.Blocks, "bogus") }, FieldBlock, "bogus", "not a CIDR", []string{"10.244.77.0/24"}},
		{"b's host IP", func(r *Record) { r.HostIPv4 = "10.0.1.11" }, FieldHostIPv4, "10.0.1.11", "node b's established host IP", []string{"10.244.77.0/24"}},
		{"host IP in b's block", func(r *Record) { r.HostIPv4 = "10.244.2.9" }, FieldHostIPv4, "10.244.2.9", "node b's established block", []string{"10.244.77.0/24"}},
		{"host IP in our block", func(r *Record) { r.HostIPv4 = "10.244.1.9" }, FieldHostIPv4, "10.244.1.9", "this node's block", []string{"10.244.77.0/24"}},
		{"loopback host IP", func(r *Record) { r.HostIPv4 = "127.0.0.1" }, FieldHostIPv4, "127.0.0.1", "loopback", []string{"10.244.77.0/24"}},
		{"IPv6 host IP in the IPv4 field", func(r *Record) { r.HostIPv4 = "fd00::1" }, FieldHostIPv4, "fd00::1", "not an IPv4", []string{"10.244.77.0/24"}},
		{"b's VTEP MAC", func(r *Record) { r.VTEPMAC = "02:bb:00:00:00:04" }, FieldVTEPMAC, "02:bb:00:00:00:04", "node b's established VTEP MAC", []string{"10.244.77.0/24"}},
		{"multicast VTEP MAC", func(r *Record) { r.VTEPMAC = "01:00:5e:00:00:01" }, FieldVTEPMAC, "01:00:5e:00:00:01", "unicast", []string{"10.244.77.0/24"}},
		{"b's tunnel address", func(r *Record) { r.TunnelIPv4 = "10.244.2.0" }, FieldTunnelIPv4, "10.244.2.0", "node b's established tunnel address", []string{"10.244.77.0/24"}},
		{"our host IP", func(r *Record) { r.HostIPv4 = "10.0.1.10" }, FieldRecord, "x", "this node's host IP", nil},
		{"another address of ours", func(r *Record) { r.HostIPv6 = "fd00:1::10" }, FieldRecord, "x", "host IP", nil},
		{"our VTEP MAC", func(r *Record) { r.VTEPMAC = "02:aa:00:00:00:04" }, FieldRecord, "x", "this node's VTEP MAC", nil},
		{"our IPv6 VTEP MAC", func(r *Record) { r.VTEPMACv6 = "02:aa:00:00:00:06" }, FieldRecord, "x", "this node's VTEP MAC", nil},
		{"our tunnel address", func(r *Record) { r.TunnelIPv4 = "10.244.1.0" }, FieldRecord, "x", "this node's tunnel address", nil},
		{"our name", func(r *Record) { r.Name = "a" }, FieldRecord, "a", "own name", nil},
		{"bad name", func(r *Record) { r.Name = "../x" }, FieldRecord, "../x", "invalid node name", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newcomer(tc.change)
			res := Resolve(Input{Self: self, Host: host, Records: []Record{b, c, x}, Seen: establishedSeen(), Now: t0.Add(time.Hour)})
			var got []Refusal
			for _, r := range res.Refused {
				if r.Node == x.Name {
					got = append(got, r)
				} else {
					t.Errorf("established peer's value refused: %v", r)
				}
			}
			switch {
			case tc.field == "" && len(got) > 0:
				t.Errorf("refused %v, want nothing", got)
			case tc.field != "" && (len(got) != 1 || got[0].Field != tc.field || got[0].Value != tc.value || !strings.Contains(got[0].Reason, tc.reason)):
				t.Errorf("refused %v, want one refusal of %s %q because %q", got, tc.field, tc.value, tc.reason)
			}
			for _, name := range []string{"b", "c"} {
				if n, ok := find(res.Peers, name); !ok || len(n.Blocks) == 0 || !n.IPv4.HostIP.IsValid() {
					t.Errorf("established peer %s = %+v, %v; want it whole", name, n, ok)
				}
			}
			n, ok := find(res.Peers, x.Name)
			if tc.blocks == nil {
				if ok {
					t.Errorf("record refused whole is still a peer: %+v", n)
				}
				return
			}
			var blocks []string
			for _, p := range n.Blocks {
				blocks = append(blocks, p.String())
			}
			if !slices.Equal(blocks, tc.blocks) {
				t.Errorf("newcomer's blocks = %v, want %v", blocks, tc.blocks)
			}
		})
	}
}

// TestResolveEstablishedWins: the value seen first keeps its claim, not the
// name that sorts first and not the record's older time stamp; values
// first seen together go by record time, then name.
func TestResolveEstablishedWins(t *testing.T) {
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	intruder := Record{Name: "a0", HostIPv4: "10.0.1.78", Blocks: []string{"10.244.2.0/25", "10.244.78.0/24"}, Updated: old}
	res := Resolve(Input{Self: self, Host: host, Records: []Record{intruder, b}, Seen: establishedSeen(), Now: t0.Add(time.Hour)})
	if n, _ := find(res.Peers, "b"); !slices.Equal(n.Blocks, pfx("10.244.2.0/24", "fd00:244:2::/120")) {
		t.Errorf("established b's blocks = %v", n.Blocks)
	}
	if n, _ := find(res.Peers, "a0"); !slices.Equal(n.Blocks, pfx("10.244.78.0/24")) {
		t.Errorf("newcomer's blocks = %v, want its own block only", n.Blocks)
	}

	// First seen together: the earlier record time wins, then the name.
	y := Record{Name: "y", HostIPv4: "10.0.1.80", Blocks: []string{"10.244.90.0/24"}, Updated: t0}
	z := Record{Name: "z", HostIPv4: "10.0.1.81", Blocks: []string{"10.244.90.0/24"}, Updated: old}
	res = Resolve(Input{Self: self, Host: host, Records: []Record{y, z}, Now: t0})
	if n, _ := find(res.Peers, "z"); len(n.Blocks) != 1 {
		t.Errorf("z (older record) = %+v, want the block", n)
	}
	z.Updated = t0
	res = Resolve(Input{Self: self, Host: host, Records: []Record{z, y}, Now: t0})
	if n, _ := find(res.Peers, "y"); len(n.Blocks) != 1 {
		t.Errorf("y (same time, name first) = %+v, want the block", n)
	}
	// Once decided, the order is kept: z's time stamp moving back does not
	// take the block from y.
	z.Updated = old
	res = Resolve(Input{Self: self, Host: host, Records: []Record{z, y}, Seen: res.Seen, Now: t0.Add(time.Minute)})
	if n, _ := find(res.Peers, "y"); len(n.Blocks) != 1 {
		t.Errorf("y after z's time stamp went back = %+v, want the block", n)
	}

	// A clock that went back does not make a newcomer established.
	res = Resolve(Input{Self: self, Host: host, Records: []Record{b, intruder}, Seen: establishedSeen(), Now: t0.Add(-24 * time.Hour)})
	if n, _ := find(res.Peers, "a0"); slices.Contains(n.Blocks, netip.MustParsePrefix("10.244.2.0/25")) {
		t.Errorf("newcomer took b's block with the clock set back: %+v", n)
	}
	// When b's record goes, the newcomer gets the space at once; if b
	// comes back within Retain (a record rewritten in place), b is still
	// the established one.
	seen := res.Seen
	res = Resolve(Input{Self: self, Host: host, Records: []Record{intruder}, Seen: seen, Now: t0.Add(2 * time.Hour), Retain: time.Minute})
	if n, _ := find(res.Peers, "a0"); !slices.Equal(n.Blocks, pfx("10.244.2.0/25", "10.244.78.0/24")) {
		t.Errorf("after b left, a0's blocks = %v, want both", n.Blocks)
	}
	back := Resolve(Input{Self: self, Host: host, Records: []Record{intruder, b}, Seen: res.Seen, Now: t0.Add(2*time.Hour + 30*time.Second), Retain: time.Minute})
	if n, _ := find(back.Peers, "b"); !slices.Contains(n.Blocks, netip.MustParsePrefix("10.244.2.0/24")) {
		t.Errorf("b back within Retain = %+v, want its block", n)
	}
	// Past Retain, b's old sighting is forgotten: it returns as a newcomer.
	later := Resolve(Input{Self: self, Host: host, Records: []Record{intruder}, Seen: res.Seen, Now: t0.Add(2*time.Hour + 2*time.Minute), Retain: time.Minute})
	later = Resolve(Input{Self: self, Host: host, Records: []Record{intruder, b}, Seen: later.Seen, Now: t0.Add(3 * time.Hour), Retain: time.Minute})
	if n, _ := find(later.Peers, "b"); slices.Contains(n.Blocks, netip.MustParsePrefix("10.244.2.0/24")) {
		t.Errorf("b back after Retain took a0's established block: %+v", n)
	}
}

// TestValidatorLedger: the first-seen order survives a new Validator on
// the same state directory (a daemon restart).
func TestValidatorLedger(t *testing.T) {
	dir := t.TempDir()
	now := t0
	clock := func() time.Time { now = now.Add(time.Second); return now }
	intruder := Record{Name: "a0", HostIPv4: "10.0.1.78", Blocks: []string{"10.244.2.0/24"}, Updated: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	v := New(Options{Self: self, StateDir: dir, Now: clock})
	v.Validate([]Record{b})
	v.Flush()
	v.Validate([]Record{b, intruder})
	v.Flush()
	if r := v.Refused(); len(r) != 1 || r[0].Node != "a0" {
		t.Fatalf("refused %v, want a0's block", r)
	}
	if _, err := os.Stat(filepath.Join(dir, LedgerFile)); err != nil {
		t.Fatal(err)
	}
	v2 := New(Options{Self: self, StateDir: dir, Now: clock})
	ps := v2.Validate([]Record{intruder, b})
	if n, _ := find(ps, "b"); !slices.Contains(n.Blocks, netip.MustParsePrefix("10.244.2.0/24")) {
		t.Errorf("after a restart b = %+v, want its block", n)
	}
	if r := v2.Refused(); len(r) != 1 || r[0].Node != "a0" || r[0].Value != "10.244.2.0/24" {
		t.Errorf("after a restart refused %v, want a0's block", r)
	}
	// An unreadable ledger is an empty one, not a failure.
	if err := os.WriteFile(filepath.Join(dir, LedgerFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ps := New(Options{Self: self, StateDir: dir, Now: clock}).Validate([]Record{b}); len(ps) != 1 {
		t.Errorf("with a corrupt ledger: %v", ps)
	}
}

// ledgerStat returns a function that stats dir's ledger file, failing t
// when it cannot.
func ledgerStat(t *testing.T, dir string) func() os.FileInfo {
	return func() os.FileInfo {
		fi, err := os.Stat(filepath.Join(dir, LedgerFile))
		if err != nil {
			t.Fatalf("ledger: %v", err)
		}
		return fi
	}
}

// TestValidatorLedgerOnlyOnChange: re-validating records that changed
// nothing leaves the ledger file alone; a record whose block moved adds a
// claim, the ledger is written, and after a restart the moved block is
// b's established claim against a newcomer whose record claims an earlier
// time.
func TestValidatorLedgerOnlyOnChange(t *testing.T) {
	dir := t.TempDir()
	now := t0
	clock := func() time.Time { now = now.Add(time.Second); return now }
	stat := ledgerStat(t, dir)
	v := New(Options{Self: self, StateDir: dir, Now: clock})
	v.Validate([]Record{b, c})
	v.Flush()
	before := stat()
	for range 3 {
		v.Validate([]Record{c, b})
		v.Flush()
	}
	if !os.SameFile(before, stat()) {
		t.Errorf("the ledger was rewritten by re-validations that changed nothing")
	}

	moved := b
	moved.Blocks = []string{"10.244.20.0/24", "fd00:244:2::/120"}
	moved.Updated = t0 // later than the newcomer's claimed time below
	v.Validate([]Record{moved, c})
	v.Flush()
	if after := stat(); os.SameFile(before, after) && after.Size() == before.Size() {
		t.Fatalf("the ledger was not written when b's block moved")
	}
	seen, err := ReadLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := seen[Claim{Node: "b", Field: FieldBlock, Value: "10.244.20.0/24"}]; !ok || !s.Gone.IsZero() {
		t.Errorf("moved block in the ledger = %+v, %v; want present", s, ok)
	}
	if s, ok := seen[Claim{Node: "b", Field: FieldBlock, Value: "10.244.2.0/24"}]; !ok || s.Gone.IsZero() {
		t.Errorf("old block in the ledger = %+v, %v; want kept as gone", s, ok)
	}
	if !maps.EqualFunc(seen, v.sightings(), func(a, b Sighting) bool { return a.First.Equal(b.First) && a.Gone.Equal(b.Gone) }) {
		t.Errorf("the ledger holds %d claims, the validator %d, or their times differ", len(seen), len(v.sightings()))
	}

	intruder := Record{Name: "a0", HostIPv4: "10.0.1.78", Blocks: []string{"10.244.20.0/24"}, Updated: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	ps := New(Options{Self: self, StateDir: dir, Now: clock}).Validate([]Record{intruder, moved, c})
	if n, _ := find(ps, "b"); !slices.Contains(n.Blocks, netip.MustParsePrefix("10.244.20.0/24")) {
		t.Errorf("after a restart b = %+v, want its moved block", n)
	}
	if n, _ := find(ps, "a0"); len(n.Blocks) != 0 {
		t.Errorf("after a restart the newcomer a0 = %+v, want its block refused", n)
	}
}

// TestLedgerAppends: a peer change appends its sightings to the ledger
// instead of writing every claim again (the file is the same one, a little
// longer); the ledger reads back as the Validator's sightings after every
// Flush; a line still being appended (no newline yet) is not read; a
// restarted Validator writes the ledger whole at its first Flush; the
// appended lines are folded into a whole write before they outgrow the
// ledger; a ledger someone else replaced is written whole, not appended
// to; and a version 1 ledger (no appended lines) still reads.
func TestLedgerAppends(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, LedgerFile)
	now := t0
	clock := func() time.Time { now = now.Add(time.Second); return now }
	stat := ledgerStat(t, dir)
	readBack := func(v *Validator, when string) {
		t.Helper()
		if got, err := ReadLedger(dir); err != nil || !sameSightings(got, v.sightings()) {
			t.Fatalf("%s: ledger read back %d claims, %v; the validator holds %d", when, len(got), err, len(v.sightings()))
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	v := New(Options{Self: self, StateDir: dir, Now: clock, Logger: quiet})
	recs := benchRecords(300, nil)
	v.Validate(recs)
	v.Flush()
	first := stat()
	readBack(v, "first write")

	moved := benchRecords(300, map[int]bool{7: true})
	v.Validate(moved)
	v.Flush()
	if after := stat(); !os.SameFile(first, after) || after.Size() <= first.Size() || after.Size() > first.Size()+1024 {
		t.Fatalf("one peer change: ledger %d → %d bytes, same file %v; want a few hundred bytes appended to it",
			first.Size(), after.Size(), os.SameFile(first, after))
	}
	readBack(v, "after an append")

	// A line a writer is still appending is not read.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"claims":[{"node":"n0007","field":"block","value":"10.9.0.0/24","firstSeen":"2026-`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	readBack(v, "with an incomplete line")

	// A restart reads the same sightings and writes the ledger whole.
	v2 := New(Options{Self: self, StateDir: dir, Now: clock, Logger: quiet})
	if !sameSightings(v2.sightings(), v.sightings()) {
		t.Fatalf("after a restart %d sightings, want %d", len(v2.sightings()), len(v.sightings()))
	}
	v2.Validate(moved)
	v2.Validate(recs)
	v2.Flush()
	whole := stat()
	if os.SameFile(first, whole) {
		t.Errorf("the first Flush after a restart appended; want the ledger written whole")
	}
	readBack(v2, "after the restart's write")

	// Changes append until the lines would outgrow the ledger.
	compacted := false
	for i := range 2000 {
		r := recs
		if i%2 == 0 {
			r = moved
		}
		v2.Validate(r)
		v2.Flush()
		fi := stat()
		if fi.Size() > 2*max(whole.Size(), minCompact)+4096 {
			t.Fatalf("change %d: ledger of %d bytes, written whole at %d", i, fi.Size(), whole.Size())
		}
		if !os.SameFile(fi, whole) {
			compacted = true
			break
		}
	}
	if !compacted {
		t.Errorf("2000 changes appended and the ledger was never written whole")
	}
	readBack(v2, "after the appended lines were folded in")

	// A ledger replaced by someone else is written whole, not appended to.
	if err := writeLedger(dir, map[Claim]Sighting{{Node: "zz", Field: FieldBlock, Value: "10.99.0.0/24"}: {First: t0}}); err != nil {
		t.Fatal(err)
	}
	v2.Validate(recs)
	v2.Validate(moved)
	v2.Flush()
	readBack(v2, "after the ledger was replaced")

	// A time the Validator cannot keep (it keeps nanoseconds since 1970)
	// makes the ledger unreadable to it: every value counts as first seen
	// together, as with a corrupt one.
	far := `{"version":2,"claims":[
{"node":"n0007","field":"block","value":"10.100.1.192/26","firstSeen":"2500-01-01T00:00:00Z"}
]}
`
	if err := os.WriteFile(path, []byte(far), 0o600); err != nil {
		t.Fatal(err)
	}
	if v3 := New(Options{Self: self, StateDir: dir, Now: clock, Logger: quiet}); len(v3.seen) != 0 {
		t.Errorf("a ledger with a time in 2500 gave %d sightings; want none", len(v3.seen))
	}

	// Version 1: the claims only.
	v1 := `{"version":1,"claims":[
{"node":"b","field":"block","value":"10.244.2.0/24","firstSeen":"2026-01-01T00:00:00Z"}
]}
`
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLedger(dir)
	if s, ok := got[Claim{Node: "b", Field: FieldBlock, Value: "10.244.2.0/24"}]; err != nil || len(got) != 1 || !ok || !s.First.Equal(t0) {
		t.Errorf("version 1 ledger read as %v, %v", got, err)
	}
}

// TestValidatorInvalidUTF8: values that are not UTF-8 (a datastore that
// does not decode JSON may hand them over) are refused and exported, not a
// panic of the refusal gauge.
func TestValidatorInvalidUTF8(t *testing.T) {
	v := New(Options{Self: self, Logger: slog.New(slog.DiscardHandler)})
	ps := v.Validate([]Record{b, {Name: "x", HostIPv4: "\x9b", Blocks: []string{"10.244.9.0/24\xff"}}})
	if n, ok := find(ps, "x"); !ok || n.IPv4.HostIP.IsValid() || len(n.Blocks) != 0 {
		t.Errorf("x = %+v, %v; want its host IP and block refused", n, ok)
	}
	if r := v.Refused(); len(r) != 2 {
		t.Errorf("refused %v, want x's host IP and block", r)
	}
}

// writeLedger writes seen as the Validator's Flush would.
func writeLedger(dir string, seen map[Claim]Sighting) error {
	cs, _ := compactSightings(seen)
	return writeClaims(dir, sortedClaims(cs))
}

// TestLedgerRoundTrip: what writeLedger writes, readLedger reads back the
// same, gone times and values that JSON must escape included.
func TestLedgerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	seen := map[Claim]Sighting{
		{Node: "b", Field: FieldBlock, Value: "10.244.2.0/24"}:       {First: t0},
		{Node: "b", Field: FieldHostIPv4, Value: "10.0.1.11"}:        {First: t0.Add(time.Nanosecond), Gone: t0.Add(time.Hour)},
		{Node: "c", Field: FieldVTEPMAC, Value: "02:cc:00:00:00:04"}: {First: t0.Add(time.Nanosecond)},
		{Node: "q\"u\\o<t>e&\x01é", Field: FieldBlock, Value: "\n"}:  {First: t0.In(time.FixedZone("x", 3600))},
	}
	if err := writeLedger(dir, seen); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLedger(dir)
	if err != nil {
		data, _ := os.ReadFile(filepath.Join(dir, LedgerFile))
		t.Fatalf("%v in:\n%s", err, data)
	}
	if !maps.EqualFunc(got, seen, func(a, b Sighting) bool { return a.First.Equal(b.First) && a.Gone.Equal(b.Gone) }) {
		t.Errorf("read back %v, want %v", got, seen)
	}
	if err := writeLedger(dir, map[Claim]Sighting{}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadLedger(dir); err != nil || len(got) != 0 {
		t.Errorf("empty ledger read back as %v, %v", got, err)
	}
}

// TestValidatorCacheMatchesResolve: a Validator that re-validates records
// it parsed before (changed, unchanged, gone, duplicated, hostile) decides
// exactly as Resolve does from scratch with the same sightings.
func TestValidatorCacheMatchesResolve(t *testing.T) {
	now := t0
	v := New(Options{Self: self, Now: func() time.Time { return now }, Retain: time.Minute})
	moved := b
	moved.Blocks = []string{"10.244.20.0/24"}
	hostile := newcomer(func(r *Record) { r.Blocks = append(r.Blocks, "10.244.20.0/25", "0.0.0.0/0"); r.HostIPv4 = "10.0.1.11" })
	dup := c
	dup.HostIPv4 = "10.0.2.99"
	steps := [][]Record{
		{b, c},
		{b, c},
		{b, c, hostile},
		{moved, c, hostile},
		{hostile, c, dup},
		{c},
		{b, c, newcomer(nil)},
		{b, {Name: "Bad_Name"}, c},
	}
	for i, recs := range steps {
		now = now.Add(time.Second)
		want := Resolve(Input{Self: self, Records: recs, Seen: v.sightings(), Now: now, Retain: time.Minute})
		got := v.Validate(recs)
		if !slices.EqualFunc(got, want.Peers, nodeEqual) {
			t.Errorf("step %d: peers\n%+v\nwant\n%+v", i, got, want.Peers)
		}
		if !slices.Equal(v.Refused(), want.Refused) {
			t.Errorf("step %d: refused\n%v\nwant\n%v", i, v.Refused(), want.Refused)
		}
		if !maps.EqualFunc(v.sightings(), want.Seen, func(a, b Sighting) bool { return a.First.Equal(b.First) && a.Gone.Equal(b.Gone) }) {
			t.Errorf("step %d: sightings differ", i)
		}
	}
}

// TestValidatorIncrementalMatchesResolve: over many passes of a few
// records changing, going and coming back, with values drawn from small
// sets (so blocks overlap, host IPs fall in blocks, MACs and tunnel
// addresses collide), names that repeat, a host whose addresses change,
// and time passing past Retain, the Validator decides exactly as Resolve
// does from scratch with the same sightings.
func TestValidatorIncrementalMatchesResolve(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	record := func(name string) Record {
		r := Record{Name: name, HostIPv4: pick("", "10.0.3.1", "10.0.3.2", "10.9.0.5", "10.244.50.7", "10.0.1.10", "10.0.1.99"),
			HostIPv6:           pick("", "", "fd00:3::1", "fd00:3::2"),
			VTEPMAC:            pick("", "02:00:00:00:00:01", "02:00:00:00:00:02", "02:aa:00:00:00:04", "bogus"),
			TunnelIPv4:         pick("", "10.244.50.0", "10.244.51.0"),
			WireGuardPublicKey: pick("", "", wgKey(1).String(), wgKey(2).String(), self.WireGuardKey.String(), "bogus"),
			WireGuardPort:      pick("", "", "51821", "0"),
			BGPAS:              pick("", "", "64512", "4200000000", "0"),
			Updated:            t0.Add(time.Duration(rng.IntN(3)) * time.Hour)}
		for range rng.IntN(3) {
			r.Blocks = append(r.Blocks, pick("10.244.50.0/24", "10.244.50.0/25", "10.244.50.128/26", "10.244.51.0/24", "10.244.0.0/16",
				"10.9.0.0/24", "10.244.1.0/26", "fd00:3::/120", "fd00:3::/64", "10.244.52.0/24", "0.0.0.0/0", "172.31.1.0/24"))
		}
		return r
	}
	names := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "a", "Bad_Name"}
	now := t0
	h := host
	dir := t.TempDir()
	v := New(Options{Self: self, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Retain: time.Minute,
		ReadHost: func() (nodespace.Host, error) { return h, nil }, StateDir: dir})
	recs := map[string]Record{}
	for step := range 3000 {
		for range 1 + rng.IntN(3) {
			name := names[rng.IntN(len(names))]
			if _, ok := recs[name]; ok && rng.IntN(3) == 0 {
				delete(recs, name)
			} else {
				recs[name] = record(name)
			}
		}
		if rng.IntN(50) == 0 {
			h = host
			if rng.IntN(2) == 0 {
				h.Addrs = append(slices.Clone(h.Addrs), netip.MustParsePrefix("10.244.51.1/32"))
			}
			v.HostChanged()
		}
		list := slices.Collect(maps.Values(recs))
		slices.SortFunc(list, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })
		if rng.IntN(40) == 0 && len(list) > 0 {
			dup := record(list[0].Name)
			list = append(list, dup)
		}
		rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		want := Resolve(Input{Self: self, Host: h, Records: list, Seen: v.sightings(), Now: now, Retain: time.Minute})
		got := v.Validate(list)
		if !slices.EqualFunc(got, want.Peers, nodeEqual) {
			t.Fatalf("step %d: peers\n%+v\nwant\n%+v", step, got, want.Peers)
		}
		if !slices.Equal(v.Refused(), want.Refused) {
			t.Fatalf("step %d: refused\n%v\nwant\n%v", step, v.Refused(), want.Refused)
		}
		if !sameSightings(v.sightings(), want.Seen) {
			t.Fatalf("step %d: sightings\n%v\nwant\n%v", step, v.sightings(), want.Seen)
		}
		// The ledger, appended to or written whole, reads back as the
		// Validator's sightings.
		if rng.IntN(3) > 0 {
			v.Flush()
			if got, err := ReadLedger(dir); err != nil || !sameSightings(got, v.sightings()) {
				t.Fatalf("step %d: ledger read back: %v, %v; want %v", step, got, err, v.sightings())
			}
		}
	}
	v.Flush()
	if got, err := ReadLedger(dir); err != nil || !sameSightings(got, v.sightings()) {
		t.Errorf("ledger read back: %v, %v; want %v", got, err, v.sightings())
	}
}

// TestValidatorManyChanges: a pass in which more records change than the
// Validator re-decides piecemeal, and one whose changed record relates to
// more values than that, decide as Resolve does, and so do the passes
// after them.
func TestValidatorManyChanges(t *testing.T) {
	now := t0
	v := New(Options{Self: self, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	moved := map[int]bool{}
	for step, n := range []int{0, 3, maxChanged + 10, 1, 0, 2*maxChanged + 1} {
		for i := range n {
			moved[(step*7+i)%300] = !moved[(step*7+i)%300]
		}
		recs := benchRecords(300, moved)
		block := fmt.Sprintf("10.100.%d.0/26", step)
		if step == 3 {
			block = "10.100.0.0/16" // related to every unmoved block: more than are re-decided piecemeal
		}
		recs = append(recs, Record{Name: "x", HostIPv4: "10.0.1.77", Blocks: []string{block}})
		now = now.Add(time.Second)
		want := Resolve(Input{Self: self, Records: recs, Seen: v.sightings(), Now: now, Retain: DefaultRetain})
		got := v.Validate(recs)
		if !slices.EqualFunc(got, want.Peers, nodeEqual) || !slices.Equal(v.Refused(), want.Refused) || !sameSightings(v.sightings(), want.Seen) {
			t.Fatalf("step %d (%d moved): %d peers, refused %v; want %d, refused %v", step, n, len(got), v.Refused(), len(want.Peers), want.Refused)
		}
	}
}

// FuzzResolve: whatever a newcomer's record holds, Resolve does not panic,
// the established peer b keeps everything, and nothing accepted is special
// space, the node's own space, ours, or overlapping another accepted claim.
func FuzzResolve(f *testing.F) {
	f.Add("x", "10.0.1.77", "", "10.244.77.0/24", "0.0.0.0/0", "02:77:00:00:00:04", "", "10.244.77.0", "")
	f.Add("x", "10.0.1.10", "fd00:1::10", "10.244.2.0/24", "fe80::/10", "02:aa:00:00:00:04", "01:00:00:00:00:00", "10.244.1.0", "fd00::1")
	f.Add("b", "10.0.1.11", "::1", "128.0.0.0/1", "10.0.1.0/24", "zz", "02:bb:00:00:00:06", "1.2.3.4", "::ffff:1.2.3.4")
	f.Fuzz(func(t *testing.T, name, h4, h6, b1, b2, m4, m6, t4, t6 string) {
		x := Record{Name: name, HostIPv4: h4, HostIPv6: h6, Blocks: []string{b1, b2}, VTEPMAC: m4, VTEPMACv6: m6, TunnelIPv4: t4, TunnelIPv6: t6}
		res := Resolve(Input{Self: self, Host: host, Records: []Record{b, x}, Seen: establishedSeen(), Now: t0.Add(time.Hour)})
		want := Resolve(Input{Self: self, Host: host, Records: []Record{b}, Now: t0}).Peers[0]
		if got, ok := find(res.Peers, "b"); !ok || !nodeEqual(got, want) {
			t.Fatalf("established b = %+v, want %+v (newcomer %+v)", got, want, x)
		}
		var accepted []netip.Prefix
		for _, n := range res.Peers {
			for _, a := range n.HostIPs() {
				if a == self.IPv4.HostIP || a == self.IPv6.HostIP || nodespace.SpecialRange(netip.PrefixFrom(a, a.BitLen())) != "" {
					t.Fatalf("peer %s has host IP %s", n.Name, a)
				}
				accepted = append(accepted, netip.PrefixFrom(a, a.BitLen()))
			}
			for _, m := range []net.HardwareAddr{n.IPv4.VTEPMAC, n.IPv6.VTEPMAC} {
				if m != nil && (bytes.Equal(m, self.IPv4.VTEPMAC) || bytes.Equal(m, self.IPv6.VTEPMAC)) {
					t.Fatalf("peer %s has our VTEP MAC", n.Name)
				}
			}
		}
		for _, n := range res.Peers {
			for _, p := range n.Blocks {
				if err := host.CheckBlock(p); err != nil {
					t.Fatalf("peer %s has block %s: %v", n.Name, p, err)
				}
				for _, o := range append(slices.Clone(self.Blocks), accepted...) {
					if o.Overlaps(p) {
						t.Fatalf("peer %s's block %s overlaps %s", n.Name, p, o)
					}
				}
				accepted = append(accepted, p)
			}
		}
	})
}

// FuzzValidatorCache: a Validator that sees a record change back and forth
// (and a second record with the same name) decides as Resolve from
// scratch with the same sightings.
func FuzzValidatorCache(f *testing.F) {
	f.Add("x", "10.0.1.77", "10.244.77.0/24", "10.244.2.0/24", "02:77:00:00:00:04", "x")
	f.Add("b", "10.0.1.11", "10.244.2.0/25", "bogus", "02:bb:00:00:00:04", "y")
	f.Fuzz(func(t *testing.T, name, h4, b1, b2, m4, name2 string) {
		now := t0
		v := New(Options{Self: self, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
		x1 := Record{Name: name, HostIPv4: h4, Blocks: []string{b1}, VTEPMAC: m4}
		x2 := Record{Name: name, HostIPv4: h4, Blocks: []string{b1, b2}, VTEPMAC: m4, Updated: t0}
		y := Record{Name: name2, Blocks: []string{b2}}
		for i, recs := range [][]Record{{b, x1}, {b, x2}, {x1, b, y}, {b, x1}, {y, x2}} {
			now = now.Add(time.Second)
			want := Resolve(Input{Self: self, Records: recs, Seen: v.sightings(), Now: now, Retain: DefaultRetain})
			if got := v.Validate(recs); !slices.EqualFunc(got, want.Peers, nodeEqual) || !slices.Equal(v.Refused(), want.Refused) {
				t.Fatalf("pass %d: %+v refused %v, want %+v refused %v", i, got, v.Refused(), want.Peers, want.Refused)
			}
		}
	})
}

// nodeEqual compares two NodeInfo values.
func nodeEqual(x, y NodeInfo) bool {
	ep := func(a, b Endpoint) bool {
		return a.HostIP == b.HostIP && a.TunnelAddr == b.TunnelAddr && bytes.Equal(a.VTEPMAC, b.VTEPMAC)
	}
	return x.Name == y.Name && ep(x.IPv4, y.IPv4) && ep(x.IPv6, y.IPv6) && slices.Equal(x.Blocks, y.Blocks) && x.WireGuard == y.WireGuard &&
		x.BGP == y.BGP
}

// BenchmarkResolve1000: 1,000 established dual-stack peers re-validated,
// as every node-record change does.
func BenchmarkResolve1000(b *testing.B) {
	var recs []Record
	for i := range 1000 {
		recs = append(recs, Record{Name: fmt.Sprintf("n%04d", i), HostIPv4: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1),
			HostIPv6: fmt.Sprintf("fd00:2::%x", i+1), Blocks: []string{fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256), fmt.Sprintf("fd10:%x::/120", i+1)},
			VTEPMAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), TunnelIPv4: fmt.Sprintf("10.%d.%d.0", 100+i/256, i%256)})
	}
	seen := Resolve(Input{Self: self, Host: host, Records: recs, Now: t0}).Seen
	b.ResetTimer()
	for b.Loop() {
		if res := Resolve(Input{Self: self, Host: host, Records: recs, Seen: seen, Now: t0}); len(res.Peers) != 1000 || len(res.Refused) != 0 {
			b.Fatalf("%d peers, refused %v", len(res.Peers), res.Refused[:min(3, len(res.Refused))])
		}
	}
}

// benchRecords is n single-stack peers, each with one block (moved to
// another pool when moved[i]).
func benchRecords(n int, moved map[int]bool) []Record {
	recs := make([]Record, 0, n)
	for i := range n {
		pool := 100
		if moved[i] {
			pool = 101
		}
		recs = append(recs, Record{Name: fmt.Sprintf("n%04d", i), HostIPv4: fmt.Sprintf("10.1.%d.%d", i/250, i%250+1),
			Blocks:  []string{fmt.Sprintf("10.%d.%d.%d/26", pool, i/4, 64*(i%4))},
			VTEPMAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), TunnelIPv4: fmt.Sprintf("10.%d.%d.%d", pool, i/4, 64*(i%4))})
	}
	return recs
}

// BenchmarkValidateChange1000: one of 1,000 peers moves its block (record
// i%1000 at op i, alternating between two pools) and the Validator
// re-validates every record and records the new claim in its ledger, as
// every peer change in the daemon does. The records are built up front:
// only the Validator's work is measured.
func BenchmarkValidateChange1000(b *testing.B) {
	v := New(Options{Self: self, StateDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	recs := benchRecords(1000, nil)
	all := map[int]bool{}
	for i := range 1000 {
		all[i] = true
	}
	moved := benchRecords(1000, all)
	orig := slices.Clone(recs)
	v.Validate(recs)
	i := 0
	for b.Loop() {
		k := i % 1000
		if (i/1000)%2 == 0 {
			recs[k] = moved[k]
		} else {
			recs[k] = orig[k]
		}
		i++
		if ps := v.Validate(recs); len(ps) != 1000 {
			b.Fatalf("%d peers", len(ps))
		}
		v.Flush()
	}
}

// TestResolveWireGuard: a peer's WireGuard key and port as the WireGuard
// manager gets them, or why they are refused: a malformed or all-zero key
// is refused alone, a key claimed by two peers stays with the established
// one, our own key refuses the record whole, an absent port is the
// default and a bad one leaves the peer without WireGuard.
func TestResolveWireGuard(t *testing.T) {
	bKey := wgKey(0xbb)
	bw := b
	bw.WireGuardPublicKey = bKey.String()
	xKey := wgKey(0x77)
	for _, tc := range []struct {
		name        string
		key, port   string
		field       string // refused field of x ("" none)
		value       string
		reason      string
		want        WireGuardPeer // x's WireGuard
		wholeRecord bool
	}{
		{name: "key, default port", key: xKey.String(), want: WireGuardPeer{xKey, 51820}},
		{name: "key and port", key: xKey.String(), port: "51900", want: WireGuardPeer{xKey, 51900}},
		{name: "highest port", key: xKey.String(), port: "65535", want: WireGuardPeer{xKey, 65535}},
		{name: "no WireGuard", want: WireGuardPeer{}},
		{name: "malformed key", key: "not-a-key", field: FieldWireGuardPublicKey, value: "not-a-key", reason: "not a WireGuard key"},
		{name: "short key", key: "AAAA", field: FieldWireGuardPublicKey, value: "AAAA", reason: "not a WireGuard key"},
		{name: "all-zero key", key: wgtypes.Key{}.String(), field: FieldWireGuardPublicKey, value: wgtypes.Key{}.String(), reason: "all-zero"},
		{name: "port 0", key: xKey.String(), port: "0", field: FieldWireGuardPort, value: "0", reason: "not a port"},
		{name: "port too high", key: xKey.String(), port: "65536", field: FieldWireGuardPort, value: "65536", reason: "not a port"},
		{name: "negative port", key: xKey.String(), port: "-1", field: FieldWireGuardPort, value: "-1", reason: "not a port"},
		{name: "port not a number", key: xKey.String(), port: "wg", field: FieldWireGuardPort, value: "wg", reason: "not a port"},
		{name: "bad port without a key", port: "70000", field: FieldWireGuardPort, value: "70000", reason: "not a port"},
		{name: "b's key", key: bKey.String(), field: FieldWireGuardPublicKey, value: bKey.String(), reason: "node b's established WireGuard public key"},
		{name: "our key", key: self.WireGuardKey.String(), field: FieldRecord, value: "x", reason: "this node's", wholeRecord: true},
		{name: "our key with a bad port", key: self.WireGuardKey.String(), port: "0", field: FieldRecord, value: "x", reason: "this node's", wholeRecord: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := Resolve(Input{Self: self, Host: host, Records: []Record{bw, c}, Now: t0}).Seen
			x := newcomer(func(r *Record) { r.WireGuardPublicKey, r.WireGuardPort = tc.key, tc.port })
			res := Resolve(Input{Self: self, Host: host, Records: []Record{bw, c, x}, Seen: seen, Now: t0.Add(time.Hour)})
			var got []Refusal
			for _, r := range res.Refused {
				if r.Node == "x" {
					got = append(got, r)
				} else {
					t.Errorf("established peer's value refused: %v", r)
				}
			}
			if tc.wholeRecord { // and perhaps its bad port too
				got = slices.DeleteFunc(got, func(r Refusal) bool { return r.Field == FieldWireGuardPort })
			}
			switch {
			case tc.field == "" && len(got) > 0:
				t.Errorf("refused %v, want nothing", got)
			case tc.field != "" && (len(got) != 1 || got[0].Field != tc.field || got[0].Value != tc.value || !strings.Contains(got[0].Reason, tc.reason)):
				t.Errorf("refused %v, want one refusal of %s %q because %q", got, tc.field, tc.value, tc.reason)
			}
			if n, _ := find(res.Peers, "b"); n.WireGuard != (WireGuardPeer{bKey, 51820}) {
				t.Errorf("established b's WireGuard = %+v, want its key at 51820", n.WireGuard)
			}
			n, ok := find(res.Peers, "x")
			if tc.wholeRecord {
				if ok {
					t.Errorf("record refused whole is still a peer: %+v", n)
				}
				return
			}
			if !ok || n.WireGuard != tc.want || n.WireGuard.Valid() != (tc.want != WireGuardPeer{}) {
				t.Errorf("x = %+v, %v; want WireGuard %+v", n, ok, tc.want)
			}
			if !slices.Equal(n.Blocks, pfx("10.244.77.0/24")) {
				t.Errorf("x's blocks = %v: a WireGuard refusal took more than its field", n.Blocks)
			}
			// Parse alone agrees on what a record carries.
			if p, _ := Parse(x); tc.field != FieldWireGuardPublicKey && p.WireGuard != tc.want {
				t.Errorf("Parse(x).WireGuard = %+v, want %+v", p.WireGuard, tc.want)
			}
		})
	}
}

// TestValidatorWireGuardKeyLedger: the peer that first claimed a WireGuard
// key keeps it after a restart (a new Validator on the same ledger), even
// against a newcomer whose record sorts and dates first; when our own key
// rotates to a peer's key, that peer's record is refused whole.
func TestValidatorWireGuardKeyLedger(t *testing.T) {
	dir := t.TempDir()
	now := t0
	clock := func() time.Time { now = now.Add(time.Second); return now }
	k := wgKey(0x42)
	bw := b
	bw.WireGuardPublicKey = k.String()
	intruder := Record{Name: "a0", HostIPv4: "10.0.1.78", Blocks: []string{"10.244.78.0/24"}, WireGuardPublicKey: k.String(),
		Updated: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	v := New(Options{Self: self, StateDir: dir, Now: clock, Logger: slog.New(slog.DiscardHandler)})
	v.Validate([]Record{bw})
	v.Flush()
	v.Validate([]Record{intruder, bw})
	v.Flush()
	v2 := New(Options{Self: self, StateDir: dir, Now: clock, Logger: slog.New(slog.DiscardHandler)})
	ps := v2.Validate([]Record{intruder, bw})
	if n, _ := find(ps, "b"); n.WireGuard.PublicKey != k {
		t.Errorf("after a restart b = %+v, want its key", n.WireGuard)
	}
	if n, _ := find(ps, "a0"); n.WireGuard != (WireGuardPeer{}) {
		t.Errorf("after a restart newcomer a0 has WireGuard %+v, want none", n.WireGuard)
	}
	if r := v2.Refused(); len(r) != 1 || r[0].Node != "a0" || r[0].Field != FieldWireGuardPublicKey || r[0].Value != k.String() {
		t.Errorf("after a restart refused %v, want a0's key", r)
	}
	v2.SetWireGuardKey(k)
	ps = v2.Validate([]Record{intruder, bw})
	if len(ps) != 0 {
		t.Errorf("with our key rotated to theirs, peers = %+v; want both refused whole", ps)
	}
	if r := v2.Refused(); len(r) != 2 || r[0].Field != FieldRecord || r[1].Field != FieldRecord {
		t.Errorf("refused %v, want both records whole", r)
	}
	v2.SetWireGuardKey(self.WireGuardKey)
	if ps := v2.Validate([]Record{intruder, bw}); len(ps) != 2 {
		t.Errorf("with our key back, peers = %+v; want both", ps)
	}
}

// TestRecordWireGuardState: the key and port convert between a
// datastore's node record and a Record, the default port as "".
func TestRecordWireGuardState(t *testing.T) {
	n := state.Node{Name: "b", WireGuardPublicKey: wgKey(3).String(), WireGuardPort: 51821}
	r := FromState(&n)
	if r.WireGuardPublicKey != n.WireGuardPublicKey || r.WireGuardPort != "51821" {
		t.Errorf("FromState = %+v", r)
	}
	if back := ToState(r); !state.SameNode(&back, &n) {
		t.Errorf("ToState(FromState(n)) = %+v, want %+v", back, n)
	}
	n.WireGuardPort = 0
	if r := FromState(&n); r.WireGuardPort != "" {
		t.Errorf("FromState of the default port = %q, want \"\"", r.WireGuardPort)
	}
	o := r
	o.WireGuardPort = "51822"
	if r.Equal(o) {
		t.Error("Equal ignores the WireGuard port")
	}
	o = r
	o.WireGuardPublicKey = ""
	if r.Equal(o) {
		t.Error("Equal ignores the WireGuard key")
	}
}
