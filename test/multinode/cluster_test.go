package multinode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// mnPrefix starts the name of every namespace these tests create; nsPrefix
// adds this process's PID, so crashed runs' leftovers can be found.
const mnPrefix = "routelet-mn-"

var nsPrefix = netnstest.OwnedPrefix(mnPrefix)

// routeProto is the protocol routelet stamps on its routes (DESIGN.md).
const routeProto = 80

// binDir holds routeletd and the plugin, built by TestMain; buildErr says
// why that failed.
var (
	binDir   string
	buildErr error
)

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() != 0 {
			return m.Run() // every test skips
		}
		if _, err := netnstest.RemoveStale(mnPrefix); err != nil {
			fmt.Fprintln(os.Stderr, "multinode:", err)
		}
		dir, err := os.MkdirTemp("", "routelet-mn-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "multinode:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		buildErr = netnstest.BuildRoutelet(ctx, dir)
		if buildErr == nil {
			root, err := netnstest.ModuleRoot()
			if err != nil {
				buildErr = err
			} else {
				cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "routeletd"), "./daemon")
				cmd.Dir = root
				if out, err := cmd.CombinedOutput(); err != nil {
					buildErr = fmt.Errorf("build routeletd: %w\n%s", err, out)
				}
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// requireRoot skips t without root and fails it when the binaries did not build.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veths and runs routeletd in them")
	}
	if buildErr != nil {
		t.Fatalf("building routeletd and the plugin: %v", buildErr)
	}
}

// nodeSpec is one node of the test underlay.
type nodeSpec struct {
	name           string
	host4, host6   string // underlay addresses with prefix length
	gw4, gw6       string // the router on the node's subnet
	block4, block6 string // pod CIDRs
	routerPort     string // the router side of the node's uplink
}

// specs: a and b share 10.0.1.0/24 (the router's bridge); c is on
// 10.0.2.0/24 behind the router. The router forwards the underlay only: it
// has no routes to any pod block.
var specs = []nodeSpec{
	{name: "a", host4: "10.0.1.10/24", host6: "fd00:1::10/64", gw4: "10.0.1.1", gw6: "fd00:1::1",
		block4: "10.244.1.0/24", block6: "fd00:244:1::/120", routerPort: "to-a"},
	{name: "b", host4: "10.0.1.11/24", host6: "fd00:1::11/64", gw4: "10.0.1.1", gw6: "fd00:1::1",
		block4: "10.244.2.0/24", block6: "fd00:244:2::/120", routerPort: "to-b"},
	{name: "c", host4: "10.0.2.10/24", host6: "fd00:2::10/64", gw4: "10.0.2.1", gw6: "fd00:2::1",
		block4: "10.244.3.0/24", block6: "fd00:244:3::/120", routerPort: "to-c"},
}

// node is one running node: its namespace, daemon, state and pods.
type node struct {
	spec     nodeSpec
	n        *netnstest.Node
	nl       *netlink.Handle
	stateDir string
	store    *state.Store
	conf     *libcni.NetworkConfigList
	d        *daemon
	pods     []*pod
}

// pod is a workload attached through the plugin.
type pod struct {
	name string
	ns   ns.NetNS
	rt   *libcni.RuntimeConf
	ip4  netip.Addr
	ip6  netip.Addr
}

// cluster is the whole test underlay.
type cluster struct {
	t      *testing.T
	router ns.NetNS
	nodes  []*node
	flags  []string // extra routeletd flags (the mode)
}

// handle returns a netlink handle inside n, closed at cleanup.
func handle(t *testing.T, n ns.NetNS) *netlink.Handle {
	t.Helper()
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	return nl
}

func mustAddr(t *testing.T, nl *netlink.Handle, link netlink.Link, cidr string) {
	t.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if a.IP.To4() == nil {
		a.Flags = unix.IFA_F_NODAD // no 1 s wait for duplicate address detection
	}
	if err := nl.AddrAdd(link, a); err != nil {
		t.Fatalf("add %s to %s: %v", cidr, link.Attrs().Name, err)
	}
}

// noDAD turns off IPv6 duplicate address detection for links created in n
// from now on: a tentative link-local address on the router delays its
// neighbour discovery by up to a second, which would drop the first packets
// of the underlay (not routelet's concern, and it would make pings flaky).
func noDAD(t *testing.T, n ns.NetNS) {
	t.Helper()
	for _, k := range []string{"net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad"} {
		if _, err := netnstest.Sysctl(n, k, "0"); err != nil {
			t.Fatal(err)
		}
	}
}

func mustUp(t *testing.T, nl *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := nl.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := nl.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return l
}

// newCluster builds the router and the three nodes (namespaces, uplinks,
// addresses, default routes); nothing of routelet runs yet.
func newCluster(t *testing.T, flags ...string) *cluster {
	t.Helper()
	requireRoot(t)
	c := &cluster{t: t, flags: flags}
	var err error
	if c.router, err = netnstest.New(nsPrefix + "router-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnstest.Remove(c.router) })
	for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if _, err := netnstest.Sysctl(c.router, k, "1"); err != nil {
			t.Fatal(err)
		}
	}
	noDAD(t, c.router)
	rnl := handle(t, c.router)
	if err := rnl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
		t.Fatal(err)
	}
	br := mustUp(t, rnl, "br0")
	mustAddr(t, rnl, br, "10.0.1.1/24")
	mustAddr(t, rnl, br, "fd00:1::1/64")
	rfd, err := netns.GetFromPath(c.router.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer rfd.Close()

	for _, s := range specs {
		nd := &node{spec: s, stateDir: filepath.Join(t.TempDir(), "state")}
		nd.n, err = netnstest.NewNode(nsPrefix+"node-"+s.name+"-"+randHex(), []string{binDir}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.n.Close() })
		nd.nl = handle(t, nd.n.NS)
		noDAD(t, nd.n.NS)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: s.routerPort, PeerNamespace: netlink.NsFd(rfd)}
		if err := nd.nl.LinkAdd(veth); err != nil {
			t.Fatalf("node %s uplink: %v", s.name, err)
		}
		eth0 := mustUp(t, nd.nl, "eth0")
		mustAddr(t, nd.nl, eth0, s.host4)
		mustAddr(t, nd.nl, eth0, s.host6)
		for _, gw := range []string{s.gw4, s.gw6} {
			if err := nd.nl.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
				t.Fatalf("node %s default route via %s: %v", s.name, gw, err)
			}
		}
		port := mustUp(t, rnl, s.routerPort)
		if s.gw4 == "10.0.1.1" {
			if err := rnl.LinkSetMaster(port, br); err != nil {
				t.Fatal(err)
			}
		} else {
			mustAddr(t, rnl, port, s.gw4+"/24")
			mustAddr(t, rnl, port, s.gw6+"/64")
		}
		if nd.store, err = state.Open(nd.stateDir); err != nil {
			t.Fatal(err)
		}
		// No ipam.blocks and no mtu: the plugin takes both from daemon.json.
		if nd.conf, err = (netnstest.RouteletConf{Name: "routelet", CNIVersion: "1.1.0", StateDir: nd.stateDir}).ConfList(); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, nd)
	}
	return c
}

func randHex() string { return fmt.Sprintf("%06x", time.Now().UnixNano()&0xffffff) }

// node returns the node called name.
func (c *cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.spec.name == name {
			return n
		}
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

// start runs routeletd on every node, waits until each is ready, copies
// every node record into every other node's nodes/ (as an operator would)
// and attaches two pods per node through the plugin.
func (c *cluster) start() {
	c.t.Helper()
	for _, n := range c.nodes {
		n.d = c.startDaemon(n)
	}
	for _, n := range c.nodes {
		c.waitReady(n)
	}
	for _, src := range c.nodes {
		for _, dst := range c.nodes {
			if src != dst {
				c.copyRecord(src, dst)
			}
		}
	}
	for _, n := range c.nodes {
		for i := range 2 {
			n.pods = append(n.pods, c.addPod(n, fmt.Sprintf("%s-pod%d", n.spec.name, i)))
		}
	}
}

// daemon is a routeletd process.
type daemon struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startDaemon runs routeletd inside n (ip netns exec) with the cluster's
// mode flags; it is killed at cleanup, and its log shown if the test failed.
func (c *cluster) startDaemon(n *node) *daemon {
	c.t.Helper()
	args := []string{"netns", "exec", netnstest.Name(n.n.NS), filepath.Join(binDir, "routeletd"),
		"--node-name=" + n.spec.name, "--state-dir=" + n.stateDir,
		"--pod-cidr=" + n.spec.block4, "--pod-cidr=" + n.spec.block6,
		"--log-level=debug", "--device-check-period=500ms", "--grace-period=1s"}
	args = append(args, c.flags...)
	d := &daemon{cmd: exec.Command("ip", args...), log: &syncBuffer{}, done: make(chan error, 1)}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t, name := c.t, n.spec.name
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		err := <-d.done
		d.done <- err
		if t.Failed() {
			t.Logf("routeletd %s log:\n%s", name, d.log.String())
		}
	})
	return d
}

// stop sends SIGTERM to the daemon and waits for it to exit.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("routeletd did not stop within 10s of SIGTERM")
	}
}

// waitReady waits until n's daemon.json says ready.
func (c *cluster) waitReady(n *node) {
	c.t.Helper()
	eventually(c.t, 15*time.Second, "routeletd "+n.spec.name+" ready", func() bool {
		st, err := n.store.ReadDaemonStatus()
		return err == nil && st.Ready
	})
}

// copyRecord copies src's own node record into dst's nodes/ directory.
func (c *cluster) copyRecord(src, dst *node) {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(src.store.NodesDir(), src.spec.name+".json"))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst.store.NodesDir(), src.spec.name+".json"), b, 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// addPod creates a pod namespace and attaches it with CNI ADD on n.
func (c *cluster) addPod(n *node, name string) *pod {
	c.t.Helper()
	pns, err := netnstest.New(nsPrefix + "pod-")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { netnstest.Remove(pns) })
	rt := &libcni.RuntimeConf{ContainerID: name, NetNS: pns.Path(), IfName: "eth0"}
	if _, err := n.n.Add(context.Background(), n.conf, rt); err != nil {
		c.t.Fatalf("CNI ADD %s on node %s: %v", name, n.spec.name, err)
	}
	w, err := n.store.GetWorkload(name, "eth0")
	if err != nil {
		c.t.Fatalf("record of %s: %v", name, err)
	}
	p := &pod{name: name, ns: pns, rt: rt}
	for _, s := range w.IPs {
		pfx := netip.MustParsePrefix(s)
		if pfx.Addr().Is4() {
			p.ip4 = pfx.Addr()
		} else {
			p.ip6 = pfx.Addr()
		}
	}
	return p
}

// allPods returns every pod with the node it runs on.
func (c *cluster) allPods() []struct {
	n *node
	p *pod
} {
	var out []struct {
		n *node
		p *pod
	}
	for _, n := range c.nodes {
		for _, p := range n.pods {
			out = append(out, struct {
				n *node
				p *pod
			}{n, p})
		}
	}
	return out
}

// ping sends one echo request from p to dst (extra ping flags first) and
// reports whether a reply came back within a second.
func ping(p *pod, dst netip.Addr, extra ...string) (string, bool) {
	args := append([]string{"-n", "-c", "1", "-W", "1"}, extra...)
	args = append(args, dst.String())
	out, err := netnstest.Exec(context.Background(), p.ns, "ping", args...)
	return out, err == nil
}

// reachable lists "from → to" for every ordered pod pair and family whose
// ping result differs from want(from node, to node).
func (c *cluster) reachability(want func(from, to *node) bool) []string {
	var bad []string
	pods := c.allPods()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, from := range pods {
		for _, to := range pods {
			if from.p == to.p {
				continue
			}
			for _, dst := range []netip.Addr{to.p.ip4, to.p.ip6} {
				if !dst.IsValid() {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, ok := ping(from.p, dst)
					if exp := want(from.n, to.n); ok != exp {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%s → %s (%s): reached %v, want %v", from.p.name, to.p.name, dst, ok, exp))
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
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
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

// waitDataplane polls until n holds exactly want, or fails after timeout
// showing both.
func (c *cluster) waitDataplane(n *node, timeout time.Duration, what string, want dataplane) {
	c.t.Helper()
	var got dataplane
	var err error
	deadline := time.Now().Add(timeout)
	for {
		got, err = n.read()
		if err == nil && equalDP(got, want) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s: %s: dataplane not as expected after %s (err %v)\ngot:\n%swant:\n%s",
				n.spec.name, what, timeout, err, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
