// Command demo shows routelet end to end on one machine without touching its
// network: three network namespaces stand in for nodes — a and b on one
// underlay subnet, c behind a router namespace on another — each running
// routeletd with the file datastore; every node's record is copied into the
// others' nodes/ directories, as an operator would. Two pods per node are
// attached through libcni (the library containerd uses) running the routelet
// plugin. The demo prints what was built, pings every pod on every other
// node over IPv4 and IPv6 through VXLAN, copies data over TCP from a pod on
// a to a pod on c, then detaches the pods, stops the daemons and removes
// everything it made — also on failure and on Ctrl-C/SIGTERM. Everything it
// makes is named after its PID (namespaces routelet-demo-<pid>-*, state in
// /run/routelet-demo/<pid>), so demos running at the same time keep apart;
// namespaces and daemons of crashed runs (whose PID is gone) are removed at
// start, and the daemons die with the demo even when it is killed outright.
//
// Run as root: make demo (or go run ./demo after make build).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/routes"
)

const (
	demoPrefix = "routelet-demo-"     // every namespace a demo makes, then its PID
	workRoot   = "/run/routelet-demo" // per-PID state dirs, caches and logs
	version    = "1.1.0"              // CNI spec version the demo speaks
	// transferBytes is how much the TCP transfer copies per family.
	transferBytes = 64 << 20
)

var (
	nsPrefix = netnstest.OwnedPrefix(demoPrefix)                  // this run's namespaces
	workDir  = filepath.Join(workRoot, strconv.Itoa(os.Getpid())) // this run's files
)

// nodes: a and b share 10.0.1.0/24 (the router's bridge), c sits behind the
// router on 10.0.2.0/24. The router forwards the underlay only; it knows no
// pod block, so every pod packet between nodes travels inside VXLAN.
var nodes = []cluster.NodeSpec{
	{Name: "a", Host4: "10.0.1.10/24", Host6: "fd00:1::10/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1", Block4: "10.244.1.0/24", Block6: "fd00:244:1::/120"},
	{Name: "b", Host4: "10.0.1.11/24", Host6: "fd00:1::11/64", Gw4: "10.0.1.1", Gw6: "fd00:1::1", Block4: "10.244.2.0/24", Block6: "fd00:244:2::/120"},
	{Name: "c", Host4: "10.0.2.10/24", Host6: "fd00:2::10/64", Gw4: "10.0.2.1", Gw6: "fd00:2::1", Block4: "10.244.3.0/24", Block6: "fd00:244:3::/120", Routed: true},
}

func main() {
	binDir := flag.String("plugin-dir", "bin", "directory holding the routelet plugin and routeletd (built into a temporary dir when missing)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A closed stdout (demo | head) must not kill the demo before it cleans up.
	signal.Ignore(syscall.SIGPIPE)
	err := run(ctx, os.Stdout, *binDir)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "demo interrupted:", err)
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, binDir string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces and veths (try: sudo make demo)")
	}
	if _, err := exec.LookPath("ping"); err != nil {
		return errors.New("ping not found: install iputils-ping")
	}
	if removed, err := cleanLeftovers(); err != nil {
		return err
	} else if len(removed) > 0 {
		fmt.Fprintf(w, "removed leftovers of an earlier run: %s\n", strings.Join(removed, ", "))
	}
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return err
	}
	var c *cluster.Cluster
	defer func() {
		err = errors.Join(err, cleanup(c))
		if err == nil {
			fmt.Fprintln(w, "cleaned up: pods detached (CNI DEL), daemons stopped, namespaces and state removed")
		}
	}()
	pluginDir, daemon, err := binaries(ctx, w, binDir)
	if err != nil {
		return err
	}

	start := time.Now()
	c, err = cluster.New(cluster.Options{Prefix: nsPrefix, PluginDir: pluginDir, Daemon: daemon, WorkDir: workDir,
		Nodes: nodes, CNIVersion: version, DaemonArgs: []string{"--encapsulation=vxlan", "--health-addr="}})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "routelet demo: 3 nodes (namespaces %snode-{a,b,c}), routeletd in each, VXLAN overlay, CNI %s\n", nsPrefix, version)
	if err := c.Start(ctx); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		for i := range 2 {
			if _, err := c.AddPod(ctx, n, fmt.Sprintf("%s-pod%d", n.Spec.Name, i)); err != nil {
				return err
			}
		}
	}
	for _, n := range c.Nodes {
		if err := describe(w, n); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "built in %s\n", time.Since(start).Round(time.Millisecond))
	a := c.Nodes[0]
	rs, err := overlayRoutes(a)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "node a's routes to the other nodes' pods (proto 80):\n")
	for _, r := range rs {
		fmt.Fprintln(w, "  "+r)
	}

	ok, total, failed := pingAll(ctx, w, c)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	from, to := a.Pods[0], c.Nodes[2].Pods[0]
	fmt.Fprintf(w, "TCP transfer %s (node a) → %s (node c), %d MiB per family, through vxlan.calico / vxlan-v6.calico:\n",
		from.Name, to.Name, transferBytes>>20)
	var rates []string
	for _, dst := range []netip.Addr{to.IPv4, to.IPv6} {
		rate, err := transfer(ctx, from.NS, to.NS, dst)
		if err != nil {
			return fmt.Errorf("TCP transfer to %s: %w", dst, err)
		}
		fmt.Fprintf(w, "  → %-16s %6.0f MB/s\n", dst, rate)
		rates = append(rates, fmt.Sprintf("%.0f MB/s", rate))
	}

	if err := c.Detach(ctx); err != nil {
		return err
	}
	left := 0
	for _, n := range c.Nodes {
		rs, err := podRoutes(n)
		if err != nil {
			return err
		}
		left += len(rs)
	}
	fmt.Fprintf(w, "summary: 3 nodes, 6 pods, %d/%d cross-node pings ok (IPv4 and IPv6), TCP a→c over VXLAN %s, DEL left %d pod routes\n",
		ok, total, strings.Join(rates, " (v4) / ")+" (v6)", left)
	if len(failed) > 0 {
		return fmt.Errorf("pods on different nodes not reachable (%d of %d pings ok): %s", ok, total, strings.Join(failed, "; "))
	}
	if left > 0 {
		return fmt.Errorf("DEL left %d pod routes behind", left)
	}
	return nil
}

// binaries returns the plugin directory and the routeletd path: binDir's when
// both are there, else built into the work dir.
func binaries(ctx context.Context, w io.Writer, binDir string) (pluginDir, daemon string, err error) {
	pluginDir, daemon = binDir, filepath.Join(binDir, "routeletd")
	built := filepath.Join(workDir, "bin")
	if _, err := os.Stat(filepath.Join(binDir, "routelet")); err != nil {
		pluginDir = built
		fmt.Fprintf(w, "building the plugin into %s …\n", built)
		if err := netnstest.BuildRoutelet(ctx, built); err != nil {
			return "", "", err
		}
	}
	if _, err := os.Stat(daemon); err != nil {
		daemon = filepath.Join(built, "routeletd")
		fmt.Fprintf(w, "building routeletd into %s …\n", built)
		if err := netnstest.BuildRouteletd(ctx, built); err != nil {
			return "", "", err
		}
	}
	return pluginDir, daemon, nil
}

// describe prints a node's underlay, overlay device and pods.
func describe(w io.Writer, n *cluster.Node) error {
	var dev string
	err := n.CNI.NS.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(overlay.DeviceVXLAN)
		if err != nil {
			return fmt.Errorf("node %s: %s: %w", n.Spec.Name, overlay.DeviceVXLAN, err)
		}
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
		var as []string
		for _, a := range addrs {
			as = append(as, a.IPNet.String())
		}
		dev = fmt.Sprintf("%s %s mtu %d mac %s", overlay.DeviceVXLAN, strings.Join(as, " "), l.Attrs().MTU, l.Attrs().HardwareAddr)
		return nil
	})
	if err != nil {
		return err
	}
	where := "bridged"
	if n.Spec.Routed {
		where = "behind the router"
	}
	fmt.Fprintf(w, "node %s: eth0 %s %s (%s), %s\n", n.Spec.Name, n.Spec.Host4, n.Spec.Host6, where, dev)
	for _, p := range n.Pods {
		fmt.Fprintf(w, "  %-8s eth0 %-12s %-18s host veth %s\n", p.Name, p.IPv4, p.IPv6, p.HostIface)
	}
	return nil
}

// pingAll pings every pod on every other node from every pod, over IPv4 and
// IPv6, one source pod at a time (its pings in parallel).
func pingAll(ctx context.Context, w io.Writer, c *cluster.Cluster) (ok, total int, failed []string) {
	fmt.Fprintln(w, "pod → pods on the other nodes:")
	for _, src := range c.Nodes {
		for _, from := range src.Pods {
			var mu sync.Mutex
			var wg sync.WaitGroup
			good := map[bool]int{}
			n := map[bool]int{}
			var rtts []string
			for _, dst := range c.Nodes {
				if dst == src {
					continue
				}
				for _, to := range dst.Pods {
					for _, ip := range []netip.Addr{to.IPv4, to.IPv6} {
						wg.Add(1)
						go func() {
							defer wg.Done()
							out, err := netnstest.Ping(ctx, from.NS, ip.String(), 1)
							mu.Lock()
							defer mu.Unlock()
							n[ip.Is6()]++
							if err != nil {
								failed = append(failed, fmt.Sprintf("%s → %s %s", from.Name, to.Name, ip))
								return
							}
							good[ip.Is6()]++
							if m := rttRE.FindStringSubmatch(out); m != nil && len(rtts) < 1 {
								rtts = append(rtts, m[1])
							}
						}()
					}
				}
			}
			wg.Wait()
			ok += good[false] + good[true]
			total += n[false] + n[true]
			fmt.Fprintf(w, "  %-8s IPv4 %d/%d ok, IPv6 %d/%d ok  (e.g. %s)\n", from.Name, good[false], n[false], good[true], n[true], strings.Join(rtts, ""))
		}
	}
	slices.Sort(failed)
	return ok, total, failed
}

var rttRE = regexp.MustCompile(`time=([0-9.]+ ms)`)

// transfer copies transferBytes over TCP from a socket opened in src to a
// listener opened in dst (each socket lives in the namespace it was created
// in) and returns the receiver's rate in MB/s.
func transfer(ctx context.Context, src, dst ns.NetNS, ip netip.Addr) (float64, error) {
	var l net.Listener
	if err := dst.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
		return err
	}); err != nil {
		return 0, err
	}
	defer l.Close()
	type result struct {
		n   int64
		d   time.Duration
		err error
	}
	got := make(chan result, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer conn.Close()
		start := time.Now()
		n, err := io.Copy(io.Discard, conn)
		got <- result{n, time.Since(start), err}
	}()
	var conn net.Conn
	if err := src.Do(func(ns.NetNS) error {
		var err error
		conn, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp", l.Addr().String())
		return err
	}); err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, 256<<10)
	for sent := 0; sent < transferBytes; sent += len(buf) {
		if _, err := conn.Write(buf); err != nil {
			conn.Close()
			return 0, err
		}
	}
	conn.Close()
	select {
	case r := <-got:
		if r.err != nil {
			return 0, r.err
		}
		if r.n != transferBytes {
			return 0, fmt.Errorf("received %d of %d bytes", r.n, transferBytes)
		}
		return float64(r.n) / r.d.Seconds() / 1e6, nil
	case <-time.After(30 * time.Second):
		return 0, errors.New("receiver did not finish within 30s")
	}
}

// cleanLeftovers kills daemons in and removes namespaces of earlier runs
// whose process is gone, and their work dirs.
func cleanLeftovers() ([]string, error) {
	removed, err := cluster.RemoveStale(demoPrefix)
	entries, _ := os.ReadDir(workRoot)
	for _, e := range entries {
		if netnstest.StaleOwner("", e.Name()) {
			p := filepath.Join(workRoot, e.Name())
			err = errors.Join(err, os.RemoveAll(p))
			removed = append(removed, p)
		}
	}
	return removed, err
}

// cleanup detaches pods still attached, stops the daemons, removes the
// namespaces and the work dir.
func cleanup(c *cluster.Cluster) error {
	var errs []error
	if c != nil {
		errs = append(errs, c.Close())
	}
	errs = append(errs, os.RemoveAll(workDir))
	if err := os.Remove(workRoot); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		errs = append(errs, err) // another demo may still use it
	}
	return errors.Join(errs...)
}

// overlayRoutes lists a node's proto-80 routes towards other nodes' blocks
// (through a gateway), as `ip route` prints them.
func overlayRoutes(n *cluster.Node) ([]string, error) {
	return listRoutes(n, func(r netlink.Route) bool { return r.Gw != nil })
}

// podRoutes lists a node's proto-80 routes to its own pods (cali* devices).
func podRoutes(n *cluster.Node) ([]string, error) {
	return listRoutes(n, func(r netlink.Route) bool { return r.Gw == nil && r.LinkIndex != 0 && r.Type == 1 })
}

func listRoutes(n *cluster.Node, keep func(netlink.Route) bool) ([]string, error) {
	var out []string
	err := n.CNI.NS.Do(func(ns.NetNS) error {
		rs, err := nlutil.Retry(func() ([]netlink.Route, error) {
			return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: routes.DefaultProtocol}, netlink.RT_FILTER_PROTOCOL)
		})
		if err != nil {
			return fmt.Errorf("listing routes of node %s: %w", n.Spec.Name, err)
		}
		for _, r := range rs {
			if r.Dst == nil || !keep(r) {
				continue
			}
			dev := fmt.Sprint(r.LinkIndex)
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			s := r.Dst.String()
			if r.Gw != nil {
				s += " via " + r.Gw.String()
			}
			s += " dev " + dev
			if r.Flags&int(netlink.FLAG_ONLINK) != 0 {
				s += " onlink"
			}
			if r.MTU > 0 {
				s += fmt.Sprintf(" mtu %d", r.MTU)
			}
			out = append(out, s)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}
