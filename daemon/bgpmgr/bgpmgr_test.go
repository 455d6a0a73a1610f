package bgpmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/bgp"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
)

const uplink = "eth0"

// fakeSpeaker is a Speaker in memory: SetPeers keeps the sessions, each
// idle until the test sets its state; Learned returns what the test set.
type fakeSpeaker struct {
	mu        sync.Mutex
	peers     []bgp.Peer
	state     map[netip.Addr]bgp.PeerStatus
	learned   []bgp.Route
	announced []netip.Prefix
	nh4, nh6  netip.Addr
	setPeers  int
	learnedN  int
	failPeers error
	closed    bool
}

func newFakeSpeaker() *fakeSpeaker { return &fakeSpeaker{state: map[netip.Addr]bgp.PeerStatus{}} }

func (s *fakeSpeaker) SetPeers(ps []bgp.Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPeers != nil {
		return s.failPeers
	}
	s.setPeers++
	s.peers = slices.Clone(ps)
	return nil
}

func (s *fakeSpeaker) SetAnnounced(ps []netip.Prefix, nh4, nh6 netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.announced, s.nh4, s.nh6 = slices.Clone(ps), nh4, nh6
	return nil
}

func (s *fakeSpeaker) Learned() []bgp.Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.learnedN++
	return slices.Clone(s.learned)
}

func (s *fakeSpeaker) Peers() []bgp.PeerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []bgp.PeerStatus
	for _, p := range s.peers {
		st, ok := s.state[p.Address]
		if !ok {
			st = bgp.PeerStatus{State: "idle"}
		}
		st.Peer = p
		out = append(out, st)
	}
	return out
}

func (s *fakeSpeaker) Close() error { s.mu.Lock(); s.closed = true; s.mu.Unlock(); return nil }

// learn sets the learned routes.
func (s *fakeSpeaker) learn(rs ...bgp.Route) {
	s.mu.Lock()
	s.learned = rs
	s.mu.Unlock()
}

// establish makes every session established, with End-of-RIB or not.
func (s *fakeSpeaker) establish(eor bool, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.peers {
		s.state[p.Address] = bgp.PeerStatus{State: "established", EndOfRIB: eor, Since: since, Received: 1, Advertised: 2}
	}
}

func (s *fakeSpeaker) sessions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, p := range s.peers {
		out = append(out, fmt.Sprintf("%s as %d %s%s", p.Address, p.ASN, p.Description, map[bool]string{true: " password", false: ""}[p.Password != ""]))
	}
	return out
}

type fixture struct {
	t     *testing.T
	m     *Manager
	sp    *fakeSpeaker
	nl    *routestest.FakeNetlink
	now   time.Time
	cfg   Config
	asked []netip.Addr // next hops Resolve was asked about
}

func a(s string) netip.Addr   { return netip.MustParseAddr(s) }
func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, p(s))
	}
	return out
}

// newFixture is node-a (192.0.2.1, 2001:db8::1 on eth0; blocks
// 10.244.1.0/24 and fd00:1::/120) programming what it learns, with
// graceful restart; edit changes its configuration first. The fake
// kernel has the uplink's connected subnets; Resolve routes
// 198.51.100.0/24 via 192.0.2.254 and 2001:db8:5::/64 via 2001:db8::fe
// on eth0, 203.0.113.0/24 through eth1, and nothing else.
func newFixture(t *testing.T, edit func(*Config), setupKernel ...func(*routestest.FakeNetlink)) *fixture {
	t.Helper()
	f := &fixture{t: t, sp: newFakeSpeaker(), nl: routestest.NewFakeNetlink(), now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	l := f.nl.AddLink(uplink, true)
	for _, s := range []string{"192.0.2.0/24", "2001:db8::/64"} {
		_, dst, _ := net.ParseCIDR(s)
		if err := f.nl.AddRoute(netlink.Route{LinkIndex: l.Index, Dst: dst, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL, Table: unix.RT_TABLE_MAIN}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range setupKernel {
		s(f.nl)
	}
	f.cfg = Config{
		NodeName: "node-a", HostIPv4: a("192.0.2.1"), HostIPv6: a("2001:db8::1"), Iface: uplink,
		Subnets: prefixes("192.0.2.0/24", "2001:db8::/64"), LocalAddrs: []netip.Addr{a("192.0.2.1"), a("10.0.0.7")},
		ASN: 64512, RouterID: a("192.0.2.1"), NodeMesh: true, LocalBlocks: prefixes("10.244.1.0/24", "fd00:1::/120"),
		Program: true, GracefulRestart: true, RestartTime: time.Minute, RouteProtocol: 186, MaxPrefixes: 100,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return f.now },
		Resolve: func(nh netip.Addr) (netip.Addr, string, error) {
			f.asked = append(f.asked, nh)
			switch {
			case p("198.51.100.0/24").Contains(nh):
				return a("192.0.2.254"), uplink, nil
			case p("2001:db8:5::/64").Contains(nh):
				return a("2001:db8::fe"), uplink, nil
			case p("203.0.113.0/24").Contains(nh):
				return a("203.0.113.254"), "eth1", nil
			}
			return netip.Addr{}, "", errors.New("network is unreachable")
		},
		Existing: func(v, protocol int, iface string) ([]routes.Target, error) {
			return f.existing(v, protocol, iface), nil
		},
	}
	if edit != nil {
		edit(&f.cfg)
	}
	m, err := New(f.cfg, f.sp, func(v int) (RouteTable, error) {
		return routes.NewWithDeps(routes.Config{IPVersion: v, Protocol: 186, InterfaceNames: []string{uplink}, Logger: slog.New(slog.DiscardHandler)},
			f.nl, routestest.NewFakeConntrack(), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// existing reads the fake kernel's routes of protocol on iface.
func (f *fixture) existing(v, protocol int, iface string) []routes.Target {
	l, _ := f.nl.LinkByName(iface)
	fam := unix.AF_INET
	if v == 6 {
		fam = unix.AF_INET6
	}
	var out []routes.Target
	for _, r := range f.nl.Routes(fam, unix.RT_TABLE_MAIN) {
		if int(r.Protocol) != protocol || r.LinkIndex != l.Index {
			continue
		}
		dst, _ := netip.ParsePrefix(r.Dst.String())
		gw, _ := netip.AddrFromSlice(r.Gw)
		out = append(out, routes.Target{CIDR: dst, Type: routes.TypeGateway, Gateway: gw.Unmap()})
	}
	return out
}

func (f *fixture) apply() {
	f.t.Helper()
	if err := f.m.Apply(); err != nil {
		f.t.Fatalf("apply: %v", err)
	}
}

// kernel lists the fake kernel's routes of family v carrying proto 186,
// "cidr via gw", sorted.
func (f *fixture) kernel(v int) []string {
	fam := unix.AF_INET
	if v == 6 {
		fam = unix.AF_INET6
	}
	var out []string
	for _, r := range f.nl.Routes(fam, unix.RT_TABLE_MAIN) {
		if r.Protocol == 186 {
			out = append(out, fmt.Sprintf("%s via %s", r.Dst, r.Gw))
		}
	}
	slices.Sort(out)
	return out
}

// addOld puts a learned route of an earlier run into the fake kernel.
func addOld(dst, gw string) func(*routestest.FakeNetlink) {
	return func(nl *routestest.FakeNetlink) {
		l, _ := nl.LinkByName(uplink)
		_, d, _ := net.ParseCIDR(dst)
		r := netlink.Route{LinkIndex: l.Index, Dst: d, Gw: net.ParseIP(gw), Protocol: 186, Table: unix.RT_TABLE_MAIN}
		if d.IP.To4() == nil {
			r.Priority = 1024
		}
		if err := nl.AddRoute(r); err != nil {
			panic(err)
		}
	}
}

// nodes: node-b on the uplink's subnet (both families), node-c behind a
// router (198.51.100.3), node-d speaking no BGP, node-e IPv6 only.
func nodes() []peers.NodeInfo {
	return []peers.NodeInfo{
		{Name: "node-b", IPv4: peers.Endpoint{HostIP: a("192.0.2.2")}, IPv6: peers.Endpoint{HostIP: a("2001:db8::2")},
			Blocks: prefixes("10.244.2.0/24", "fd00:2::/120"), BGP: peers.BGPNode{ASN: 64512}},
		{Name: "node-c", IPv4: peers.Endpoint{HostIP: a("198.51.100.3")}, Blocks: prefixes("10.244.3.0/24"), BGP: peers.BGPNode{ASN: 64513}},
		{Name: "node-d", IPv4: peers.Endpoint{HostIP: a("192.0.2.4")}, Blocks: prefixes("10.244.4.0/24")},
		{Name: "node-e", IPv6: peers.Endpoint{HostIP: a("2001:db8:5::5")}, Blocks: prefixes("fd00:5::/120"), BGP: peers.BGPNode{ASN: 64512}},
	}
}

func route(prefix, nh, peer string) bgp.Route {
	return bgp.Route{Prefix: p(prefix), NextHop: a(nh), Peer: a(peer)}
}

// TestMesh: a mesh session per family to every node with an AS, to its
// host IP of each family this node has too; none to a node without an
// AS; the announced prefixes are the local blocks with the host IPs as
// next hops; the per-peer limit is the configured one.
func TestMesh(t *testing.T) {
	f := newFixture(t, nil)
	f.m.OnNodes(nodes())
	f.apply()
	want := []string{"192.0.2.2 as 64512 mesh node-b", "198.51.100.3 as 64513 mesh node-c", "2001:db8::2 as 64512 mesh node-b", "2001:db8:5::5 as 64512 mesh node-e"}
	if got := f.sp.sessions(); !slices.Equal(got, want) {
		t.Errorf("sessions\n got %q\nwant %q", got, want)
	}
	if f.sp.peers[0].MaxPrefixes != 100 {
		t.Errorf("max prefixes %d, want the configured 100", f.sp.peers[0].MaxPrefixes)
	}
	if !slices.Equal(f.sp.announced, f.cfg.LocalBlocks) || f.sp.nh4 != f.cfg.HostIPv4 || f.sp.nh6 != f.cfg.HostIPv6 {
		t.Errorf("announced %v next hops %s %s, want the local blocks via the host IPs", f.sp.announced, f.sp.nh4, f.sp.nh6)
	}
	// The same nodes again set nothing again.
	n := f.sp.setPeers
	f.m.OnNodes(nodes())
	f.apply()
	if f.sp.setPeers != n {
		t.Errorf("the same sessions were set again")
	}

	// Without an IPv6 host IP there is no IPv6 session; mesh off: none.
	f = newFixture(t, func(c *Config) { c.HostIPv6 = netip.Addr{} })
	f.m.OnNodes(nodes())
	f.apply()
	if got, want := f.sp.sessions(), []string{"192.0.2.2 as 64512 mesh node-b", "198.51.100.3 as 64513 mesh node-c"}; !slices.Equal(got, want) {
		t.Errorf("IPv4 only: sessions\n got %q\nwant %q", got, want)
	}
	f = newFixture(t, func(c *Config) { c.NodeMesh = false })
	f.m.OnNodes(nodes())
	f.apply()
	if got := f.sp.sessions(); len(got) != 0 {
		t.Errorf("mesh off: sessions %q, want none", got)
	}
	if f.sp.peers == nil {
		t.Error("mesh off: SetPeers was never called (the speaker keeps an earlier list)")
	}
}

// TestPrecedence: for the same address a global peer wins over this
// node's own, and both over the mesh; the own peers are read again at
// every OnNodes, and a read error keeps the last ones and shows in the
// status.
func TestPrecedence(t *testing.T) {
	var own []peers.BGPPeer
	var ownErr error
	f := newFixture(t, func(c *Config) {
		c.Peers = []bgp.Peer{{Address: a("192.0.2.2"), ASN: 65000, Password: "secret"}, {Address: a("192.0.2.9"), ASN: 65001, Description: "tor"}}
		c.OwnPeers = func() ([]peers.BGPPeer, error) { return own, ownErr }
	})
	own = []peers.BGPPeer{{Address: a("198.51.100.3"), ASN: 65002, RouteReflector: true}, {Address: a("192.0.2.9"), ASN: 65003}}
	f.m.OnNodes(nodes())
	f.apply()
	want := []string{"192.0.2.2 as 65000 global password", "192.0.2.9 as 65001 tor", "198.51.100.3 as 65002 node",
		"2001:db8::2 as 64512 mesh node-b", "2001:db8:5::5 as 64512 mesh node-e"}
	if got := f.sp.sessions(); !slices.Equal(got, want) {
		t.Errorf("sessions\n got %q\nwant %q", got, want)
	}
	if !f.sp.peers[2].RouteReflector {
		t.Error("the own peer lost its route reflector mark")
	}
	// 192.0.2.2 is global, not node-b's mesh session: its routes are not
	// held to node-b's blocks.
	f.sp.learn(route("10.244.3.0/24", "192.0.2.2", "192.0.2.2"))
	f.m.QueueCheck()
	f.apply()
	if got := f.kernel(4); !slices.Equal(got, []string{"10.244.3.0/24 via 192.0.2.2"}) {
		t.Errorf("routes %q, want the global peer's route to another node's block", got)
	}

	// A read error keeps the last own peers and is shown.
	ownErr = errors.New("etcd: deadline exceeded")
	own = nil
	f.m.OnNodes(nodes())
	f.apply()
	if got := f.sp.sessions(); !slices.Equal(got, want) {
		t.Errorf("after a read error, sessions\n got %q\nwant the last ones %q", got, want)
	}
	if st := f.m.Status(); !strings.Contains(st.Error, "etcd: deadline exceeded") {
		t.Errorf("status error %q, want the read error", st.Error)
	}
	// Readable again, without the peers: they go, the mesh takes over.
	ownErr = nil
	f.m.OnNodes(nodes())
	f.apply()
	if got := f.sp.sessions(); !slices.Contains(got, "198.51.100.3 as 64513 mesh node-c") || slices.Contains(got, "198.51.100.3 as 65002 node") {
		t.Errorf("own peers gone: sessions %q, want node-c's mesh session back", got)
	}
	if st := f.m.Status(); st.Error != "" {
		t.Errorf("status error %q after the peers are readable again", st.Error)
	}
}

// TestProgram: accepted learned routes become "via <next hop> dev
// <uplink> proto 186"; a next hop off the uplink's subnets goes via the
// gateway of the kernel's route to it, resolved once; a withdrawn route
// goes; a hint (Changes) makes the next Apply read the speaker.
func TestProgram(t *testing.T) {
	ch := &Changes{}
	wakes := 0
	ch.SetWake(func() { wakes++ })
	f := newFixture(t, func(c *Config) { c.Changes = ch })
	f.m.OnNodes(nodes())
	f.apply()
	f.sp.learn(
		route("10.244.2.0/24", "192.0.2.2", "192.0.2.2"),
		route("10.244.3.0/24", "198.51.100.3", "198.51.100.3"),
		route("fd00:2::/120", "2001:db8::2", "2001:db8::2"),
		route("fd00:5::/120", "2001:db8:5::5", "2001:db8:5::5"),
	)
	ch.Notify()
	if wakes != 1 {
		t.Errorf("Notify woke the loop %d times, want 1", wakes)
	}
	f.apply()
	if got, want := f.kernel(4), []string{"10.244.2.0/24 via 192.0.2.2", "10.244.3.0/24 via 192.0.2.254"}; !slices.Equal(got, want) {
		t.Errorf("IPv4 routes\n got %q\nwant %q", got, want)
	}
	if got, want := f.kernel(6), []string{"fd00:2::/120 via 2001:db8::2", "fd00:5::/120 via 2001:db8::fe"}; !slices.Equal(got, want) {
		t.Errorf("IPv6 routes\n got %q\nwant %q", got, want)
	}
	if want := []netip.Addr{a("198.51.100.3"), a("2001:db8:5::5")}; !slices.Equal(f.asked, want) {
		t.Errorf("resolved %v, want only the next hops off the uplink's subnets %v", f.asked, want)
	}
	// Without a hint nothing is read again (until the route check).
	n := f.sp.learnedN
	f.apply()
	if f.sp.learnedN != n {
		t.Error("an Apply without a hint or check read the learned routes")
	}
	f.asked = nil
	f.sp.learn(route("10.244.3.0/24", "198.51.100.3", "198.51.100.3"))
	ch.Notify()
	f.apply()
	if got, want := f.kernel(4), []string{"10.244.3.0/24 via 192.0.2.254"}; !slices.Equal(got, want) {
		t.Errorf("after withdrawals, IPv4 routes %q, want %q", got, want)
	}
	if len(f.kernel(6)) != 0 {
		t.Errorf("after withdrawals, IPv6 routes %q, want none", f.kernel(6))
	}
	if len(f.asked) != 0 {
		t.Errorf("resolved %v again within the route check period", f.asked)
	}
	// After the route check period the speaker is read and next hops are
	// resolved again, and the uplink's routes read back.
	n = f.sp.learnedN
	f.now = f.now.Add(DefaultRouteCheckPeriod)
	f.apply()
	if !slices.Equal(f.asked, []netip.Addr{a("198.51.100.3")}) || f.sp.learnedN != n+1 {
		t.Errorf("after the route check period: resolved %v, speaker read %d times, want 198.51.100.3 and once", f.asked, f.sp.learnedN-n)
	}
}

// TestRefusals: each check refuses its routes, counted by reason in the
// status and the metric; the accepted ones are programmed; a refusal is
// counted once while it lasts. The pools are the known blocks, or the
// configured ones.
func TestRefusals(t *testing.T) {
	type refusalCase struct {
		r      bgp.Route
		reason string
	}
	for _, c := range []struct {
		name  string
		pools []netip.Prefix
		cases []refusalCase
		ok    []bgp.Route
	}{{
		name: "the known blocks",
		cases: []refusalCase{
			{route("0.0.0.0/0", "192.0.2.2", "192.0.2.2"), "default"},
			{route("::/0", "2001:db8::2", "2001:db8::2"), "default"},
			{route("172.16.0.0/16", "192.0.2.2", "192.0.2.2"), "outside-pools"},
			{route("10.244.0.0/16", "192.0.2.2", "192.0.2.2"), "outside-pools"}, // covers the blocks, no block holds it
			{route("10.244.1.0/25", "192.0.2.2", "192.0.2.2"), "own-block"},
			{route("fd00:1::/120", "2001:db8::2", "2001:db8::2"), "own-block"},
			{route("10.244.2.6/32", "10.244.3.1", "192.0.2.2"), "next-hop"}, // inside the pools
			{route("10.244.2.7/32", "192.0.2.1", "192.0.2.2"), "next-hop"},  // this node's
			{route("10.244.2.8/32", "127.0.0.1", "192.0.2.2"), "next-hop"},
			{route("10.244.2.9/32", "2001:db8::2", "192.0.2.2"), "next-hop"}, // the other family
			{route("10.244.2.10/32", "10.0.0.7", "192.0.2.2"), "next-hop"},   // a local address
			{route("10.244.3.0/24", "192.0.2.2", "192.0.2.2"), "not-owner"},  // node-c's block from node-b's session
			{route("10.244.4.0/24", "198.51.100.3", "198.51.100.3"), "not-owner"},
			{route("fd00:2::/120", "2001:db8:99::1", "2001:db8::2"), "next-hop-unreachable"},
			{route("10.244.2.128/25", "203.0.113.4", "192.0.2.2"), "next-hop-unreachable"}, // through another interface
		},
		ok: []bgp.Route{
			route("10.244.2.0/26", "192.0.2.2", "192.0.2.2"),
			route("10.244.4.0/24", "198.51.100.9", "192.0.2.9"), // not a mesh session: any block
		},
	}, {
		name:  "configured pools",
		pools: prefixes("10.244.0.0/16", "192.0.2.0/25", "fd00::/16"),
		cases: []refusalCase{
			{route("10.245.0.0/24", "192.0.2.2", "192.0.2.9"), "outside-pools"},
			{route("10.244.0.0/16", "192.0.2.2", "192.0.2.9"), "own-block"},
			{route("192.0.2.0/28", "192.0.2.2", "192.0.2.9"), "underlay"}, // holds the host IPs
			{route("10.244.99.0/24", "10.244.50.1", "192.0.2.9"), "next-hop"},
		},
		ok: []bgp.Route{route("10.244.98.0/24", "198.51.100.20", "192.0.2.9")},
	}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, func(cfg *Config) { cfg.Pools = c.pools })
			f.m.OnNodes(nodes())
			f.apply()
			var rs []bgp.Route
			wantTotal := map[string]uint64{}
			for _, rc := range c.cases {
				rs = append(rs, rc.r)
				wantTotal[rc.reason]++
			}
			f.sp.learn(append(slices.Clone(rs), c.ok...)...)
			f.m.QueueCheck()
			f.apply()

			st := f.m.Status()
			byPrefix := map[string]statusapi.BGPRefusal{}
			for _, r := range st.Refused {
				byPrefix[r.Prefix] = r
			}
			for _, rc := range c.cases {
				pfx := rc.r.Prefix.String()
				if r := byPrefix[pfx]; r.Reason != rc.reason || r.Peer != rc.r.Peer.String() || r.NextHop != rc.r.NextHop.String() {
					t.Errorf("%s via %s from %s: refusal %+v, want %s", pfx, rc.r.NextHop, rc.r.Peer, r, rc.reason)
				}
			}
			if st.RefusedNow != len(c.cases) || !mapsEqual(st.RefusedTotal, wantTotal) {
				t.Errorf("refused now %d total %v, want %d %v", st.RefusedNow, st.RefusedTotal, len(c.cases), wantTotal)
			}
			if st.Accepted != len(c.ok) || st.Learned != len(rs)+len(c.ok) {
				t.Errorf("learned %d accepted %d, want %d %d", st.Learned, st.Accepted, len(rs)+len(c.ok), len(c.ok))
			}
			if got := len(f.kernel(4)) + len(f.kernel(6)); got != len(c.ok) {
				t.Errorf("programmed %q %q, want %d", f.kernel(4), f.kernel(6), len(c.ok))
			}
			// Read again: counted once.
			f.now = f.now.Add(DefaultRouteCheckPeriod)
			f.apply()
			if st := f.m.Status(); !mapsEqual(st.RefusedTotal, wantTotal) {
				t.Errorf("refusals counted again: %v", st.RefusedTotal)
			}
			reg := prometheus.NewPedanticRegistry()
			if err := f.m.Register(reg); err != nil {
				t.Fatal(err)
			}
			got := metricValues(t, reg, "routelet_bgp_refused_total", "reason")
			for _, r := range Reasons {
				if got[r] != float64(wantTotal[r]) {
					t.Errorf("routelet_bgp_refused_total{reason=%q} = %v, want %d", r, got[r], wantTotal[r])
				}
			}
		})
	}
}

func mapsEqual(x, y map[string]uint64) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if y[k] != v {
			return false
		}
	}
	return true
}

// metricValues gathers one metric family's values by the label.
func metricValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			}
		}
	}
	return out
}

// TestAdoption: the learned routes an earlier run left are kept until
// every session is established and sent End-of-RIB: a learned route for
// the prefix replaces its old one, the others stay; then only learned
// routes are programmed.
func TestAdoption(t *testing.T) {
	f := newFixture(t, nil, addOld("10.244.2.0/24", "192.0.2.2"), addOld("10.244.3.0/24", "192.0.2.254"), addOld("fd00:2::/120", "2001:db8::2"))
	if st := f.m.Status(); st.Converged || st.Adopted != 3 {
		t.Errorf("at start: converged %v adopted %d, want false 3", st.Converged, st.Adopted)
	}
	f.m.OnNodes(nodes())
	f.apply() // re-reads the uplink: what was adopted stays
	want := []string{"10.244.2.0/24 via 192.0.2.2", "10.244.3.0/24 via 192.0.2.254"}
	if got := f.kernel(4); !slices.Equal(got, want) {
		t.Errorf("after the first Apply, IPv4 routes %q, want the adopted %q", got, want)
	}
	// node-b comes back with a new next hop; node-c not yet.
	f.sp.learn(route("10.244.2.0/24", "192.0.2.22", "192.0.2.2"))
	f.sp.establish(false, f.now)
	f.m.QueueCheck()
	f.apply()
	want = []string{"10.244.2.0/24 via 192.0.2.22", "10.244.3.0/24 via 192.0.2.254"}
	if got := f.kernel(4); !slices.Equal(got, want) {
		t.Errorf("established without End-of-RIB, IPv4 routes %q, want %q", got, want)
	}
	if len(f.kernel(6)) != 1 {
		t.Errorf("IPv6 routes %q, want the adopted one kept", f.kernel(6))
	}
	// Every session sent End-of-RIB: converged, the unlearned adopted
	// routes go.
	f.sp.establish(true, f.now)
	f.m.QueueCheck()
	f.apply()
	if got, want := f.kernel(4), []string{"10.244.2.0/24 via 192.0.2.22"}; !slices.Equal(got, want) {
		t.Errorf("converged: IPv4 routes %q, want %q", got, want)
	}
	if len(f.kernel(6)) != 0 {
		t.Errorf("converged: IPv6 routes %q, want none", f.kernel(6))
	}
	if st := f.m.Status(); !st.Converged || st.Adopted != 0 {
		t.Errorf("converged %v adopted %d", st.Converged, st.Adopted)
	}
}

// TestAdoptionRestartTime: sessions that never converge keep the old
// routes only for the restart time since the start.
func TestAdoptionRestartTime(t *testing.T) {
	f := newFixture(t, nil, addOld("10.244.3.0/24", "192.0.2.254"))
	f.m.OnNodes(nodes())
	f.apply()
	f.now = f.now.Add(time.Minute - time.Second)
	f.m.QueueCheck()
	f.apply()
	if len(f.kernel(4)) != 1 {
		t.Fatalf("before the restart time: routes %q, want the adopted one", f.kernel(4))
	}
	f.now = f.now.Add(time.Second)
	f.m.QueueCheck()
	f.apply()
	if len(f.kernel(4)) != 0 {
		t.Errorf("after the restart time: routes %q, want none", f.kernel(4))
	}
}

// TestNoAdoption: without graceful restart, an earlier run's routes are
// removed by the first Apply; so they are announcing only.
func TestNoAdoption(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"no graceful restart": func(c *Config) { c.GracefulRestart = false },
		"announce only":       func(c *Config) { c.Program = false },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, edit, addOld("10.244.3.0/24", "192.0.2.254"))
			f.m.OnNodes(nodes())
			f.apply()
			if len(f.kernel(4)) != 0 {
				t.Errorf("routes %q, want the earlier run's removed", f.kernel(4))
			}
		})
	}
}

// TestAnnounceOnly: with Program off, the sessions and announcements are
// set and nothing learned is programmed or refused.
func TestAnnounceOnly(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Program = false })
	f.m.OnNodes(nodes())
	f.sp.learn(route("10.244.2.0/24", "192.0.2.2", "192.0.2.2"), route("0.0.0.0/0", "192.0.2.2", "192.0.2.2"))
	f.apply()
	if len(f.sp.sessions()) != 4 || len(f.sp.announced) != 2 {
		t.Errorf("sessions %q announced %v", f.sp.sessions(), f.sp.announced)
	}
	if len(f.kernel(4)) != 0 {
		t.Errorf("announce only: routes %q", f.kernel(4))
	}
	st := f.m.Status()
	if st.Programmed || st.RefusedNow != 0 || st.Learned != 2 || st.Accepted != 0 {
		t.Errorf("announce only: status %+v", st)
	}
	d := &inspect.Desired{}
	f.m.Snapshot(d)
	for _, fam := range d.BGP.Families {
		if n := len(fam.Routes[uplink]); n != 0 {
			t.Errorf("announce only: IPv%d wants %d routes", fam.Version, n)
		}
	}
}

// TestPollWhileNotInSync: the check reads the speaker while it has not
// converged or a session is down, and not when all is in sync.
func TestPollWhileNotInSync(t *testing.T) {
	f := newFixture(t, nil)
	f.m.OnNodes(nodes())
	f.apply()
	n := f.sp.learnedN
	f.m.QueueCheck()
	f.apply()
	if f.sp.learnedN != n+1 {
		t.Error("not converged: the check did not read the speaker")
	}
	f.sp.establish(true, f.now)
	f.m.QueueCheck()
	f.apply() // converges
	n = f.sp.learnedN
	f.m.QueueCheck()
	f.apply()
	if f.sp.learnedN != n {
		t.Error("in sync: the check read the speaker")
	}
	f.sp.mu.Lock()
	f.sp.state[a("192.0.2.2")] = bgp.PeerStatus{State: "active"}
	f.sp.mu.Unlock()
	f.m.cfg.Changes.Notify()
	f.apply()
	n = f.sp.learnedN
	f.m.QueueCheck()
	f.apply()
	if f.sp.learnedN != n+1 {
		t.Error("a session down: the check did not read the speaker")
	}
}

// TestSpeakerError: a failed SetPeers fails the pass, shows in the
// status, and is retried by the next Apply.
func TestSpeakerError(t *testing.T) {
	f := newFixture(t, nil)
	f.m.OnNodes(nodes())
	f.sp.failPeers = errors.New("bgp server down")
	if err := f.m.Apply(); err == nil || !strings.Contains(err.Error(), "bgp server down") {
		t.Errorf("apply: %v, want the speaker's error", err)
	}
	if st := f.m.Status(); !strings.Contains(st.Error, "bgp server down") || len(st.Peers) != 4 || st.Peers[0].State != "not configured" {
		t.Errorf("status %+v, want the error and the wanted sessions not configured", st)
	}
	f.sp.failPeers = nil
	f.apply()
	if len(f.sp.sessions()) != 4 || f.m.Status().Error != "" {
		t.Errorf("retry: sessions %q error %q", f.sp.sessions(), f.m.Status().Error)
	}
}

// TestSnapshotAndCompare: the snapshot's BGP part becomes the state's
// bgp block and tables bgp-ipv4/bgp-ipv6, whose routes count as
// programmed with the BGP protocol; a peer's row shows its block's
// learned route.
func TestSnapshotAndCompare(t *testing.T) {
	f := newFixture(t, nil)
	f.m.OnNodes(nodes())
	f.apply()
	f.sp.learn(route("10.244.2.0/24", "192.0.2.2", "192.0.2.2"), route("172.16.0.0/16", "192.0.2.2", "192.0.2.2"))
	f.sp.establish(true, f.now.Add(-time.Minute))
	f.m.QueueCheck()
	f.apply()
	d := &inspect.Desired{Loop: true, Node: statusapi.Node{RouteProtocol: 80}, Peers: []inspect.Peer{{NodeInfo: nodes()[0]}}}
	f.m.Snapshot(d)
	k := &inspect.Kernel{Links: map[string]inspect.Link{}}
	for i, v := range []int{4, 6} {
		fam := unix.AF_INET
		if v == 6 {
			fam = unix.AF_INET6
		}
		for _, r := range f.nl.Routes(fam, unix.RT_TABLE_MAIN) {
			dst, _ := netip.ParsePrefix(r.Dst.String())
			gw, _ := netip.AddrFromSlice(r.Gw)
			k.Routes[i] = append(k.Routes[i], inspect.Route{Iface: uplink, Dst: dst, Gateway: gw.Unmap(), Protocol: int(r.Protocol), Type: unix.RTN_UNICAST})
		}
	}
	st := inspect.Compare(d, k, f.now)
	if st.BGP == nil || st.BGP.ASN != 64512 || !st.BGP.Programmed || !st.BGP.Converged || st.BGP.RouterID != "192.0.2.1" {
		t.Fatalf("bgp block %+v", st.BGP)
	}
	if len(st.BGP.Peers) != 4 || st.BGP.Peers[0].State != "established" || st.BGP.Peers[0].Description != "mesh node-b" || !st.BGP.Peers[0].EndOfRIB {
		t.Errorf("bgp peers %+v", st.BGP.Peers)
	}
	if len(st.BGP.Refused) != 1 || st.BGP.Refused[0].Reason != "outside-pools" || st.BGP.Refused[0].Peer != "192.0.2.2" {
		t.Errorf("refused %+v", st.BGP.Refused)
	}
	var tbl *statusapi.RouteTable
	for i := range st.Tables {
		if st.Tables[i].Name == statusapi.TableBGPV4 {
			tbl = &st.Tables[i]
		}
	}
	if tbl == nil || tbl.Desired != 1 || tbl.Programmed != 1 || len(tbl.Routes) != 1 || tbl.Routes[0].Via != "192.0.2.2" || tbl.Routes[0].Peer != "node-b" {
		t.Errorf("bgp-ipv4 table %+v", tbl)
	}
	if len(st.Peers) != 1 || st.Peers[0].Path != statusapi.PathBGP || !st.Peers[0].Routes.Wanted || !st.Peers[0].Routes.Present || st.Peers[0].Device != uplink {
		t.Errorf("peer row %+v", st.Peers)
	}
}

// TestRepairEvent: the deletion of a wanted route on the uplink is
// drift: reported, and the next Apply puts it back; the deletion of an
// unwanted one is not.
func TestRepairEvent(t *testing.T) {
	var drift []string
	f := newFixture(t, func(c *Config) { c.OnDrift = func(o, d string) { drift = append(drift, o+" "+d) } })
	f.m.OnNodes(nodes())
	f.sp.learn(route("10.244.2.0/24", "192.0.2.2", "192.0.2.2"))
	f.apply()
	l, _ := f.nl.LinkByName(uplink)
	_, dst, _ := net.ParseCIDR("10.244.2.0/24")
	if err := f.nl.RouteDel(&netlink.Route{LinkIndex: l.Index, Dst: dst, Protocol: 186, Table: unix.RT_TABLE_MAIN}); err != nil {
		t.Fatal(err)
	}
	woke := 0
	h := f.m.Events(func() { woke++ })
	h.OnRoute(netwatch.RouteEvent{Iface: uplink, Dst: p("10.244.9.0/24"), Protocol: 186, Deleted: true})
	if woke != 0 {
		t.Error("the deletion of an unwanted route woke the loop")
	}
	h.OnRoute(netwatch.RouteEvent{Iface: uplink, Dst: p("10.244.2.0/24"), Protocol: 186, Deleted: true})
	if woke != 1 || len(drift) != 1 || drift[0] != "route 10.244.2.0/24 dev eth0" {
		t.Errorf("woke %d drift %q", woke, drift)
	}
	f.apply()
	if got := f.kernel(4); !slices.Equal(got, []string{"10.244.2.0/24 via 192.0.2.2"}) {
		t.Errorf("after the repair: %q", got)
	}
	// The uplink down and up again lost its routes: its link event
	// re-reads them.
	if err := f.nl.SetLinkUp(uplink, false); err != nil {
		t.Fatal(err)
	}
	if err := f.nl.SetLinkUp(uplink, true); err != nil {
		t.Fatal(err)
	}
	l, _ = f.nl.LinkByName(uplink)
	for _, s := range []string{"192.0.2.0/24"} {
		_, dst, _ := net.ParseCIDR(s)
		if err := f.nl.AddRoute(netlink.Route{LinkIndex: l.Index, Dst: dst, Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_KERNEL, Table: unix.RT_TABLE_MAIN}); err != nil {
			t.Fatal(err)
		}
	}
	h.OnLink(netwatch.LinkEvent{Name: "eth9", Up: true})
	if woke != 1 {
		t.Error("another link's event woke the loop")
	}
	h.OnLink(netwatch.LinkEvent{Name: uplink, Up: true})
	if woke != 2 {
		t.Error("the uplink's event did not wake the loop")
	}
	f.apply()
	if got := f.kernel(4); !slices.Equal(got, []string{"10.244.2.0/24 via 192.0.2.2"}) {
		t.Errorf("after the uplink came back: %q", got)
	}
	h.Rescan()
	if woke != 3 {
		t.Error("a rescan did not wake the loop")
	}
	in := f.m.Interest()
	if !slices.Equal(in.Names, []string{uplink}) || !slices.Equal(in.Protocols, []int{186}) || !in.RouteDeletesOnly {
		t.Errorf("interest %+v", in)
	}
}

// TestMetrics: sessions' state and prefix counts, read from the speaker
// at scrape time.
func TestMetrics(t *testing.T) {
	f := newFixture(t, nil)
	f.m.OnNodes(nodes())
	f.apply()
	f.sp.mu.Lock()
	f.sp.state[a("192.0.2.2")] = bgp.PeerStatus{State: "established", Received: 3, Advertised: 2}
	f.sp.mu.Unlock()
	reg := prometheus.NewPedanticRegistry()
	if err := f.m.Register(reg); err != nil {
		t.Fatal(err)
	}
	up := metricValues(t, reg, "routelet_bgp_session_up", "peer")
	if up["192.0.2.2"] != 1 || up["198.51.100.3"] != 0 || len(up) != 4 {
		t.Errorf("session_up %v", up)
	}
	if rx := metricValues(t, reg, "routelet_bgp_prefixes_received", "peer"); rx["192.0.2.2"] != 3 {
		t.Errorf("prefixes_received %v", rx)
	}
	if tx := metricValues(t, reg, "routelet_bgp_prefixes_advertised", "peer"); tx["192.0.2.2"] != 2 {
		t.Errorf("prefixes_advertised %v", tx)
	}
}

// TestClose: Close closes the speaker (without Stop's notifications).
func TestClose(t *testing.T) {
	f := newFixture(t, nil)
	if err := f.m.Close(); err != nil || !f.sp.closed {
		t.Errorf("close: %v, speaker closed %v", err, f.sp.closed)
	}
}

// TestOwnPeersHelper: OwnPeers parses every spec read; a refused one is
// left out and named, the others used (and no password file is kept); a
// read error returns none, so the manager keeps the last ones.
func TestOwnPeersHelper(t *testing.T) {
	var specs []string
	var readErr error
	parse := func(s string) (peers.BGPPeer, error) {
		addr, err := netip.ParseAddr(strings.TrimSuffix(s, ",as=65000"))
		if err != nil {
			return peers.BGPPeer{}, err
		}
		return peers.BGPPeer{Address: addr, ASN: 65000, PasswordFile: "/etc/shadow"}, nil
	}
	f := newFixture(t, func(c *Config) {
		c.NodeMesh = false
		c.OwnPeers = OwnPeers(func() ([]string, error) { return specs, readErr }, parse)
	})
	specs = []string{"192.0.2.9,as=65000", "bogus\x1b"}
	f.m.OnNodes(nil)
	f.apply()
	if got := f.sp.sessions(); !slices.Equal(got, []string{"192.0.2.9 as 65000 node"}) {
		t.Errorf("sessions %q, want the spec that parsed", got)
	}
	if st := f.m.Status(); !strings.Contains(st.Error, `peer "bogus\x1b" refused`) {
		t.Errorf("status error %q, want the refused spec named", st.Error)
	}
	specs, readErr = nil, errors.New("annotation unreadable")
	f.m.OnNodes(nil)
	f.apply()
	if got := f.sp.sessions(); !slices.Equal(got, []string{"192.0.2.9 as 65000 node"}) {
		t.Errorf("after a read error, sessions %q, want the last ones", got)
	}
	if st := f.m.Status(); !strings.Contains(st.Error, "annotation unreadable") || !strings.Contains(st.Error, "kept") {
		t.Errorf("status error %q", st.Error)
	}
	specs, readErr = []string{}, nil
	f.m.OnNodes(nil)
	f.apply()
	if got := f.sp.sessions(); len(got) != 0 || f.m.Status().Error != "" {
		t.Errorf("no specs: sessions %q error %q", got, f.m.Status().Error)
	}
}

// TestAdoptionWaitsForNodes: before the first OnNodes (the datastore not
// read yet) only the global sessions are set, and no number of them
// established converges: the mesh is not known. With the nodes known and
// no session wanted at all, there is nothing to wait for.
func TestAdoptionWaitsForNodes(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.NodeMesh = false
		c.Peers = []bgp.Peer{{Address: a("192.0.2.9"), ASN: 65000}}
	}, addOld("10.244.3.0/24", "192.0.2.254"))
	f.apply()
	if got := f.sp.sessions(); !slices.Equal(got, []string{"192.0.2.9 as 65000 global"}) {
		t.Errorf("before the nodes: sessions %q, want the global one", got)
	}
	f.sp.establish(true, f.now)
	f.m.QueueCheck()
	f.apply()
	if len(f.kernel(4)) != 1 || f.m.Status().Converged {
		t.Fatalf("before the nodes: routes %q converged %v, want the adopted route kept", f.kernel(4), f.m.Status().Converged)
	}
	f.m.OnNodes(nil)
	f.apply()
	if len(f.kernel(4)) != 0 || !f.m.Status().Converged {
		t.Errorf("nodes known, every session in sync: routes %q converged %v", f.kernel(4), f.m.Status().Converged)
	}
}
