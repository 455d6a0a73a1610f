// Package cluster builds a simulated routelet cluster on one machine for the
// demo and the benchmarks: a "router" network namespace, "node" namespaces
// on an underlay behind it (on its bridge, or routed on a subnet of their
// own), routeletd running in each node with the file datastore, every node's
// record copied into every other node's nodes/ directory (as an operator
// would copy the file), and pods attached through the routelet plugin with
// libcni. Nothing outside the cluster's namespaces is touched. With
// PrivateWireGuardRun each routeletd also gets a mount namespace with a
// /var/run/wireguard of its own, and the userspace WireGuard datapaths the
// daemons leave running are ended at Close.
//
// Nodes may sit on several subnets (NodeSpec.Bridge, NodeSpec.Routed), the
// router forwarding between them; StartBird runs BIRD 2 in the router (or
// any of the cluster's namespaces) as the fabric's BGP router, so that pod
// traffic between subnets flows only where BGP told the router the blocks
// are.
//
// Everything a cluster makes is named with the caller's prefix (use
// netnstest.OwnedPrefix), and daemons get SIGKILL when the creating process
// dies; RemoveStale kills daemons and removes namespaces that crashed runs
// left behind.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/birdtest"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// NodeSpec describes one node. Host addresses carry their prefix length;
// the router answers at Gw4/Gw6 on the node's subnet.
type NodeSpec struct {
	Name           string
	Host4, Host6   string // e.g. "10.0.1.10/24", "fd00:1::10/64"; Host6 may be empty
	Gw4, Gw6       string // the router's address on the node's subnet
	Block4, Block6 string // --pod-cidr values; either may be empty (a datastore such as etcd then gives the blocks)
	// Routed puts the node on a subnet of its own behind the router (the
	// router's port carries Gw4/Gw6); otherwise the node is on a bridge
	// of the router's, which carries Gw4/Gw6.
	Routed bool
	// Bridge names the router's bridge an unrouted node is on, one per
	// underlay subnet; "" is DefaultBridge. A bridge is made with its
	// first node, whose Gw4/Gw6 it carries; the router forwards between
	// the bridges (and the routed ports), and each node's default routes
	// go through it, so traffic between subnets goes only where the
	// router has routes (BIRD's, StartBird).
	Bridge string
	// DaemonArgs are routeletd flags for this node only, after
	// Options.DaemonArgs (or Restart's).
	DaemonArgs []string
}

// DefaultBridge is the router's bridge New makes; unrouted nodes without a
// NodeSpec.Bridge are on it.
const DefaultBridge = "br0"

// Options configure a cluster.
type Options struct {
	Prefix    string     // namespace name prefix, e.g. netnstest.OwnedPrefix("routelet-demo-")
	PluginDir string     // holds the routelet plugin
	Daemon    string     // path of the routeletd binary
	WorkDir   string     // state dirs, libcni caches and daemon logs go here
	Nodes     []NodeSpec // in order
	// DaemonArgs are extra routeletd flags (e.g. "--encapsulation=vxlan").
	DaemonArgs []string
	// SharedRecords: the datastore shares the node records (etcd), so
	// Start copies none between the nodes' nodes/ directories.
	SharedRecords bool
	// PrivateWireGuardRun runs each node's routeletd in a mount namespace
	// of its own with the node's WireGuardRunDir bind-mounted on
	// /var/run/wireguard (netnstest.StartWithRunDir): wireguard-go's UAPI
	// sockets and wgctrl's userspace backend use that path whatever the
	// network namespace, so nodes with userspace WireGuard devices of the
	// same name would otherwise configure each other's. A restarted
	// routeletd gets the same directory and finds its datapath's socket.
	PrivateWireGuardRun bool
	CNIVersion          string // default "1.1.0"
}

// Cluster is a running simulated cluster. Close removes all of it.
type Cluster struct {
	opts   Options
	Router ns.NetNS
	Nodes  []*Node
	hosts  []*Node // AddHost's
	// gateways holds the bridges that carry their gateway addresses
	// (their first node's Gw4/Gw6).
	gateways map[string]bool
	bridges  int              // made so far: the next one's MAC ends in bridges+1
	birds    []*birdtest.Bird // StartBird's, stopped at Close
	birdDirs []string         // their files' directories, removed at Close
}

// Node is one simulated host.
type Node struct {
	Spec     NodeSpec
	CNI      *netnstest.Node
	StateDir string
	Store    *state.Store
	Conf     *libcni.NetworkConfigList
	LogPath  string // routeletd's log
	// WireGuardRunDir is the directory this node's routeletd (and the
	// WireGuard datapath it starts) sees as /var/run/wireguard; "" unless
	// Options.PrivateWireGuardRun.
	WireGuardRunDir string
	Pods            []*Pod
	daemon          *netnstest.Proc // nil until started
}

// Pod is a workload attached through the plugin.
type Pod struct {
	Name      string
	NS        ns.NetNS
	RT        *libcni.RuntimeConf
	HostIface string
	IPv4      netip.Addr
	IPv6      netip.Addr
	attached  bool
}

// New builds the router and the nodes' namespaces, uplinks, addresses and
// default routes. Nothing of routelet runs yet. On error everything made so
// far is removed.
func New(opts Options) (c *Cluster, err error) {
	if opts.CNIVersion == "" {
		opts.CNIVersion = "1.1.0"
	}
	c = &Cluster{opts: opts, gateways: map[string]bool{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
			c = nil
		}
	}()
	if c.Router, err = netnstest.NewNamed(opts.Prefix + "router"); err != nil {
		return c, err
	}
	for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if _, err := netnstest.Sysctl(c.Router, k, "1"); err != nil {
			return c, err
		}
	}
	if err := noDAD(c.Router); err != nil {
		return c, err
	}
	rnl, err := handleIn(c.Router)
	if err != nil {
		return c, err
	}
	defer rnl.Close()
	if _, err := c.bridge(rnl, DefaultBridge); err != nil {
		return c, err
	}
	for _, sp := range opts.Nodes {
		nd, err := c.addNode(sp)
		if nd != nil {
			c.Nodes = append(c.Nodes, nd)
		}
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// bridge returns the router's bridge called name, making it when there is
// none yet.
func (c *Cluster) bridge(rnl *netlink.Handle, name string) (netlink.Link, error) {
	if br, err := rnl.LinkByName(name); err == nil {
		return br, nil
	}
	if err := rnl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		return nil, fmt.Errorf("router bridge %s: %w", name, err)
	}
	br, err := up(rnl, name)
	if err != nil {
		return nil, err
	}
	// A bridge takes the lowest MAC of its ports unless it has one of its
	// own: a node added later (AddNode) would change it under the nodes'
	// neighbour entries for the gateway, and their traffic would be lost
	// until those expire. Each bridge gets its own, br0 ending in 01.
	c.bridges++
	if err := rnl.LinkSetHardwareAddr(br, net.HardwareAddr{0x02, 0, 0, 0, 0, byte(c.bridges)}); err != nil {
		return nil, fmt.Errorf("router bridge %s MAC: %w", name, err)
	}
	return br, nil
}

// AddNode adds a node (namespace, uplink, state directory) to a running
// cluster; StartDaemon runs its routeletd.
func (c *Cluster) AddNode(s NodeSpec) (*Node, error) {
	nd, err := c.addNode(s)
	if nd != nil {
		c.Nodes = append(c.Nodes, nd)
	}
	return nd, err
}

// AddHost adds a host on the underlay that runs no routeletd (e.g. etcd);
// its namespace is nd.CNI.NS. It is removed with the cluster.
func (c *Cluster) AddHost(s NodeSpec) (*Node, error) {
	nd, err := c.addNode(s)
	if nd != nil {
		c.hosts = append(c.hosts, nd)
	}
	return nd, err
}

// addNode builds one node's namespace, uplink and state directory. A
// non-nil node is returned whenever it holds something to remove.
func (c *Cluster) addNode(s NodeSpec) (*Node, error) {
	rnl, err := handleIn(c.Router)
	if err != nil {
		return nil, err
	}
	defer rnl.Close()
	brName := s.Bridge
	if brName == "" {
		brName = DefaultBridge
	}
	var br netlink.Link
	if !s.Routed {
		if br, err = c.bridge(rnl, brName); err != nil {
			return nil, err
		}
	}
	rfd, err := netns.GetFromPath(c.Router.Path())
	if err != nil {
		return nil, err
	}
	defer rfd.Close()
	opts := c.opts
	nd := &Node{Spec: s, StateDir: filepath.Join(opts.WorkDir, s.Name, "state"), LogPath: filepath.Join(opts.WorkDir, s.Name, "routeletd.log")}
	if opts.PrivateWireGuardRun {
		nd.WireGuardRunDir = filepath.Join(opts.WorkDir, s.Name, "run-wireguard")
	}
	if nd.CNI, err = netnstest.NewNode(opts.Prefix+"node-"+s.Name, []string{opts.PluginDir}, filepath.Join(opts.WorkDir, s.Name, "cache")); err != nil {
		return nil, err
	}
	if err := noDAD(nd.CNI.NS); err != nil {
		return nd, err
	}
	nl, err := handleIn(nd.CNI.NS)
	if err != nil {
		return nd, err
	}
	err = setupUplink(nl, rnl, rfd, br, s, !s.Routed && !c.gateways[brName])
	nl.Close()
	if err != nil {
		return nd, fmt.Errorf("node %s underlay: %w", s.Name, err)
	}
	if !s.Routed {
		c.gateways[brName] = true
	}
	if nd.Store, err = state.Open(nd.StateDir); err != nil {
		return nd, err
	}
	// No ipam.blocks and no mtu: the plugin takes both from routeletd's
	// daemon.json, as on a real node.
	if nd.Conf, err = (netnstest.RouteletConf{Name: "routelet", CNIVersion: opts.CNIVersion, StateDir: nd.StateDir}).ConfList(); err != nil {
		return nd, err
	}
	return nd, nil
}

// setupUplink creates the node's eth0 with its peer in the router, adds the
// addresses and default routes; first says whether the bridge still needs
// the gateway addresses.
func setupUplink(nl, rnl *netlink.Handle, rfd netns.NsHandle, br netlink.Link, s NodeSpec, first bool) error {
	port := "to-" + s.Name
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: port, PeerNamespace: netlink.NsFd(rfd)}); err != nil {
		return fmt.Errorf("uplink: %w", err)
	}
	eth0, err := up(nl, "eth0")
	if err != nil {
		return err
	}
	rport, err := up(rnl, port)
	if err != nil {
		return err
	}
	gwLink := br
	if s.Routed {
		gwLink = rport
	} else if err := rnl.LinkSetMaster(rport, br); err != nil {
		return fmt.Errorf("bridge port %s: %w", port, err)
	}
	for _, pair := range [][2]string{{s.Host4, s.Gw4}, {s.Host6, s.Gw6}} {
		host, gw := pair[0], pair[1]
		if host == "" {
			continue
		}
		if err := addAddr(nl, eth0, host); err != nil {
			return err
		}
		pfx := netip.MustParsePrefix(host)
		if s.Routed || first {
			if err := addAddr(rnl, gwLink, fmt.Sprintf("%s/%d", gw, pfx.Bits())); err != nil && !errors.Is(err, unix.EEXIST) {
				return err
			}
		}
		if err := nl.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP(gw)}); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

// noDAD turns off IPv6 duplicate address detection for links made in n from
// now on, so no address is tentative (and the underlay drops nothing) in
// the first second.
func noDAD(n ns.NetNS) error {
	for _, k := range []string{"net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad"} {
		if _, err := netnstest.Sysctl(n, k, "0"); err != nil {
			return err
		}
	}
	return nil
}

func handleIn(n ns.NetNS) (*netlink.Handle, error) {
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return netlink.NewHandleAt(h)
}

func up(nl *netlink.Handle, name string) (netlink.Link, error) {
	l, err := nl.LinkByName(name)
	if err != nil {
		return nil, err
	}
	if err := nl.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("set %s up: %w", name, err)
	}
	return l, nil
}

func addAddr(nl *netlink.Handle, l netlink.Link, cidr string) error {
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	if a.IP.To4() == nil {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := nl.AddrAdd(l, a); err != nil {
		return fmt.Errorf("add %s to %s: %w", cidr, l.Attrs().Name, err)
	}
	return nil
}

// Start runs routeletd in every node, waits until each reports ready in its
// daemon.json, then copies every node's record into every other node's
// nodes/ directory.
func (c *Cluster) Start(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.startDaemon(n, c.opts.DaemonArgs); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := n.WaitReady(ctx, netnstest.ReadyTimeout); err != nil {
			return err
		}
	}
	if c.opts.SharedRecords {
		return nil
	}
	for _, src := range c.Nodes {
		for _, dst := range c.Nodes {
			if src != dst {
				if err := CopyRecord(src, dst); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Restart stops n's routeletd and starts it again with extra flags in place
// of Options.DaemonArgs (e.g. another encapsulation), then waits until it is
// ready. Its log is appended to.
func (c *Cluster) Restart(ctx context.Context, n *Node, daemonArgs ...string) error {
	if err := n.Stop(); err != nil {
		return err
	}
	if err := c.startDaemon(n, daemonArgs); err != nil {
		return err
	}
	// daemon.json still says "stopped" until the new daemon's first sync.
	return n.WaitReady(ctx, netnstest.ReadyTimeout)
}

// SetDaemonArgs replaces Options.DaemonArgs for the daemons started from
// now on (e.g. flags that name a server started after New).
func (c *Cluster) SetDaemonArgs(args []string) { c.opts.DaemonArgs = append([]string(nil), args...) }

// StartDaemon runs n's routeletd with Options.DaemonArgs, not waiting for
// it to be ready (WaitReady does).
func (c *Cluster) StartDaemon(n *Node) error { return c.startDaemon(n, c.opts.DaemonArgs) }

func (c *Cluster) startDaemon(n *Node, daemonArgs []string) error {
	args := []string{"--node-name=" + n.Spec.Name, "--state-dir=" + n.StateDir}
	for _, b := range []string{n.Spec.Block4, n.Spec.Block6} {
		if b != "" {
			args = append(args, "--pod-cidr="+b)
		}
	}
	args = append(append(args, daemonArgs...), n.Spec.DaemonArgs...)
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own copy
	// StartIn's daemon dies with us, even when we are killed outright.
	var d *netnstest.Proc
	if n.WireGuardRunDir != "" {
		d, err = netnstest.StartWithRunDir(n.CNI.NS, logf, n.WireGuardRunDir, c.opts.Daemon, args...)
	} else {
		d, err = netnstest.StartIn(n.CNI.NS, logf, c.opts.Daemon, args...)
	}
	if err != nil {
		return fmt.Errorf("start routeletd on %s: %w", n.Spec.Name, err)
	}
	n.daemon = d
	return nil
}

// Stop sends SIGTERM to the node's routeletd and waits up to 10 s for it
// to exit (the dataplane stays, as on a real node).
func (n *Node) Stop() error {
	if n.daemon == nil {
		return nil
	}
	if err := n.daemon.Stop(10 * time.Second); errors.Is(err, netnstest.ErrStillRunning) {
		return fmt.Errorf("routeletd on %s did not stop within 10s of SIGTERM", n.Spec.Name)
	}
	return nil
}

// WaitReady polls daemon.json until it says ready, the daemon exits, or
// timeout passes.
func (n *Node) WaitReady(ctx context.Context, timeout time.Duration) error {
	return n.WaitReadySince(ctx, time.Time{}, timeout)
}

// LogTail returns the last lines of the node's routeletd log.
func (n *Node) LogTail(lines int) string {
	b, _ := os.ReadFile(n.LogPath)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// CopyRecord copies src's own node record into dst's nodes/ directory.
func CopyRecord(src, dst *Node) error {
	name := src.Spec.Name + ".json"
	b, err := os.ReadFile(filepath.Join(src.Store.NodesDir(), name))
	if err != nil {
		return fmt.Errorf("copy node record: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dst.Store.NodesDir(), name), b, 0o600); err != nil {
		return fmt.Errorf("copy node record: %w", err)
	}
	return nil
}

// AddPod creates a pod namespace and attaches it on n with CNI ADD.
func (c *Cluster) AddPod(ctx context.Context, n *Node, name string) (*Pod, error) {
	pns, err := netnstest.NewNamed(c.opts.Prefix + "pod-" + name)
	if err != nil {
		return nil, err
	}
	p := &Pod{Name: name, NS: pns, RT: &libcni.RuntimeConf{ContainerID: name, NetNS: pns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "demo"}, {"K8S_POD_NAME", name}}}}
	n.Pods = append(n.Pods, p)
	raw, err := n.CNI.Add(ctx, n.Conf, p.RT)
	if err != nil {
		return nil, fmt.Errorf("ADD %s on %s: %w", name, n.Spec.Name, err)
	}
	p.attached = true
	res, err := types100.NewResultFromResult(raw)
	if err != nil {
		return nil, fmt.Errorf("ADD %s result: %w", name, err)
	}
	for _, ipc := range res.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		if a = a.Unmap(); a.Is4() {
			p.IPv4 = a
		} else {
			p.IPv6 = a
		}
	}
	for _, ifc := range res.Interfaces {
		if ifc.Sandbox == "" {
			p.HostIface = ifc.Name
		}
	}
	return p, nil
}

// Ping sends one echo request from p to dst, with ping's flags before dst
// (e.g. "-M", "do", "-s", "1372"), and fails unless the reply arrives
// within a second (netnstest.Ping). It returns ping's output.
func (p *Pod) Ping(ctx context.Context, dst netip.Addr, flags ...string) (string, error) {
	return netnstest.Ping(ctx, p.NS, dst.String(), 1, flags...)
}

// DelPod runs CNI DEL for p on n, removes p's namespace and drops it from
// n.Pods.
func (c *Cluster) DelPod(ctx context.Context, n *Node, p *Pod) error {
	if p.attached {
		if err := n.CNI.Del(ctx, n.Conf, p.RT); err != nil {
			return fmt.Errorf("DEL %s: %w", p.Name, err)
		}
		p.attached = false
	}
	n.Pods = slices.DeleteFunc(n.Pods, func(q *Pod) bool { return q == p })
	return netnstest.Remove(p.NS)
}

// Detach runs CNI DEL for every attached pod.
func (c *Cluster) Detach(ctx context.Context) error {
	var errs []error
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			if !p.attached {
				continue
			}
			if err := n.CNI.Del(ctx, n.Conf, p.RT); err != nil {
				errs = append(errs, fmt.Errorf("DEL %s: %w", p.Name, err))
				continue
			}
			p.attached = false
		}
	}
	return errors.Join(errs...)
}

// Close detaches pods still attached, stops the daemons (SIGTERM, then
// SIGKILL after 5 s) and removes every namespace. It is safe on a partly
// built cluster and runs on its own context (the caller's may be cancelled).
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if c.Router != nil {
		errs = append(errs, c.Detach(ctx))
	}
	for _, n := range c.Nodes {
		if n.daemon == nil {
			continue
		}
		n.daemon.StopOrKill(5 * time.Second)
	}
	errs = append(errs, c.stopBirds())
	// The WireGuard datapaths outlive their daemon by design (a restarted
	// routeletd adopts them); nothing else ends them.
	for _, n := range c.Nodes {
		errs = append(errs, n.StopDatapaths())
	}
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			errs = append(errs, netnstest.Remove(p.NS))
		}
		errs = append(errs, n.CNI.Close())
	}
	for _, h := range c.hosts {
		errs = append(errs, h.CNI.Close())
	}
	errs = append(errs, netnstest.Remove(c.Router))
	return errors.Join(errs...)
}

// RemoveStale kills processes still running in namespaces of crashed runs
// (prefix<pid>-…, pid gone; see netnstest.OwnedPrefix) and removes those
// namespaces, and the BIRD directories (StartBird) of crashed runs. It
// returns the namespace names removed.
func RemoveStale(prefix string) ([]string, error) {
	entries, err := os.ReadDir(netnstest.RunDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	stale := map[uint64]bool{}
	for _, e := range entries {
		if !netnstest.StaleOwner(prefix, e.Name()) {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(netnstest.RunDir, e.Name()), &st) == nil {
			stale[st.Ino] = true
		}
	}
	if len(stale) > 0 {
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			pid := 0
			if _, err := fmt.Sscanf(p.Name(), "%d", &pid); err != nil || pid <= 1 || pid == os.Getpid() {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(filepath.Join("/proc", p.Name(), "ns", "net"), &st) == nil && stale[st.Ino] {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	removed, err := netnstest.RemoveStale(prefix)
	return removed, errors.Join(err, removeStaleBirdDirs())
}
