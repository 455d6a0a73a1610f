package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/birdtest"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// The BGP end-to-end tests: routeletd with --bgp and --encapsulation none
// (BGP programs the routes to the peers' blocks), BIRD 2 in the router
// namespace as the fabric's router or route reflector. The router has no
// static routes to any pod block: pods on different subnets reach each
// other only through what BGP told it (or told the nodes).

const (
	// nodeAS is every node's AS (--bgp-as); routerAS the router's as an
	// eBGP peer of the nodes.
	nodeAS   = 64512
	routerAS = 65000
	// bgpProto is the kernel protocol of the routes routeletd learned
	// over BGP (bgp-route-protocol's default); birdProto BIRD's own.
	bgpProto  = 186
	birdProto = 12
)

// bgpStatus is the `bgp` block of the state endpoint's document (and of
// `routeletd status --output json`). These tests read only what they
// assert on; every JSON name they expect is here and in bgpPeerStatus.
type bgpStatus struct {
	ASN      uint32          `json:"asn"`
	RouterID string          `json:"routerID"`
	Peers    []bgpPeerStatus `json:"peers"`
	// Refused counts the learned routes refused, by reason
	// ("not-owner", "own-block", "outside-pools", …).
	Refused map[string]int `json:"refusedTotal"`
}

// bgpPeerStatus is one session in bgpStatus.
type bgpPeerStatus struct {
	Address        string `json:"address"`
	ASN            uint32 `json:"asn"`
	Port           int    `json:"port"`
	Description    string `json:"description"` // "mesh node-b", "node", "global"
	RouteReflector bool   `json:"routeReflector"`
	State          string `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Received       int    `json:"received"`
	Accepted       int    `json:"accepted"`
	Advertised     int    `json:"advertised"`
	EndOfRIB       bool   `json:"endOfRIB"`
	LastError      string `json:"lastError"`
}

// stateEstablished is bgpPeerStatus.State of a session that is up.
const stateEstablished = "established"

// statusBGP decodes the bgp block of a state document.
func statusBGP(doc []byte) (*bgpStatus, error) {
	var st struct {
		BGP *bgpStatus `json:"bgp"`
	}
	if err := json.Unmarshal(doc, &st); err != nil {
		return nil, err
	}
	if st.BGP == nil {
		return nil, fmt.Errorf("state has no bgp block: %.400s", doc)
	}
	return st.BGP, nil
}

// bgpState reads n's bgp block from its running daemon's state endpoint.
func bgpState(n *node) (*bgpStatus, error) {
	sock := statusapi.SocketPath(n.StateDir)
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	resp, err := cl.Get("http://routeletd" + statusapi.StatePath)
	if err != nil {
		return nil, fmt.Errorf("node %s state endpoint: %w", n.Spec.Name, err)
	}
	defer resp.Body.Close()
	doc, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("node %s state endpoint: %w", n.Spec.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node %s state endpoint: %s: %.400s", n.Spec.Name, resp.Status, doc)
	}
	st, err := statusBGP(doc)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Spec.Name, err)
	}
	return st, nil
}

// peer returns the session with address addr, nil when there is none.
func (s *bgpStatus) peer(addr string) *bgpPeerStatus {
	for i := range s.Peers {
		if s.Peers[i].Address == addr {
			return &s.Peers[i]
		}
	}
	return nil
}

// String lists the sessions, one per line, for failure messages.
func (s *bgpStatus) String() string {
	var b strings.Builder
	for _, p := range s.Peers {
		fmt.Fprintf(&b, "  %s as %d (%s): %s received %d accepted %d advertised %d endOfRIB %v lastError %q\n",
			p.Address, p.ASN, p.Description, p.State, p.Received, p.Accepted, p.Advertised, p.EndOfRIB, p.LastError)
	}
	fmt.Fprintf(&b, "  refused %v\n", s.Refused)
	return b.String()
}

// waitPeers waits until n's daemon reports every one of addrs established.
func waitPeers(t *testing.T, n *node, addrs ...string) {
	t.Helper()
	netnstest.WaitFor(t, 30*time.Second, "node "+n.Spec.Name+"'s sessions to "+strings.Join(addrs, ", "), func() error {
		st, err := bgpState(n)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if p := st.peer(a); p == nil || p.State != stateEstablished {
				return fmt.Errorf("session %s not established:\n%s", a, st)
			}
		}
		return nil
	})
}

// bgpArgs are the routeletd flags of every BGP test daemon, then flags.
func bgpArgs(flags ...string) []string {
	return append(append(slices.Clone(baseArgs), "--encapsulation=none", "--bgp", fmt.Sprintf("--bgp-as=%d", nodeAS)), flags...)
}

// withArgs returns specs with per-node flags appended to each node's
// DaemonArgs.
func withArgs(specs []cluster.NodeSpec, perNode func(s cluster.NodeSpec) []string) []cluster.NodeSpec {
	out := slices.Clone(specs)
	for i := range out {
		out[i].DaemonArgs = append(slices.Clone(out[i].DaemonArgs), perNode(out[i])...)
	}
	return out
}

// routerPeerFlags peers a node with the router on its own subnet (its
// gateways), as AS as, with opts after the AS (",route-reflector", a
// password file).
func routerPeerFlags(s cluster.NodeSpec, as uint32, opts string) []string {
	return []string{
		fmt.Sprintf("--bgp-peer=%s,as=%d%s", s.Gw4, as, opts),
		fmt.Sprintf("--bgp-peer=%s,as=%d%s", s.Gw6, as, opts),
	}
}

// nodeProto names the router's protocol for a node's session of family
// v (4 or 6): "node_a4".
func nodeProto(s cluster.NodeSpec, v int) string { return fmt.Sprintf("node_%s%d", s.Name, v) }

// routerConfig is the router's BIRD: a session per node and family with
// graceful restart; as localAS (nodeAS: iBGP, the nodes being
// route-reflector clients when rr); with accept, each node's sessions
// take only that node's own blocks.
func routerConfig(nodes []cluster.NodeSpec, localAS uint32, rr, accept bool) birdtest.Config {
	// Direct: iBGP next hops resolve through the connected subnets.
	cfg := birdtest.Config{RouterID: netip.MustParseAddr("10.0.1.1"), Direct: true}
	for _, s := range nodes {
		for _, fam := range []struct {
			v           int
			host, block string
		}{{4, s.Host4, s.Block4}, {6, s.Host6, s.Block6}} {
			nb := birdtest.Neighbor{Name: nodeProto(s, fam.v), Address: netip.MustParsePrefix(fam.host).Addr(), ASN: nodeAS,
				LocalASN: localAS, GracefulRestart: true, RouteReflectorClient: rr}
			if accept {
				nb.Accept = []netip.Prefix{netip.MustParsePrefix(fam.block)}
			}
			cfg.Neighbors = append(cfg.Neighbors, nb)
		}
	}
	return cfg
}

// startBGP builds the cluster of nodes, starts routerCfg's BIRD in the
// router when it is not nil (before the daemons, which then find their
// peer up), runs routeletd with flags on every node, copies the records
// and attaches two pods per node. BIRD's log is shown if the test failed;
// everything goes at cleanup.
func startBGP(t *testing.T, nodes []cluster.NodeSpec, flags []string, routerCfg *birdtest.Config) (*testCluster, *birdtest.Bird) {
	t.Helper()
	netnstest.SkipUnlessRoot(t, whyRoot)
	if routerCfg != nil {
		birdtest.SkipUnlessInstalled(t)
	}
	tc := buildCluster(t, cluster.Options{Nodes: nodes, DaemonArgs: flags})
	ctx := context.Background()
	var rb *birdtest.Bird
	if routerCfg != nil {
		var err error
		if rb, err = tc.c.StartRouterBird(ctx, *routerCfg); err != nil {
			t.Fatal(err)
		}
		logBird(t, "router", rb)
	}
	if err := tc.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.c.Nodes {
		for i := range 2 {
			if _, err := tc.c.AddPod(ctx, n, fmt.Sprintf("%s-pod%d", n.Spec.Name, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tc, rb
}

// logBird shows b's state and log at cleanup if t failed (before the
// cluster's Close stops it: cleanups run last in, first out).
func logBird(t *testing.T, where string, b *birdtest.Bird) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ps, _ := b.Birdc(context.Background(), "show", "protocols")
		rs, _ := b.Birdc(context.Background(), "show", "route")
		t.Logf("bird in %s:\n%s\n%s\nlog:\n%s", where, ps, rs, b.Log())
	})
}

// waitRouterSessions waits until every named protocol of b is
// established.
func waitRouterSessions(t *testing.T, b *birdtest.Bird, names ...string) {
	t.Helper()
	netnstest.WaitFor(t, 30*time.Second, "the router's sessions "+strings.Join(names, ", "), func() error {
		for _, name := range names {
			p, err := b.Protocol(context.Background(), name)
			if err != nil {
				return err
			}
			if !p.Established() {
				return fmt.Errorf("%s: %s %s", name, p.State, p.Info)
			}
		}
		return nil
	})
}

// allNodeProtos names the router's protocols for every node of specs.
func allNodeProtos(specs []cluster.NodeSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, nodeProto(s, 4), nodeProto(s, 6))
	}
	return out
}

// blocksOf returns the blocks of specs, sorted as strings.
func blocksOf(specs ...cluster.NodeSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Block4, s.Block6)
	}
	slices.Sort(out)
	return out
}

// routerPrefixes returns the prefixes of b's best BGP routes, as sorted
// strings.
func routerPrefixes(b *birdtest.Bird) ([]string, error) {
	ps, err := b.BGPPrefixes(context.Background())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	slices.Sort(out)
	return out, nil
}

// waitRouterPrefixes waits until b's best BGP routes are exactly want.
func waitRouterPrefixes(t *testing.T, b *birdtest.Bird, what string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	netnstest.WaitFor(t, 30*time.Second, what, func() error {
		got, err := routerPrefixes(b)
		if err != nil {
			return err
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("the router's BGP routes are %v, want %v", got, want)
		}
		return nil
	})
}

// protoRoutes returns n's main-table routes of kernel protocol proto, both
// families, as "<dst> via <gw> dev <dev>", sorted.
func protoRoutes(nl *netlink.Handle, proto int) ([]string, error) {
	var out []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := nl.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: netlink.RouteProtocol(proto)},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			dev := ""
			if l, err := nl.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			out = append(out, fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gw, dev))
		}
	}
	slices.Sort(out)
	return out, nil
}

// onSubnet reports whether host (a CIDR) is on the subnet of n's
// address of the same family.
func onSubnet(n cluster.NodeSpec, host string) bool {
	a := netip.MustParsePrefix(host).Addr()
	for _, own := range []string{n.Host4, n.Host6} {
		if own == "" {
			continue
		}
		if p := netip.MustParsePrefix(own); p.Addr().Is4() == a.Is4() {
			return p.Masked().Contains(a)
		}
	}
	return false
}

// learnedRoutes is what n programs for peers' blocks learned with next
// hops at the peers' host addresses: each peer's block via the peer when
// it is on n's subnet, else via n's gateway (the kernel's route to the
// next hop), out of eth0.
func learnedRoutes(n cluster.NodeSpec, peers []cluster.NodeSpec) []string {
	var out []string
	for _, p := range peers {
		for _, f := range []struct{ block, host, gw string }{{p.Block4, p.Host4, n.Gw4}, {p.Block6, p.Host6, n.Gw6}} {
			via := f.gw
			if onSubnet(n, f.host) {
				via = netip.MustParsePrefix(f.host).Addr().String()
			}
			out = append(out, fmt.Sprintf("%s via %s dev eth0", f.block, via))
		}
	}
	slices.Sort(out)
	return out
}

// others returns specs without s.
func others(specs []cluster.NodeSpec, s cluster.NodeSpec) []cluster.NodeSpec {
	return slices.DeleteFunc(slices.Clone(specs), func(o cluster.NodeSpec) bool { return o.Name == s.Name })
}

// waitLearned waits until n's BGP routes are exactly want.
func waitLearned(t *testing.T, n *node, want []string) {
	t.Helper()
	netnstest.WaitFor(t, 30*time.Second, "node "+n.Spec.Name+"'s BGP routes", func() error {
		got, err := protoRoutes(n.nl, bgpProto)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("proto %d routes %v, want %v", bgpProto, got, want)
		}
		return nil
	})
}

// waitAllReach waits until from's first pod reaches to's first pod over
// IPv4 and IPv6 (the routes are in), then checks every pod pair.
func (c *testCluster) waitAllReach(t *testing.T, from, to *node) {
	t.Helper()
	for _, dst := range []netip.Addr{to.Pods[0].IPv4, to.Pods[0].IPv6} {
		netnstest.WaitFor(t, 30*time.Second, fmt.Sprintf("pod %s → %s", from.Pods[0].Name, dst), func() error {
			_, err := from.Pods[0].Ping(context.Background(), dst)
			return err
		})
	}
	if bad := c.reachability(func(_, _ *node) bool { return true }); len(bad) > 0 {
		t.Fatalf("pods that should reach each other do not:\n%s", strings.Join(bad, "\n"))
	}
}

// writeRecord writes a node record into dst's nodes/ directory, as an
// operator's copy of it would be (fields as JSON, bgpAS included).
func writeRecord(t *testing.T, dst *node, rec map[string]any) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dst.Store.NodesDir(), rec["name"].(string)+".json")
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestBGPRouter: three nodes on two subnets, each peering (eBGP, both
// families) with BIRD in the router, which programs their blocks into its
// kernel; the node-to-node mesh is on too. Pods on either subnet reach
// each other over IPv4 and IPv6; the router's table holds each node's
// blocks and nothing else. A speaker on the underlay with a node record
// of its own, announcing another node's block and a part of a third's:
// the mesh peers refuse both (not the owner; a node's own block), and the
// router's import filter keeps all but its own block out.
func TestBGPRouter(t *testing.T) {
	nodes := withArgs(specs, func(s cluster.NodeSpec) []string { return routerPeerFlags(s, routerAS, "") })
	rcfg := routerConfig(specs, routerAS, false, true)
	c, rb := startBGP(t, nodes, bgpArgs(), &rcfg)
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	waitRouterSessions(t, rb, allNodeProtos(specs)...)
	waitRouterPrefixes(t, rb, "every node's blocks at the router", blocksOf(specs...))
	for _, n := range c.nodes {
		waitPeers(t, n, n.Spec.Gw4, n.Spec.Gw6)
		// The mesh gives each node the others' blocks; the router
		// announces nothing.
		waitLearned(t, n, learnedRoutes(n.Spec, others(specs, n.Spec)))
	}
	c.waitAllReach(t, a, cn)
	c.waitAllReach(t, cn, b)

	// The router's kernel has each block via its node, nothing more.
	rnl := netnstest.HandleFor(t, c.c.Router)
	var want []string
	for _, s := range specs {
		dev := cluster.DefaultBridge // a and b are on the router's bridge
		if s.Routed {
			dev = "to-" + s.Name
		}
		want = append(want, fmt.Sprintf("%s via %s dev %s", s.Block4, hostAddr(s.Host4), dev))
		want = append(want, fmt.Sprintf("%s via %s dev %s", s.Block6, hostAddr(s.Host6), dev))
	}
	slices.Sort(want)
	// An IPv6 next hop may come as the node's link-local address too
	// (a speaker may send both); either is the node.
	linkLocal := regexp.MustCompile(`^(\S+) via fe80:[0-9a-f:]* dev (\S+)$`)
	netnstest.WaitFor(t, 10*time.Second, "the router's kernel routes to the blocks", func() error {
		got, err := protoRoutes(rnl, birdProto)
		for i, r := range got {
			if m := linkLocal.FindStringSubmatch(r); m != nil {
				for _, s := range specs {
					if s.Block6 == m[1] {
						got[i] = fmt.Sprintf("%s via %s dev %s", m[1], hostAddr(s.Host6), m[2])
					}
				}
			}
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			return fmt.Errorf("router's bird routes %v, %v; want %v", got, err, want)
		}
		return nil
	})

	t.Run("a false claim is refused by the mesh and the router's filter", func(t *testing.T) {
		rogue := cluster.NodeSpec{Name: "r", Host4: "10.0.1.20/24", Host6: "fd00:1::20/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1",
			Block4: "10.244.9.0/24", Block6: "fd00:244:9::/120"}
		r, err := c.c.AddHost(rogue)
		if err != nil {
			t.Fatal(err)
		}
		// Its record: a node of the mesh owning 10.244.9.0/24 only.
		for _, n := range c.nodes {
			writeRecord(t, n, map[string]any{"version": state.RecordVersion, "name": "r", "hostIPv4": "10.0.1.20", "hostIPv6": "fd00:1::20",
				"blocks": []string{rogue.Block4, rogue.Block6}, "bgpAS": nodeAS, "updated": time.Now().UTC()})
		}
		stolen := netip.MustParsePrefix(specs[2].Block4) // c's
		part := netip.MustParsePrefix("10.244.1.0/25")   // of a's block
		own := netip.MustParsePrefix(rogue.Block4)
		rcfg := birdtest.Config{RouterID: netip.MustParseAddr("10.0.1.20"), NoKernel: true, Static: []netip.Prefix{stolen, part, own}}
		for _, s := range specs {
			rcfg.Neighbors = append(rcfg.Neighbors, birdtest.Neighbor{Name: "mesh_" + s.Name, Address: netip.MustParsePrefix(s.Host4).Addr(),
				ASN: nodeAS, LocalASN: nodeAS, NextHopSelf: true})
		}
		rcfg.Neighbors = append(rcfg.Neighbors, birdtest.Neighbor{Name: "tor", Address: netip.MustParseAddr("10.0.1.1"), ASN: routerAS, LocalASN: nodeAS})
		rbird, err := c.c.StartBird(t.Context(), r.CNI.NS, rcfg)
		if err != nil {
			t.Fatal(err)
		}
		logBird(t, "rogue", rbird)
		routerCfg := rb.Config()
		routerCfg.Neighbors = append(routerCfg.Neighbors, birdtest.Neighbor{Name: "node_r4", Address: netip.MustParseAddr("10.0.1.20"),
			ASN: nodeAS, LocalASN: routerAS, GracefulRestart: true, Accept: []netip.Prefix{own}})
		if err := rb.Reconfigure(t.Context(), routerCfg); err != nil {
			t.Fatal(err)
		}
		waitRouterSessions(t, rb, "node_r4")
		waitRouterSessions(t, rbird, "mesh_a", "mesh_b", "mesh_c", "tor")
		for _, n := range c.nodes {
			waitPeers(t, n, "10.0.1.20")
		}
		// The router takes the rogue's own block only; its best route to
		// c's block is still c's.
		waitRouterPrefixes(t, rb, "the rogue's own block added at the router", append(blocksOf(specs...), own.String()))
		rs, err := rb.ProtocolRoutes(t.Context(), "node_r4")
		if err != nil || len(rs) != 1 || rs[0].Prefix != own {
			t.Errorf("routes the router took from the rogue: %v, %v; want %s only", rs, err, own)
		}
		// The mesh peers: the block it owns by its record is programmed
		// via it; c's block and the part of a's are refused.
		for _, n := range c.nodes {
			netnstest.WaitFor(t, 30*time.Second, "node "+n.Spec.Name+" refuses the rogue's claims", func() error {
				st, err := bgpState(n)
				if err != nil {
					return err
				}
				// Every node refuses a claim to another node's block; a and
				// c also one overlapping a block of their own.
				reasons := []string{"not-owner"}
				if n == cn || n == a {
					reasons = append(reasons, "own-block")
				}
				for _, reason := range reasons {
					if st.Refused[reason] < 1 {
						return fmt.Errorf("no %s refusal:\n%s", reason, st)
					}
				}
				// Exactly the mesh's routes and the rogue's own block (via
				// it on its subnet, via the gateway across).
				via := n.Spec.Gw4
				if onSubnet(n.Spec, rogue.Host4) {
					via = hostAddr(rogue.Host4)
				}
				want := append(learnedRoutes(n.Spec, others(specs, n.Spec)), fmt.Sprintf("%s via %s dev eth0", own, via))
				slices.Sort(want)
				got, err := protoRoutes(n.nl, bgpProto)
				if err != nil {
					return err
				}
				if !slices.Equal(got, want) {
					return fmt.Errorf("proto %d routes %v, want %v (the claims to %s and %s refused)", bgpProto, got, want, stolen, part)
				}
				return nil
			})
		}
		c.waitAllReach(t, a, cn)
	})
}

// TestBGPMesh: three nodes on one subnet, no router speaking BGP: the
// node-to-node mesh (iBGP from the records' bgpAS) alone gives each node
// its peers' blocks via their host addresses, both families, and every
// pod reaches every other.
func TestBGPMesh(t *testing.T) {
	d := cluster.NodeSpec{Name: "d", Host4: "10.0.1.12/24", Host6: "fd00:1::12/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1",
		Block4: "10.244.4.0/24", Block6: "fd00:244:4::/120"}
	nodes := []cluster.NodeSpec{specs[0], specs[1], d}
	c, _ := startBGP(t, nodes, bgpArgs(), nil)
	for _, n := range c.nodes {
		var addrs []string
		for _, o := range others(nodes, n.Spec) {
			addrs = append(addrs, hostAddr(o.Host4), hostAddr(o.Host6))
		}
		waitPeers(t, n, addrs...)
		waitLearned(t, n, learnedRoutes(n.Spec, others(nodes, n.Spec)))
		st, err := bgpState(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Peers) != 4 {
			t.Errorf("node %s has %d sessions, want 4 (two peers, two families):\n%s", n.Spec.Name, len(st.Peers), st)
		}
		for _, p := range st.Peers {
			if !strings.Contains(p.Description, "mesh") || p.ASN != nodeAS {
				t.Errorf("node %s session %s: description %q, AS %d; want a mesh session with AS %d", n.Spec.Name, p.Address, p.Description, p.ASN, nodeAS)
			}
		}
		if st.ASN != nodeAS {
			t.Errorf("node %s status AS %d, want %d", n.Spec.Name, st.ASN, nodeAS)
		}
	}
	c.waitAllReach(t, c.node("a"), c.node("d"))
}

// TestBGPRouteReflector: BIRD in the router as an iBGP route reflector
// (the nodes its clients), the mesh off: each node peers with the
// reflector only and learns the others' blocks from it, next hops
// unchanged (via the node on its subnet, via the gateway across). Every
// pod reaches every other.
func TestBGPRouteReflector(t *testing.T) {
	nodes := withArgs(specs, func(s cluster.NodeSpec) []string { return routerPeerFlags(s, nodeAS, ",route-reflector") })
	rcfg := routerConfig(specs, nodeAS, true, false)
	c, rb := startBGP(t, nodes, bgpArgs("--bgp-node-mesh=false"), &rcfg)
	waitRouterSessions(t, rb, allNodeProtos(specs)...)
	waitRouterPrefixes(t, rb, "every node's blocks at the reflector", blocksOf(specs...))
	for _, n := range c.nodes {
		waitPeers(t, n, n.Spec.Gw4, n.Spec.Gw6)
		waitLearned(t, n, learnedRoutes(n.Spec, others(specs, n.Spec)))
		st, err := bgpState(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Peers) != 2 {
			t.Errorf("node %s has %d sessions with the mesh off, want 2 (the reflector, two families):\n%s", n.Spec.Name, len(st.Peers), st)
		}
		for _, p := range st.Peers {
			if !p.RouteReflector {
				t.Errorf("node %s session %s not shown as a route reflector", n.Spec.Name, p.Address)
			}
		}
	}
	c.waitAllReach(t, c.node("a"), c.node("c"))
}

// TestBGPKillRestart: routeletd on c killed with SIGKILL and started again
// during ping streams between a and c (across the router): graceful
// restart keeps c's blocks at the router the whole time (its session
// down, the routes stale), at most one echo is lost per stream, and the
// session comes back.
func TestBGPKillRestart(t *testing.T) {
	nodes := withArgs(specs, func(s cluster.NodeSpec) []string { return routerPeerFlags(s, routerAS, "") })
	rcfg := routerConfig(specs, routerAS, false, true)
	c, rb := startBGP(t, nodes, bgpArgs("--bgp-node-mesh=false"), &rcfg)
	a, cn := c.node("a"), c.node("c")
	waitRouterSessions(t, rb, allNodeProtos(specs)...)
	waitRouterPrefixes(t, rb, "every node's blocks at the router", blocksOf(specs...))
	c.waitAllReach(t, a, cn)
	all := blocksOf(specs...)

	// Sample the router's table all along.
	var mu sync.Mutex
	var missing []string
	samples := 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			got, err := routerPrefixes(rb)
			mu.Lock()
			samples++
			if err != nil || !slices.Equal(got, all) {
				missing = append(missing, fmt.Sprintf("%s: %v %v", time.Now().Format("15:04:05.000"), got, err))
			}
			mu.Unlock()
		}
	}()
	sawRestart := false
	pairs := [][2]netip.Addr{{a.Pods[0].IPv4, cn.Pods[0].IPv4}, {cn.Pods[1].IPv6, a.Pods[1].IPv6}}
	rs := streams(t, pairs, c.podsByAddr(), 50*time.Millisecond, func() {
		if err := cn.Kill(); err != nil {
			t.Fatal(err)
		}
		netnstest.WaitFor(t, 10*time.Second, "the router sees c restarting", func() error {
			d, err := rb.Detail(context.Background(), nodeProto(specs[2], 4))
			if err != nil {
				return err
			}
			if d.Established() {
				return fmt.Errorf("%s still established", d.Name)
			}
			sawRestart = d.GracefulRestart
			return nil
		})
		if err := c.c.StartAfterKill(context.Background(), cn.Node); err != nil {
			t.Fatal(err)
		}
	})
	waitRouterSessions(t, rb, nodeProto(specs[2], 4), nodeProto(specs[2], 6))
	time.Sleep(time.Second) // past End-of-RIB: the stale routes are replaced, not dropped
	close(stop)
	<-sampled
	for i, r := range rs {
		t.Logf("%s → %s across c's kill -9 and restart: %s", pairs[i][0], pairs[i][1], r)
		if r.Sent-r.Received > 1 {
			t.Errorf("%s → %s lost %d echoes across routeletd's kill -9 and restart on c, want at most 1: %s", pairs[i][0], pairs[i][1], r.Sent-r.Received, r)
		}
	}
	if !sawRestart {
		t.Error("the router did not keep c's routes as a restarting peer's (graceful restart)")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(missing) > 0 {
		t.Errorf("%d of %d samples of the router's table lacked blocks (want %v):\n%s", len(missing), samples, all, strings.Join(missing, "\n"))
	}
}

// junkListener accepts TCP connections on addr inside n and answers each
// with bytes that are no BGP message, then closes it; it counts them.
func junkListener(t *testing.T, n ns.NetNS, addr string) *atomic.Int32 {
	t.Helper()
	var count atomic.Int32
	netnstest.ServeTCP(t, n, "tcp", addr, func(conn net.Conn) {
		count.Add(1)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		junk := []byte("SSH-2.0-OpenSSH_9.2 this is no BGP speaker\r\n")
		junk = append(junk, make([]byte, 64)...) // a zero marker: never a BGP header
		conn.Write(junk)
		buf := make([]byte, 4096)
		conn.Read(buf)
	})
	return &count
}

// TestBGPFaults: peers that fail in the ways peers do — a session flapped
// by the router (protocol disabled and enabled), a port that speaks
// garbage, a wrong TCP MD5 password — never stop routeletd, and its
// status says, per session, what state it is in and why.
func TestBGPFaults(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	birdtest.SkipUnlessInstalled(t)
	dir := t.TempDir()
	write := func(name, pw string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	right, wrong := write("right", "right-password"), write("wrong", "not-the-password")
	junk := cluster.NodeSpec{Name: "junk", Host4: "10.0.1.30/24", Gw4: "10.0.1.1"}
	nodes := withArgs(specs, func(s cluster.NodeSpec) []string {
		switch s.Name {
		case "a": // the flapped session, and the garbage one
			return append(routerPeerFlags(s, routerAS, ""), fmt.Sprintf("--bgp-peer=%s,as=65030", hostAddr(junk.Host4)))
		case "b": // a password the router does not have
			return routerPeerFlags(s, routerAS, ",password-file="+wrong)
		default: // the password the router has
			return routerPeerFlags(s, routerAS, ",password-file="+right)
		}
	})
	rcfg := routerConfig(specs, routerAS, false, true)
	for i := range rcfg.Neighbors {
		if !strings.HasPrefix(rcfg.Neighbors[i].Name, "node_a") {
			rcfg.Neighbors[i].Password = "right-password"
		}
	}
	tc := buildCluster(t, cluster.Options{Nodes: nodes, DaemonArgs: bgpArgs("--bgp-node-mesh=false")})
	ctx := context.Background()
	jh, err := tc.c.AddHost(junk)
	if err != nil {
		t.Fatal(err)
	}
	accepted := junkListener(t, jh.CNI.NS, hostAddr(junk.Host4)+":179")
	rb, err := tc.c.StartRouterBird(ctx, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	logBird(t, "router", rb)
	if err := tc.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	a, b, cn := tc.node("a"), tc.node("b"), tc.node("c")
	pids := map[string]int{}
	for _, n := range tc.nodes {
		pids[n.Spec.Name] = n.DaemonPID()
	}
	running := func(t *testing.T) {
		t.Helper()
		for _, n := range tc.nodes {
			if pid := n.DaemonPID(); pid == 0 || pid != pids[n.Spec.Name] {
				t.Fatalf("routeletd on %s: PID %d, started as %d: it exited or was replaced", n.Spec.Name, pid, pids[n.Spec.Name])
			}
			st, err := n.Store.ReadDaemonStatus()
			if err != nil || !st.Ready {
				t.Errorf("routeletd on %s not ready: %+v, %v", n.Spec.Name, st, err)
			}
		}
	}
	// The right password works: c's sessions come up.
	waitRouterSessions(t, rb, nodeProto(specs[2], 4), nodeProto(specs[2], 6))
	waitPeers(t, cn, cn.Spec.Gw4, cn.Spec.Gw6)

	t.Run("a wrong MD5 password: no session, the daemon runs and says so", func(t *testing.T) {
		// Segments with a wrong signature are dropped unanswered: nothing
		// comes up however long it tries.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			st, err := bgpState(b)
			if err != nil {
				t.Fatal(err)
			}
			p := st.peer(b.Spec.Gw4)
			if p == nil {
				t.Fatalf("b's status has no session to %s:\n%s", b.Spec.Gw4, st)
			}
			if p.State == stateEstablished {
				t.Fatalf("b's session to %s established with the wrong password:\n%s", b.Spec.Gw4, st)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if p, err := rb.Protocol(ctx, nodeProto(specs[1], 4)); err != nil || p.Established() {
			t.Errorf("the router's session with b: %+v, %v; want not established", p, err)
		}
		st, _ := bgpState(b)
		t.Logf("b with the wrong password:\n%s", st)
		running(t)
	})

	t.Run("garbage on the peer port: the session fails with a reason, again and again", func(t *testing.T) {
		netnstest.WaitFor(t, 30*time.Second, "a's session to the garbage port failed with a reason, twice", func() error {
			st, err := bgpState(a)
			if err != nil {
				return err
			}
			p := st.peer(hostAddr(junk.Host4))
			if p == nil {
				return fmt.Errorf("no session to %s:\n%s", hostAddr(junk.Host4), st)
			}
			if p.State == stateEstablished || p.LastError == "" || accepted.Load() < 2 {
				return fmt.Errorf("session to the garbage port (%d connections so far):\n%s", accepted.Load(), st)
			}
			return nil
		})
		// a's session with the router is unaffected.
		waitPeers(t, a, a.Spec.Gw4, a.Spec.Gw6)
		running(t)
	})

	t.Run("a flapping peer: every flap shown, the session and the routes back", func(t *testing.T) {
		name := nodeProto(specs[0], 4)
		waitRouterSessions(t, rb, name)
		for i := range 3 {
			if err := rb.Disable(ctx, name); err != nil {
				t.Fatal(err)
			}
			netnstest.WaitFor(t, 30*time.Second, fmt.Sprintf("flap %d: a sees the session closed, and why", i+1), func() error {
				st, err := bgpState(a)
				if err != nil {
					return err
				}
				if p := st.peer(a.Spec.Gw4); p == nil || p.State == stateEstablished || p.LastError == "" {
					return fmt.Errorf("session to %s:\n%s", a.Spec.Gw4, st)
				}
				return nil
			})
			if err := rb.Enable(ctx, name); err != nil {
				t.Fatal(err)
			}
			waitPeers(t, a, a.Spec.Gw4)
		}
		want := blocksOf(specs[0], specs[2]) // b's sessions never came up
		waitRouterPrefixes(t, rb, "a's and c's blocks at the router after the flaps", want)
		running(t)
	})

	// The command line shows the same block.
	out, err := tc.c.Routeletd(ctx, a.Node, "status", "--output", "json", "--node-name=a", "--state-dir="+a.StateDir)
	if err != nil {
		t.Fatalf("routeletd status: %v\n%s", err, out)
	}
	st, err := statusBGP([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if p := st.peer(hostAddr(junk.Host4)); p == nil || p.LastError == "" {
		t.Errorf("routeletd status shows the garbage port's session as %+v, want its last error:\n%s", p, st)
	}
}
