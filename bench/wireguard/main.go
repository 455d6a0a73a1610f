// Command wireguard measures what routelet's WireGuard encryption costs
// over WireGuard itself. In one run it builds two simulated nodes on one
// underlay bridge (see internal/cluster) running routeletd with
// --encryption=wireguard --wireguard-implementation=userspace, one pod per
// node attached through the plugin, and the reference: bare WireGuard
// between the same two node namespaces (-reference nodes, the default; a
// device wg0 on port 51821 beside routelet's) or between two plain
// namespaces on the same bridge with no netfilter rule (-reference apart).
// The reference runs the same userspace datapath (`routeletd
// wireguard-datapath`, wireguard-go), configured with wgctrl, with a /32
// and a /128 tunnel address and a route to the other's. It then runs
// iperf3 (one TCP stream) pod to pod across routelet's nodes and between
// the reference's tunnel addresses, alternating, for IPv4 and IPv6.
//
// For every transfer it prints the rate and CPU seconds per GB received:
// of the two WireGuard datapath processes (utime+stime from
// /proc/<pid>/stat over the transfer), of those plus both iperf3
// processes (their rusage), and of the whole machine (busy time in
// /proc/stat). The summary gives the medians and routelet's ratios to the
// reference in the same run. Everything runs in network namespaces (each
// datapath with a /var/run/wireguard of its own, see
// netnstest.StartWithRunDir) and is removed at the end, also on Ctrl-C.
//
// Run as root: go run ./bench/wireguard (see docs/bench-wireguard.md).
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
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/bench/internal/benchkit"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/defaults"
)

const benchPrefix = "routelet-wgbench-"

var nsPrefix = netnstest.OwnedPrefix(benchPrefix)

// refDev is the reference's WireGuard device.
const refDev = "wg0"

// options are the command line.
type options struct {
	secs, rounds int
	binDir       string
	v6           []bool // families measured, in order: false IPv4, true IPv6
	// apart puts the reference in two namespaces of its own (ra, rb)
	// instead of routelet's node namespaces a and b.
	apart bool
}

func main() {
	var o options
	var fam string
	flag.IntVar(&o.secs, "t", 5, "seconds per iperf3 transfer")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every transfer once, reference and routelet alternating")
	flag.StringVar(&o.binDir, "plugin-dir", "bin", "directory holding the routelet plugin and routeletd (built into a temp dir when missing)")
	flag.StringVar(&fam, "family", "4,6", "families to measure, in order: 4, 6 or both")
	ref := flag.String("reference", "nodes", "where the bare WireGuard runs: nodes (in routelet's node namespaces a and b, on port 51821) or apart (in namespaces of its own, with no netfilter)")
	flag.Parse()
	switch *ref {
	case "nodes":
	case "apart":
		o.apart = true
	default:
		fmt.Fprintf(os.Stderr, "wireguard bench: -reference takes nodes or apart, not %q\n", *ref)
		os.Exit(2)
	}
	for _, f := range strings.Split(fam, ",") {
		if f != "4" && f != "6" {
			fmt.Fprintf(os.Stderr, "wireguard bench: -family takes 4 and 6, not %q\n", f)
			os.Exit(2)
		}
		o.v6 = append(o.v6, f == "6")
	}
	if o.secs < 1 || o.rounds < 1 {
		fmt.Fprintf(os.Stderr, "wireguard bench: -t %d and -rounds %d: want at least 1\n", o.secs, o.rounds)
		os.Exit(2)
	}
	benchkit.Run("wireguard bench", func(ctx context.Context) error { return run(ctx, os.Stdout, o) })
}

// The routelet nodes a and b, and the reference's ra and rb, all on the
// router's bridge.
var (
	specA = cluster.NodeSpec{Name: "a", Host4: "10.0.1.10/24", Gw4: "10.0.1.1", Block4: "10.244.1.0/24", Host6: "fd00:1::10/64", Gw6: "fd00:1::1", Block6: "fd00:244:1::/120"}
	specB = cluster.NodeSpec{Name: "b", Host4: "10.0.1.11/24", Gw4: "10.0.1.1", Block4: "10.244.2.0/24", Host6: "fd00:1::11/64", Gw6: "fd00:1::1", Block6: "fd00:244:2::/120"}
	refA  = refNode{name: "ra", host4: "10.0.1.20", host6: "fd00:1::20", tun4: "10.99.0.1", tun6: "fd00:99::1"}
	refB  = refNode{name: "rb", host4: "10.0.1.21", host6: "fd00:1::21", tun4: "10.99.0.2", tun6: "fd00:99::2"}
	// refPort is the reference's listen port in routelet's node
	// namespaces, next to routelet's own.
	refPort = defaults.WireGuardPort + 1
	family  = map[bool]string{false: "IPv4", true: "IPv6"}
)

func run(ctx context.Context, w io.Writer, o options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces")
	}
	for _, tool := range []string{"iperf3", "ip", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: install it (make deps)", tool)
		}
	}
	if _, err := cluster.RemoveStale(benchPrefix); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "routelet-wgbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	pluginDir, daemon, err := benchkit.Binaries(ctx, o.binDir, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	c, err := cluster.New(cluster.Options{Prefix: nsPrefix, PluginDir: pluginDir, Daemon: daemon, WorkDir: work,
		DaemonArgs:          []string{"--encryption=wireguard", "--wireguard-implementation=userspace", "--health-addr="},
		PrivateWireGuardRun: true, Nodes: []cluster.NodeSpec{specA, specB}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	if err := c.Start(ctx); err != nil {
		return err
	}
	na, nb := c.Nodes[0], c.Nodes[1]
	pa, err := c.AddPod(ctx, na, "bench-a")
	if err != nil {
		return err
	}
	pb, err := c.AddPod(ctx, nb, "bench-b")
	if err != nil {
		return err
	}
	mtu, err := benchkit.PodMTU(pa.NS)
	if err != nil {
		return err
	}
	var rlDatapaths []int
	for _, n := range c.Nodes {
		pids, err := n.DatapathPIDs()
		if err != nil {
			return err
		}
		if len(pids) != 1 {
			return fmt.Errorf("node %s runs %d WireGuard datapaths (%v), want one: is its device the userspace one?", n.Spec.Name, len(pids), pids)
		}
		rlDatapaths = append(rlDatapaths, pids[0])
	}
	for _, dst := range []netip.Addr{pb.IPv4, pb.IPv6} {
		if out, err := netnstest.Ping(ctx, pa.NS, dst.String(), 3); err != nil {
			return fmt.Errorf("routelet pod → %s: %w\n%s", dst, err, out)
		}
	}
	var ref *reference
	if o.apart {
		ref, err = buildReference(ctx, c.Router, nil, daemon, work, mtu)
	} else {
		ref, err = buildReference(ctx, c.Router, []*cluster.Node{na, nb}, daemon, work, mtu)
	}
	if err != nil {
		return errors.Join(err, ref.close())
	}
	defer func() { err = errors.Join(err, ref.close()) }()

	fmt.Fprintf(w, "wireguard bench: iperf3 -t %d, %d round(s), userspace WireGuard (routeletd wireguard-datapath) on both paths, MTU %d\n", o.secs, o.rounds, mtu)
	where := "namespaces of its own (ra, rb)"
	if !o.apart {
		where = fmt.Sprintf("routelet's node namespaces a and b, port %d", refPort)
	}
	fmt.Fprintf(w, "routelet pods %s → %s and %s → %s; reference %s → %s and %s → %s over %s, in %s\n",
		pa.IPv4, pb.IPv4, pa.IPv6, pb.IPv6, refA.tun4, refB.tun4, refA.tun6, refB.tun6, refDev, where)
	fmt.Fprintln(w, "CPU-s/GB: datapaths = both wireguard-datapath processes; +iperf3 = and both iperf3 processes; machine = busy time in /proc/stat")
	fmt.Fprintf(w, "load average at start: %s\n", benchkit.Loadavg())

	type result struct{ ref, rl []sample }
	results := map[bool]*result{}
	for r := range o.rounds {
		for _, v6 := range o.v6 {
			if results[v6] == nil {
				results[v6] = &result{}
			}
			dstRef, dstRL := refB.tun4, pb.IPv4.String()
			if v6 {
				dstRef, dstRL = refB.tun6, pb.IPv6.String()
			}
			runRef := func() (sample, error) {
				return transfer(ctx, netnstest.Name(ref.nodes[0]), netnstest.Name(ref.nodes[1]), dstRef, o.secs, ref.datapathPIDs())
			}
			runRL := func() (sample, error) {
				return transfer(ctx, netnstest.Name(pa.NS), netnstest.Name(pb.NS), dstRL, o.secs, rlDatapaths)
			}
			first, second := runRef, runRL
			if r%2 == 1 {
				first, second = runRL, runRef
			}
			s1, err := first()
			if err != nil {
				return fmt.Errorf("%s transfer: %w", family[v6], err)
			}
			s2, err := second()
			if err != nil {
				return fmt.Errorf("%s transfer: %w", family[v6], err)
			}
			sRef, sRL := s1, s2
			if r%2 == 1 {
				sRef, sRL = s2, s1
			}
			results[v6].ref = append(results[v6].ref, sRef)
			results[v6].rl = append(results[v6].rl, sRL)
			fmt.Fprintf(w, "  round %d %s  reference %s\n           routelet  %s\n", r+1, family[v6], sRef, sRL)
		}
	}
	fmt.Fprintf(w, "load average at end: %s\n", benchkit.Loadavg())
	fmt.Fprintf(w, "medians (%d round(s)); ratios = routelet / reference, the median of each round's pair (the two ran back to back):\n", o.rounds)
	for _, v6 := range o.v6 {
		rs := results[v6]
		var rate, dp, all []float64
		for i := range rs.ref {
			rate = append(rate, rs.rl[i].gbps/rs.ref[i].gbps)
			dp = append(dp, rs.rl[i].datapathPerGB/rs.ref[i].datapathPerGB)
			all = append(all, rs.rl[i].withIperfPerGB/rs.ref[i].withIperfPerGB)
		}
		fmt.Fprintf(w, "  %s  reference %s\n        routelet  %s\n        throughput ratio %.2f, datapath CPU/GB ratio %.2f, datapath+iperf3 CPU/GB ratio %.2f\n",
			family[v6], medianSample(rs.ref), medianSample(rs.rl), benchkit.Median(rate), benchkit.Median(dp), benchkit.Median(all))
	}
	return nil
}

// sample is one transfer: its rate and CPU time per GB received.
type sample struct {
	gbps           float64
	datapathPerGB  float64 // both WireGuard datapath processes
	withIperfPerGB float64 // those and both iperf3 processes
	machinePerGB   float64 // the machine's busy time
}

func (s sample) String() string {
	return fmt.Sprintf("%6.2f Gbit/s  CPU-s/GB: datapaths %5.2f, +iperf3 %5.2f, machine %5.2f", s.gbps, s.datapathPerGB, s.withIperfPerGB, s.machinePerGB)
}

// medianSample returns the median of each figure of xs, taken on its own.
func medianSample(xs []sample) sample {
	var g, d, i, m []float64
	for _, x := range xs {
		g, d, i, m = append(g, x.gbps), append(d, x.datapathPerGB), append(i, x.withIperfPerGB), append(m, x.machinePerGB)
	}
	return sample{gbps: benchkit.Median(g), datapathPerGB: benchkit.Median(d), withIperfPerGB: benchkit.Median(i), machinePerGB: benchkit.Median(m)}
}

// transfer runs an iperf3 server in the namespace named srv and a client
// in cli sending to dst for secs seconds and returns the receiver's rate
// and the CPU time of the datapath processes, of them and the iperf3
// ends, and of the machine, per GB received.
func transfer(ctx context.Context, cli, srv, dst string, secs int, datapaths []int) (sample, error) {
	var dp, busy float64
	r, err := benchkit.Iperf3{Client: cli, Server: srv, Dst: dst, Secs: secs, Around: func() (func() error, error) {
		dpBefore, err := benchkit.TaskSeconds(datapaths)
		if err != nil {
			return nil, err
		}
		before, err := benchkit.ReadMachine()
		if err != nil {
			return nil, err
		}
		return func() error {
			after, berr := benchkit.ReadMachine()
			dpAfter, derr := benchkit.TaskSeconds(datapaths)
			dp, busy = dpAfter-dpBefore, after.Busy-before.Busy
			return errors.Join(berr, derr)
		}, nil
	}}.Run(ctx)
	if err != nil {
		return sample{}, err
	}
	gb := r.Bytes / 1e9
	return sample{gbps: r.BitsPerSecond / 1e9, datapathPerGB: dp / gb,
		withIperfPerGB: (dp + r.ClientCPU + r.ServerCPU) / gb, machinePerGB: busy / gb}, nil
}

// refNode is one namespace of the reference.
type refNode struct {
	name         string
	host4, host6 string // on the underlay /24 and /64
	tun4, tun6   string // on wg0
}

// reference is the bare WireGuard path: two namespaces, each with its
// datapath process.
type reference struct {
	nodes     []ns.NetNS
	datapaths []*netnstest.Proc
	own       bool // the namespaces are the reference's, removed by close
}

// datapathPIDs returns the reference's datapath processes.
func (r *reference) datapathPIDs() []int {
	var out []int
	for _, p := range r.datapaths {
		out = append(out, p.Cmd.Process.Pid)
	}
	return out
}

// close ends the datapaths and removes the namespaces; nil-safe.
func (r *reference) close() error {
	if r == nil {
		return nil
	}
	for _, p := range r.datapaths {
		p.Kill()
	}
	if !r.own {
		return nil
	}
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, netnstest.Remove(n))
	}
	return errors.Join(errs...)
}

// buildReference starts `daemon wireguard-datapath --device wg0 --mtu mtu`
// in two namespaces (each with a private /var/run/wireguard under work)
// and configures the two devices as each other's only peer with wgctrl:
// key, port, the peer's host IPv4 as endpoint, its tunnel addresses as
// allowed IPs; then the tunnel addresses and a route to the peer's, both
// families. The namespaces are those of on (routelet's nodes, whose
// netfilter rules and conntrack the reference then shares; port 51821)
// or, when on is nil, ra and rb, made here and wired to the router's
// bridge (port 51820).
func buildReference(ctx context.Context, router ns.NetNS, on []*cluster.Node, daemon, work string, mtu int) (*reference, error) {
	r := &reference{own: on == nil}
	nodes := []refNode{refA, refB}
	port := defaults.WireGuardPort
	if on != nil {
		port = refPort
		for i := range nodes {
			nodes[i].host4 = strings.Split(on[i].Spec.Host4, "/")[0]
		}
	}
	var keys []wgtypes.Key
	var dirs []string
	for i, n := range nodes {
		if on != nil {
			r.nodes = append(r.nodes, on[i].CNI.NS)
		} else {
			nn, err := netnstest.NewNamed(nsPrefix + "ref-" + n.name)
			if err != nil {
				return r, err
			}
			r.nodes = append(r.nodes, nn)
		}
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return r, err
		}
		keys = append(keys, k)
		dirs = append(dirs, filepath.Join(work, n.name, "run-wireguard"))
	}
	sh := func(n ns.NetNS, cmds ...string) error {
		for _, cmd := range cmds {
			f := strings.Fields(cmd)
			if _, err := netnstest.Exec(ctx, n, f[0], f[1:]...); err != nil {
				return fmt.Errorf("reference: %w", err)
			}
		}
		return nil
	}
	for i, n := range nodes {
		node := r.nodes[i]
		if err := wire(router, node, n, sh, on == nil); err != nil {
			return r, err
		}
		log, err := os.Create(filepath.Join(work, n.name+"-datapath.log"))
		if err != nil {
			return r, err
		}
		p, err := netnstest.StartWithRunDir(node, log, dirs[i], daemon, "wireguard-datapath", "--device", refDev, "--mtu", strconv.Itoa(mtu))
		log.Close()
		if err != nil {
			return r, err
		}
		r.datapaths = append(r.datapaths, p)
	}
	for i, n := range nodes {
		peer := nodes[1-i]
		if err := waitSocket(r.datapaths[i], filepath.Join(dirs[i], refDev+".sock")); err != nil {
			return r, fmt.Errorf("reference %s: %w", n.name, err)
		}
		cfg := wgtypes.Config{PrivateKey: &keys[i], ListenPort: &port, ReplacePeers: true, Peers: []wgtypes.PeerConfig{{
			PublicKey: keys[1-i].PublicKey(),
			Endpoint:  &net.UDPAddr{IP: net.ParseIP(peer.host4), Port: port},
			AllowedIPs: []net.IPNet{{IP: net.ParseIP(peer.tun4), Mask: net.CIDRMask(32, 32)},
				{IP: net.ParseIP(peer.tun6), Mask: net.CIDRMask(128, 128)}},
		}}}
		err := netnstest.DoWithRunDir(r.nodes[i], dirs[i], func() error {
			c, err := wgctrl.New()
			if err != nil {
				return err
			}
			defer c.Close()
			return c.ConfigureDevice(refDev, cfg)
		})
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(work, n.name+"-datapath.log"))
			return r, fmt.Errorf("reference %s: configure %s: %w\ndatapath log:\n%s", n.name, refDev, err, log)
		}
		if err := sh(r.nodes[i], "ip addr add "+n.tun4+"/32 dev "+refDev, "ip -6 addr add "+n.tun6+"/128 dev "+refDev+" nodad",
			"ip link set "+refDev+" up", "ip route add "+peer.tun4+"/32 dev "+refDev, "ip -6 route add "+peer.tun6+"/128 dev "+refDev); err != nil {
			return r, err
		}
	}
	for _, dst := range []string{refB.tun4, refB.tun6} {
		if out, err := netnstest.Ping(ctx, r.nodes[0], dst, 3); err != nil {
			return r, fmt.Errorf("reference %s → %s: %w\n%s", refA.name, dst, err, out)
		}
	}
	return r, nil
}

// wire gives the reference namespace node of n its underlay: when apart,
// a veth to the router's bridge with n's host addresses; a node of
// routelet's has its own.
func wire(router, node ns.NetNS, n refNode, sh func(ns.NetNS, ...string) error, apart bool) error {
	if !apart {
		return nil
	}
	port := "to-" + n.name
	if _, err := netnstest.Sysctl(node, "net/ipv6/conf/all/accept_dad", "0"); err != nil {
		return err
	}
	if err := sh(node, "ip link add eth0 type veth peer name "+port+" netns "+netnstest.Name(router)); err != nil {
		return err
	}
	if err := sh(router, "ip link set "+port+" master br0 up"); err != nil {
		return err
	}
	return sh(node, "ip addr add "+n.host4+"/24 dev eth0", "ip -6 addr add "+n.host6+"/64 dev eth0 nodad", "ip link set eth0 up")
}

// waitSocket waits up to 10 s for the datapath's UAPI socket to take
// connections: the file appears when the socket is bound, a moment before
// it listens.
func waitSocket(p *netnstest.Proc, sock string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			return c.Close()
		}
		select {
		case <-p.Done():
			return fmt.Errorf("datapath exited before %s answered: %v", sock, p.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within 10s", sock)
		}
	}
}
