// Command demo shows routelet end to end on one machine without touching its
// network: a network namespace stands in for a node, two more for pods. Both
// pods are attached through libcni (the library containerd uses) running the
// routelet plugin in the node namespace; the demo prints what was built and
// pings pod↔pod over IPv4 and IPv6 through the node's host routes, then
// detaches the pods and removes everything it made — also on failure and on
// Ctrl-C/SIGTERM. Everything it makes is named after its PID (namespaces
// routelet-demo-<pid>-*, state in /run/routelet-demo/<pid>), so demos run at
// the same time keep apart, and leftovers of crashed runs (whose PID is gone)
// are removed at start.
//
// Run as root: make demo (or go run ./demo after make build).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

const (
	demoPrefix = "routelet-demo-"     // every namespace a demo makes, then its PID
	workRoot   = "/run/routelet-demo" // per-PID state dirs and libcni caches
	version    = "1.1.0"              // CNI spec version the demo speaks
)

var (
	nsPrefix = netnstest.OwnedPrefix(demoPrefix)                  // this run's namespaces
	workDir  = filepath.Join(workRoot, strconv.Itoa(os.Getpid())) // this run's files
)

// blocks are the demo's pod address blocks; they exist only inside the
// demo's namespaces.
var blocks = []string{"10.244.0.0/24", "fd00:244::/120"}

func main() {
	pluginDir := flag.String("plugin-dir", "bin", "directory holding the routelet plugin (built there when missing)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A closed stdout (demo | head) must not kill the demo before it cleans up.
	signal.Ignore(syscall.SIGPIPE)
	err := run(ctx, os.Stdout, *pluginDir)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "demo interrupted:", err)
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// pod is one demo pod: its namespace, how libcni addresses it, and what ADD gave it.
type pod struct {
	name      string
	ns        ns.NetNS
	rt        *libcni.RuntimeConf
	attached  bool
	hostIface string
	ips       []netip.Addr
}

func run(ctx context.Context, w io.Writer, pluginDir string) (err error) {
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
	var node *netnstest.Node
	pods := []*pod{{name: "pod-a"}, {name: "pod-b"}}
	defer func() {
		err = errors.Join(err, cleanup(node, pods))
		if err == nil {
			fmt.Fprintln(w, "cleaned up: pods detached (CNI DEL), namespaces and state removed")
		}
	}()
	if _, err := os.Stat(filepath.Join(pluginDir, "routelet")); err != nil {
		pluginDir = filepath.Join(workDir, "bin")
		fmt.Fprintf(w, "building the plugin into %s …\n", pluginDir)
		if err := netnstest.BuildRoutelet(ctx, pluginDir); err != nil {
			return err
		}
	}

	node, err = netnstest.NewNode(nsPrefix+"node", []string{pluginDir}, filepath.Join(workDir, "cache"))
	if err != nil {
		return err
	}
	list, err := netnstest.RouteletConf{Name: "routelet-demo", CNIVersion: version,
		StateDir: filepath.Join(workDir, "state"), MTU: 1450, Blocks: blocks}.ConfList()
	if err != nil {
		return err
	}

	fmt.Fprintf(w, "routelet demo: node namespace %snode, pods attached through libcni (CNI %s), blocks %s\n",
		nsPrefix, version, strings.Join(blocks, " "))
	for _, p := range pods {
		if p.ns, err = netnstest.NewNamed(nsPrefix + p.name); err != nil {
			return err
		}
		p.rt = &libcni.RuntimeConf{
			ContainerID: "demo-" + p.name,
			NetNS:       p.ns.Path(),
			IfName:      "eth0",
			Args:        [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "demo"}, {"K8S_POD_NAME", p.name}},
		}
		start := time.Now()
		raw, err := node.Add(ctx, list, p.rt)
		if err != nil {
			return fmt.Errorf("ADD %s: %w", p.name, err)
		}
		p.attached = true
		took := time.Since(start)
		res, err := types100.NewResultFromResult(raw)
		if err != nil {
			return fmt.Errorf("ADD %s result: %w", p.name, err)
		}
		var addrs []string
		for _, ipc := range res.IPs {
			a, _ := netip.AddrFromSlice(ipc.Address.IP)
			p.ips = append(p.ips, a.Unmap())
			addrs = append(addrs, ipc.Address.String())
		}
		for _, ifc := range res.Interfaces {
			if ifc.Sandbox == "" {
				p.hostIface = ifc.Name
			}
		}
		fmt.Fprintf(w, "  %-6s eth0 %-32s host veth %s  (ADD %s)\n",
			p.name, strings.Join(addrs, " "), p.hostIface, took.Round(100*time.Microsecond))
	}

	routes, err := hostRoutes(node)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "host routes in the node (proto 80):")
	for _, r := range routes {
		fmt.Fprintln(w, "  "+r)
	}

	fmt.Fprintln(w, "pod ↔ pod through the node:")
	ok, total := 0, 0
	var failed []string
	for _, v6 := range []bool{false, true} {
		for i, from := range pods {
			to := pods[1-i]
			dst := pick(to.ips, v6)
			if !dst.IsValid() {
				continue
			}
			total++
			out, err := netnstest.Ping(ctx, from.ns, dst.String(), 1)
			if err != nil {
				fmt.Fprintf(w, "  %s → %s %-14s FAILED\n%s", from.name, to.name, dst, indent(out))
				failed = append(failed, fmt.Sprintf("%s → %s %s", from.name, to.name, dst))
				continue
			}
			ok++
			fmt.Fprintf(w, "  %s → %s %-14s ok  %s\n", from.name, to.name, dst, rtt(out))
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	for _, p := range pods {
		if err := node.Del(ctx, list, p.rt); err != nil {
			return fmt.Errorf("DEL %s: %w", p.name, err)
		}
		p.attached = false
	}
	left, err := hostRoutes(node)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "summary: 2 pods attached, %d/%d pings ok, DEL left %d host routes\n", ok, total, len(left))
	if len(failed) > 0 || total < 4 {
		return fmt.Errorf("pod ↔ pod not reachable (%d of 4 expected pings ok): %s", ok, strings.Join(failed, "; "))
	}
	if len(left) > 0 {
		return fmt.Errorf("DEL left host routes behind: %s", strings.Join(left, "; "))
	}
	return nil
}

// cleanLeftovers removes namespaces and work dirs of earlier runs whose
// process is gone.
func cleanLeftovers() ([]string, error) {
	removed, err := netnstest.RemoveStale(demoPrefix)
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

// cleanup detaches pods still attached (so the plugin releases what it
// holds), then removes the pod and node namespaces and the work dir. It runs
// on a fresh context: the demo's own may already be cancelled by a signal.
func cleanup(node *netnstest.Node, pods []*pod) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	list, _ := netnstest.RouteletConf{Name: "routelet-demo", CNIVersion: version,
		StateDir: filepath.Join(workDir, "state"), MTU: 1450, Blocks: blocks}.ConfList()
	for _, p := range pods {
		if p.attached && node != nil && list != nil {
			if err := node.Del(ctx, list, p.rt); err != nil {
				errs = append(errs, fmt.Errorf("DEL %s: %w", p.name, err))
			}
		}
		errs = append(errs, netnstest.Remove(p.ns))
	}
	if node != nil {
		errs = append(errs, node.Close())
	}
	errs = append(errs, os.RemoveAll(workDir))
	if err := os.Remove(workRoot); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		errs = append(errs, err) // another demo may still use it
	}
	return errors.Join(errs...)
}

// hostRoutes lists the node's routes with protocol 80 as `ip route` prints them.
func hostRoutes(node *netnstest.Node) ([]string, error) {
	var out []string
	err := node.NS.Do(func(ns.NetNS) error {
		var routes []netlink.Route
		var err error
		for range 5 {
			routes, err = netlink.RouteListFiltered(netlink.FAMILY_ALL,
				&netlink.Route{Protocol: 80}, netlink.RT_FILTER_PROTOCOL)
			if !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("listing node routes: %w", err)
		}
		for _, r := range routes {
			dev := fmt.Sprint(r.LinkIndex)
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			dst := "default"
			if r.Dst != nil {
				dst = r.Dst.String()
			}
			out = append(out, fmt.Sprintf("%s dev %s scope %s", dst, dev, r.Scope))
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

func pick(ips []netip.Addr, v6 bool) netip.Addr {
	for _, ip := range ips {
		if ip.Is6() == v6 {
			return ip
		}
	}
	return netip.Addr{}
}

var rttRE = regexp.MustCompile(`time=([0-9.]+ ms)`)

// rtt extracts the round-trip time from ping's output.
func rtt(out string) string {
	if m := rttRE.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// indent prefixes every line of s with four spaces.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
