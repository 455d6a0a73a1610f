package multinode

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

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/nlutil"
)

// mnPrefix starts the name of every namespace these tests create; nsPrefix
// adds this process's PID, so crashed runs' leftovers can be found.
const mnPrefix = "routelet-mn-"

var nsPrefix = netnstest.OwnedPrefix(mnPrefix)

// routeProto is the protocol routelet stamps on its routes (docs/design.md).
const routeProto = 80

// binDir holds routeletd and the plugin, built by TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(netnstest.Privileged{
		Stale: mnPrefix, RemoveStale: cluster.RemoveStale, Bins: []string{netnstest.Routelet, netnstest.Routeletd},
		Built: func(dir string) { binDir = dir },
	}.Main(m))
}

// whyRoot is what these tests need root for.
const whyRoot = "creates network namespaces, veths and runs routeletd in them"

// specs: a and b share 10.0.1.0/24 (the router's bridge); c is on
// 10.0.2.0/24 behind the router. The router forwards the underlay only: it
// has no routes to any pod block.
var specs = []cluster.NodeSpec{
	{Name: "a", Host4: "10.0.1.10/24", Host6: "fd00:1::10/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1",
		Block4: "10.244.1.0/24", Block6: "fd00:244:1::/120"},
	{Name: "b", Host4: "10.0.1.11/24", Host6: "fd00:1::11/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1",
		Block4: "10.244.2.0/24", Block6: "fd00:244:2::/120"},
	{Name: "c", Host4: "10.0.2.10/24", Host6: "fd00:2::10/64", Gw4: "10.0.2.1", Gw6: "fd00:2::1",
		Block4: "10.244.3.0/24", Block6: "fd00:244:3::/120", Routed: true},
}

// node is a cluster node with a netlink handle inside it for assertions.
type node struct {
	*cluster.Node
	nl *netlink.Handle
}

// testCluster is the cluster of one test.
type testCluster struct {
	t     *testing.T
	c     *cluster.Cluster
	nodes []*node
}

// baseArgs are the routeletd flags of every test daemon: test-sized
// periods, debug logs, no health server.
var baseArgs = []string{"--log-level=debug", "--device-check-period=500ms", "--grace-period=1s", "--health-addr="}

// clusterSeq tells the clusters of one test process apart.
var clusterSeq int

// newCluster builds the router and the three nodes and starts routeletd in
// each with the mode flags (and test-sized periods), copies the node records
// between them and attaches two pods per node. Everything is removed at
// cleanup; the daemons' logs are shown if the test failed.
func newCluster(t *testing.T, flags ...string) *testCluster {
	t.Helper()
	netnstest.SkipUnlessRoot(t, whyRoot)
	args := append(slices.Clone(baseArgs), flags...)
	tc := buildCluster(t, cluster.Options{Nodes: specs, DaemonArgs: args})
	c := tc.c
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		for i := range 2 {
			if _, err := c.AddPod(ctx, n, fmt.Sprintf("%s-pod%d", n.Spec.Name, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tc
}

// buildCluster builds the router and opts.Nodes (namespaces named for this
// process, this package's binaries, a temporary work directory); nothing
// runs yet. Everything is removed at cleanup, and the daemons' logs are
// shown if the test failed.
func buildCluster(t *testing.T, opts cluster.Options) *testCluster {
	t.Helper()
	clusterSeq++
	opts.Prefix, opts.PluginDir = fmt.Sprintf("%s%d-", nsPrefix, clusterSeq), binDir
	opts.Daemon, opts.WorkDir = filepath.Join(binDir, "routeletd"), t.TempDir()
	c, err := cluster.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, c: c}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("routeletd %s log (tail):\n%s", n.Spec.Name, n.LogTail(200))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("cluster cleanup: %v", err)
		}
	})
	for _, n := range c.Nodes {
		tc.nodes = append(tc.nodes, newNode(t, n))
	}
	return tc
}

// routeletd runs the routeletd binary in n with args and returns its
// output.
func routeletd(n *node, args ...string) (string, error) {
	return netnstest.Exec(context.Background(), n.CNI.NS, filepath.Join(binDir, "routeletd"), args...)
}

// newNode wraps n with a netlink handle inside it, closed at cleanup.
func newNode(t testing.TB, n *cluster.Node) *node {
	return &node{Node: n, nl: netnstest.HandleFor(t, n.CNI.NS)}
}

// node returns the node called name.
func (c *testCluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.Spec.Name == name {
			return n
		}
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

// placedPod is a pod with the node it runs on.
type placedPod struct {
	n *node
	p *cluster.Pod
}

// allPods returns every pod with the node it runs on.
func (c *testCluster) allPods() []placedPod {
	var out []placedPod
	for _, n := range c.nodes {
		for _, p := range n.Pods {
			out = append(out, placedPod{n, p})
		}
	}
	return out
}

// reachable lists "from → to" for every ordered pod pair and family whose
// ping result differs from want(from node, to node).
func (c *testCluster) reachability(want func(from, to *node) bool) []string {
	var bad []string
	pods := c.allPods()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, from := range pods {
		for _, to := range pods {
			if from.p == to.p {
				continue
			}
			for _, dst := range []netip.Addr{to.p.IPv4, to.p.IPv6} {
				if !dst.IsValid() {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := from.p.Ping(context.Background(), dst)
					ok := err == nil
					if exp := want(from.n, to.n); ok != exp {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%s → %s (%s): reached %v, want %v", from.p.Name, to.p.Name, dst, ok, exp))
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait() // one source pod at a time keeps the box responsive
	}
	slices.Sort(bad)
	return bad
}

// overlayRoutes returns n's routelet-protocol routes of family that are not
// pod routes or blackholes, as `ip route` would print the parts that
// matter: "<dst> via <gw> dev <dev>[ onlink][ mtu N]".
func (n *node) overlayRoutes(family int) ([]string, error) {
	rs, err := n.nl.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: routeProto},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if r.Dst == nil || r.LinkIndex == 0 || r.Gw == nil {
			continue
		}
		l, err := n.nl.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		s := fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gw, l.Attrs().Name)
		if r.Flags&unix.RTNH_F_ONLINK != 0 {
			s += " onlink"
		}
		if r.MTU > 0 {
			s += fmt.Sprintf(" mtu %d", r.MTU)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

// l2 returns the permanent neighbour entries ("<ip> lladdr <mac>") and the
// unicast FDB entries ("<mac> dst <ip>") on device dev; nil, nil when the
// device does not exist.
func (n *node) l2(dev string, family int) (neigh, fdb []string, err error) {
	l, err := n.nl.LinkByName(dev)
	if err != nil {
		if nlutil.LinkNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	ns, err := n.nl.NeighList(l.Attrs().Index, family)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ns {
		if e.State&netlink.NUD_PERMANENT != 0 {
			neigh = append(neigh, fmt.Sprintf("%s lladdr %s", e.IP, e.HardwareAddr))
		}
	}
	fs, err := n.nl.NeighList(l.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range fs {
		if len(e.HardwareAddr) == 6 && e.HardwareAddr[0]&1 == 0 && e.IP != nil {
			fdb = append(fdb, fmt.Sprintf("%s dst %s", e.HardwareAddr, e.IP))
		}
	}
	slices.Sort(neigh)
	slices.Sort(fdb)
	return neigh, fdb, nil
}

// dataplane is what a node holds for its peers: overlay routes and L2.
type dataplane struct {
	Routes4, Routes6 []string
	Neigh4, FDB4     []string
	Neigh6, FDB6     []string
}

func (d dataplane) String() string {
	var b strings.Builder
	for _, part := range []struct {
		name string
		v    []string
	}{{"routes v4", d.Routes4}, {"routes v6", d.Routes6}, {"arp vxlan.calico", d.Neigh4}, {"fdb vxlan.calico", d.FDB4},
		{"ndp vxlan-v6.calico", d.Neigh6}, {"fdb vxlan-v6.calico", d.FDB6}} {
		fmt.Fprintf(&b, "  %s:\n", part.name)
		for _, s := range part.v {
			fmt.Fprintf(&b, "    %s\n", s)
		}
	}
	return b.String()
}

// read returns n's dataplane.
func (n *node) read() (dataplane, error) {
	var d dataplane
	var errs [6]error
	d.Routes4, errs[0] = n.overlayRoutes(netlink.FAMILY_V4)
	d.Routes6, errs[1] = n.overlayRoutes(netlink.FAMILY_V6)
	d.Neigh4, d.FDB4, errs[2] = n.l2("vxlan.calico", netlink.FAMILY_V4)
	d.Neigh6, d.FDB6, errs[3] = n.l2("vxlan-v6.calico", netlink.FAMILY_V6)
	return d, errors.Join(errs[:]...)
}

func equalDP(a, b dataplane) bool {
	return slices.Equal(a.Routes4, b.Routes4) && slices.Equal(a.Routes6, b.Routes6) &&
		slices.Equal(a.Neigh4, b.Neigh4) && slices.Equal(a.FDB4, b.FDB4) &&
		slices.Equal(a.Neigh6, b.Neigh6) && slices.Equal(a.FDB6, b.FDB6)
}

// dataplanes reads the dataplane of every node in nodes, by node name.
func (c *testCluster) dataplanes(nodes []*node) map[string]dataplane {
	c.t.Helper()
	out := map[string]dataplane{}
	for _, n := range nodes {
		d, err := n.read()
		if err != nil {
			c.t.Fatal(err)
		}
		out[n.Spec.Name] = d
	}
	return out
}

// keepDataplanes samples nodes every half second until, since start, d
// has passed, and fails as soon as one node's dataplane differs from what
// before holds for it (an outage must change nothing). It samples a
// window; it does not wait for a condition.
func (c *testCluster) keepDataplanes(nodes []*node, before map[string]dataplane, start time.Time, d time.Duration, what string) {
	c.t.Helper()
	for time.Since(start) < d {
		for _, n := range nodes {
			got, err := n.read()
			if err != nil {
				c.t.Fatal(err)
			}
			if !equalDP(got, before[n.Spec.Name]) {
				c.t.Fatalf("node %s's dataplane changed %s into %s\ngot:\n%swant:\n%s", n.Spec.Name, time.Since(start).Round(time.Second), what, got, before[n.Spec.Name])
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitDataplane polls until n holds exactly want, or fails after
// netnstest.Generous(timeout)
// showing both.
func (c *testCluster) waitDataplane(n *node, timeout time.Duration, what string, want dataplane) {
	c.t.Helper()
	netnstest.WaitFor(c.t, timeout, "node "+n.Spec.Name+": "+what, func() error {
		got, err := n.read()
		if err != nil {
			return err
		}
		if !equalDP(got, want) {
			return fmt.Errorf("dataplane not as expected\ngot:\n%swant:\n%s", got, want)
		}
		return nil
	})
}
