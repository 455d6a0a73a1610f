package allowmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/internal/netiptest"
	"github.com/routelet/routelet/pkg/allowlist"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/firewall/firewalltest"
	"github.com/routelet/routelet/pkg/ipset/ipsettest"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

var _ agent.Manager = (*Manager)(nil)

var quiet = slog.New(slog.DiscardHandler)

// pfx parses CIDRs.
var pfx = netiptest.Prefixes

// fixture is a Manager over the real allowlist on fake kernels.
type fixture struct {
	k      *ipsettest.Fake
	v4, v6 *firewalltest.FakeTable
	m      *Manager
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	f := &fixture{k: ipsettest.NewFake(), v4: firewalltest.NewFakeTable(), v6: firewalltest.NewFakeTable()}
	var err error
	f.m, err = New(allowlist.New(f.k, f.v4, f.v6, quiet), opts, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// members returns the fake kernel's sets as name → sorted CIDR strings.
func (f *fixture) members() map[string][]string {
	out := map[string][]string{}
	for name, ps := range f.k.Snapshot() {
		out[name] = []string{}
		for _, p := range ps {
			out[name] = append(out[name], p.String())
		}
	}
	return out
}

func node(name, v4, v6 string, blocks ...string) *state.Node {
	return &state.Node{Version: 1, Name: name, HostIPv4: v4, HostIPv6: v6, Blocks: blocks}
}

// valid validates records as the daemon does before OnNodes.
func valid(nodes ...*state.Node) []peers.NodeInfo {
	var recs []peers.Record
	for _, n := range nodes {
		recs = append(recs, peers.FromState(n))
	}
	return peers.Resolve(peers.Input{Self: peers.Self{Name: "a"}, Records: recs}).Peers
}

// TestMembersFromNodes: peers' host IPs and external CIDRs become the peer
// set of the configured encapsulation; every node's blocks (and the local
// ones) the pools; a node record removed takes its members with it.
func TestMembersFromNodes(t *testing.T) {
	// This node's blocks (a: 10.244.1.0/24, fd00:1::/120) reach the
	// manager as LocalBlocks, as routeletd's --pod-cidr values do.
	own := pfx("10.244.1.0/24", "fd00:1::/120")
	b := node("b", "192.0.2.11", "2001:db8::11", "10.244.2.0/24", "fd00:2::/120")
	c := node("c", "192.0.2.12", "", "10.244.3.0/24")
	for _, tc := range []struct {
		name  string
		rules firewall.Config
		want  map[string][]string
	}{
		{"vxlan", firewall.Config{VXLAN: true, NATOutgoing: true}, map[string][]string{
			"routelet-vxlan-peers":    {"192.0.2.11/32", "192.0.2.12/32", "198.51.100.0/28"},
			"routelet-vxlan-peers-v6": {"2001:db8::11/128"},
			"routelet-pools":          {"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "10.244.9.0/24"},
			"routelet-pools-v6":       {"fd00:1::/120", "fd00:2::/120"},
			"routelet-nat-pools":      {"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "10.244.9.0/24"},
			"routelet-nat-pools-v6":   {"fd00:1::/120", "fd00:2::/120"},
		}},
		{"ipip", firewall.Config{IPIP: true, NATOutgoing: true}, map[string][]string{
			"routelet-ipip-peers":   {"192.0.2.11/32", "192.0.2.12/32", "198.51.100.0/28"},
			"routelet-pools":        {"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "10.244.9.0/24"},
			"routelet-pools-v6":     {"fd00:1::/120", "fd00:2::/120"},
			"routelet-nat-pools":    {"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "10.244.9.0/24"},
			"routelet-nat-pools-v6": {"fd00:1::/120", "fd00:2::/120"},
		}},
		// WireGuard: the peers' host IPs only; an external CIDR has no
		// key, so no WireGuard peer entry to reach. The pools, without
		// NAT outgoing too: the encryption guard drops what would leave
		// for any of them other than through the WireGuard device, the
		// peers' blocks included (those it routes into the device).
		{"wireguard", firewall.Config{WireGuard: true, VXLAN: true}, map[string][]string{
			"routelet-vxlan-peers":        {"192.0.2.11/32", "192.0.2.12/32", "198.51.100.0/28"},
			"routelet-vxlan-peers-v6":     {"2001:db8::11/128"},
			"routelet-wireguard-peers":    {"192.0.2.11/32", "192.0.2.12/32"},
			"routelet-wireguard-peers-v6": {"2001:db8::11/128"},
			"routelet-pools":              {"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "10.244.9.0/24"},
			"routelet-pools-v6":           {"fd00:1::/120", "fd00:2::/120"},
		}},
		{"none", firewall.Config{}, map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{Rules: tc.rules, ExternalNodeCIDRs: pfx("198.51.100.0/28"), LocalBlocks: append(own, pfx("10.244.9.0/24")...)})
			f.m.OnNodes(valid(b, c))
			if err := f.m.Apply(); err != nil {
				t.Fatal(err)
			}
			if got := f.members(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("sets:\n got %v\nwant %v", got, tc.want)
			}
		})
	}

	f := newFixture(t, Options{Rules: firewall.Config{VXLAN: true, NATOutgoing: true}, LocalBlocks: own[:1]})
	f.m.OnNodes(valid(b, c))
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	f.m.OnNodes(valid(c))
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	got := f.members()
	if want := []string{"192.0.2.12/32"}; !reflect.DeepEqual(got["routelet-vxlan-peers"], want) {
		t.Errorf("after b's record went: peers %v, want %v", got["routelet-vxlan-peers"], want)
	}
	if want := []string{"10.244.1.0/24", "10.244.3.0/24"}; !reflect.DeepEqual(got["routelet-pools"], want) {
		t.Errorf("after b's record went: pools %v, want %v", got["routelet-pools"], want)
	}
	if len(got["routelet-vxlan-peers-v6"]) != 0 {
		t.Errorf("after b's record went: v6 peers %v, want none", got["routelet-vxlan-peers-v6"])
	}
}

// TestBadRecordValuesSkipped: a bad host IP or block in a record is left
// out; the rest of the record still counts.
func TestBadRecordValuesSkipped(t *testing.T) {
	f := newFixture(t, Options{Rules: firewall.Config{VXLAN: true, NATOutgoing: true}})
	f.m.OnNodes(valid(node("b", "not-an-ip", "2001:db8::11", "10.244.2.0/24", "bogus", "0.0.0.0/0")))
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	got := f.members()
	want := map[string][]string{
		"routelet-vxlan-peers": {}, "routelet-vxlan-peers-v6": {"2001:db8::11/128"},
		"routelet-pools": {"10.244.2.0/24"}, "routelet-pools-v6": {},
		"routelet-nat-pools": {"10.244.2.0/24"}, "routelet-nat-pools-v6": {},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sets:\n got %v\nwant %v", got, want)
	}
}

// TestUnchangedNodesNoKernelCall: the loop hands over the same records on
// every resync; that makes no kernel call at all, and with the WireGuard
// peers a list of their own (external CIDRs configured) no allocation.
func TestUnchangedNodesNoKernelCall(t *testing.T) {
	for _, opts := range []Options{
		{Rules: firewall.Config{VXLAN: true, NATOutgoing: true}},
		{Rules: firewall.Config{VXLAN: true, WireGuard: true}, ExternalNodeCIDRs: pfx("198.51.100.0/28")},
		{Rules: firewall.Config{WireGuard: true}},
	} {
		t.Run(fmt.Sprintf("%+v", opts.Rules), func(t *testing.T) { testUnchangedNodesNoKernelCall(t, opts) })
	}
}

func testUnchangedNodesNoKernelCall(t *testing.T, opts Options) {
	f := newFixture(t, opts)
	f.m.OnNodes(valid(node("b", "192.0.2.11", "", "10.244.2.0/24")))
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	f.k.ResetCalls()
	f.v4.ResetCalls()
	f.v6.ResetCalls()
	f.m.OnNodes(valid(node("b", "192.0.2.11", "", "10.244.2.0/24")))
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	if n := f.k.Writes() + f.k.Calls("list") + f.k.Calls("listnames") + f.v4.Execs() + f.v6.Execs(); n != 0 {
		t.Errorf("unchanged records made %d kernel calls, want 0", n)
	}
	nodes := valid(node("b", "192.0.2.11", "", "10.244.2.0/24"))
	f.m.OnNodes(nodes) // the spare lists hold enough room from here on
	if n := testing.AllocsPerRun(20, func() { f.m.OnNodes(nodes) }); n != 0 {
		t.Errorf("OnNodes with unchanged records allocates %.0f times, want 0", n)
	}
	if opts.Rules.WireGuard {
		if got := f.members()["routelet-wireguard-peers"]; !reflect.DeepEqual(got, []string{"192.0.2.11/32"}) {
			t.Errorf("WireGuard peers %v, want b's host IP alone", got)
		}
	}
}

// TestCheck: no check before the first Apply (the members are not known
// yet: a check would empty the peer sets of a restarting daemon); after it
// a tampered chain or set is repaired and counted; errors are counted.
func TestCheck(t *testing.T) {
	f := newFixture(t, Options{Rules: firewall.Config{VXLAN: true, NATOutgoing: true}})
	reg := prometheus.NewRegistry()
	if err := f.m.Register(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := f.m.Check(); n != 0 || err != nil || f.k.Calls("list") != 0 || f.v4.Execs() != 0 {
		t.Fatalf("check before the first apply: %d repairs, err %v, %d set reads, %d iptables calls; want nothing done",
			n, err, f.k.Calls("list"), f.v4.Execs())
	}
	f.m.OnNodes(valid(node("b", "192.0.2.11", "", "10.244.2.0/24")))
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	if n, err := f.m.Check(); n != 0 || err != nil {
		t.Fatalf("clean check: %d repairs, err %v", n, err)
	}
	f.v4.SetRules("filter", firewall.InputChain) // flushed
	if err := f.k.Del("routelet-vxlan-peers", netip.MustParsePrefix("192.0.2.11/32")); err != nil {
		t.Fatal(err)
	}
	n, err := f.m.Check()
	if err != nil || n < 2 {
		t.Fatalf("check after tampering: %d repairs, err %v; want >= 2", n, err)
	}
	if r, _ := f.v4.Rules("filter", firewall.InputChain); len(r) != 2 {
		t.Errorf("ROUTELET-INPUT after repair: %q, want the accept and drop rules", r)
	}
	if got := f.members()["routelet-vxlan-peers"]; !reflect.DeepEqual(got, []string{"192.0.2.11/32"}) {
		t.Errorf("peer set after repair: %v", got)
	}
	if got := counter(t, reg, "routelet_allowlist_repairs_total"); got != float64(n) {
		t.Errorf("repairs metric %v, want %d", got, n)
	}

	f.k.Inject = func(op, name string) error {
		if op == "list" {
			return errors.New("injected list failure")
		}
		return nil
	}
	for range 2 {
		if _, err := f.m.Check(); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("check with failing list: err %v", err)
		}
	}
	if got := counter(t, reg, "routelet_allowlist_check_errors_total"); got != 2 {
		t.Errorf("check errors metric %v, want 2", got)
	}
	if got := counter(t, reg, "routelet_allowlist_iptables_execs_total"); got != float64(f.v4.Execs()+f.v6.Execs()) || got == 0 {
		t.Errorf("iptables exec counter %v, want the fakes' %d", got, f.v4.Execs()+f.v6.Execs())
	}
}

// TestBadRules: an invalid rule configuration is refused by New.
func TestBadRules(t *testing.T) {
	_, err := New(allowlist.New(ipsettest.NewFake(), firewalltest.NewFakeTable(), nil, quiet),
		Options{Rules: firewall.Config{VXLAN: true, VXLANPort: 70000}}, quiet)
	if err == nil || !strings.Contains(err.Error(), "70000") {
		t.Errorf("New with VXLAN port 70000: err %v", err)
	}
}

// counter returns the value of the counter name gathered from reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestCheckInTheLoop: a queued check runs inside the next Apply (after its
// programming: the first Apply's check already knows the members) and
// repairs there; checks queued between Applies never leave the peer set
// other than the last records say.
func TestCheckInTheLoop(t *testing.T) {
	f := newFixture(t, Options{Rules: firewall.Config{VXLAN: true, NATOutgoing: true}, CheckPeriod: time.Millisecond})
	if f.m.CheckPeriod() != time.Millisecond {
		t.Fatalf("check period %s, want 1ms", f.m.CheckPeriod())
	}
	f.m.QueueCheck()
	f.m.OnNodes(valid(node("b", "192.0.2.10", "", "10.244.2.0/24")))
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	if err := f.k.Del("routelet-vxlan-peers", netip.MustParsePrefix("192.0.2.10/32")); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Apply(); err != nil { // no check queued: the tampering stays
		t.Fatal(err)
	}
	if got := f.members()["routelet-vxlan-peers"]; len(got) != 0 {
		t.Fatalf("peer set %v after an Apply without a check; want the tampering left for the check", got)
	}
	f.m.QueueCheck()
	if err := f.m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := f.members()["routelet-vxlan-peers"]; !reflect.DeepEqual(got, []string{"192.0.2.10/32"}) {
		t.Fatalf("peer set %v after a queued check, want the repaired 192.0.2.10/32", got)
	}
	for i := range 50 {
		f.m.OnNodes(valid(node("b", fmt.Sprintf("192.0.2.%d", 10+i%3), "", "10.244.2.0/24")))
		if i%2 == 0 {
			f.m.QueueCheck()
		}
		if err := f.m.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.members()["routelet-vxlan-peers"]; !reflect.DeepEqual(got, []string{"192.0.2.11/32"}) { // 10+49%3
		t.Errorf("peer set %v, want the last record's 192.0.2.11/32", got)
	}
}

// TestMembers: the pure derivation of the allowlist members from peers.
func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		name             string
		nodes            []peers.NodeInfo
		local, external  []netip.Prefix
		wantHosts, wantP []netip.Prefix
	}{
		{name: "no peers", local: pfx("10.244.1.0/24"), wantP: pfx("10.244.1.0/24")},
		{name: "peers, sorted and deduplicated",
			nodes: []peers.NodeInfo{
				{Name: "c", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.12")}, IPv6: peers.Endpoint{HostIP: netip.MustParseAddr("2001:db8::12")},
					Blocks: pfx("10.244.3.0/24", "fd00:3::/64")},
				{Name: "b", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.11")}, Blocks: pfx("10.244.2.0/24")},
				{Name: "d", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.11")}, Blocks: pfx("10.244.2.0/24")},
			},
			local: pfx("10.244.1.0/24"), external: pfx("198.51.100.0/24", "192.0.2.12/32"),
			wantHosts: pfx("192.0.2.11/32", "192.0.2.12/32", "198.51.100.0/24", "2001:db8::12/128"),
			wantP:     pfx("10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "fd00:3::/64")},
		{name: "prefixes no set can hold are dropped", local: pfx("0.0.0.0/0", "10.244.1.0/24"), external: pfx("::ffff:192.0.2.1/128"),
			wantP: pfx("10.244.1.0/24")},
	} {
		hosts, pools := Members(tc.nodes, tc.local, tc.external)
		if !slices.Equal(hosts, tc.wantHosts) || !slices.Equal(pools, tc.wantP) {
			t.Errorf("%s: hosts %v, pools %v; want %v, %v", tc.name, hosts, pools, tc.wantHosts, tc.wantP)
		}
	}
}
