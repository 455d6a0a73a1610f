// Command overlay measures what routelet's pod datapath costs in TCP
// throughput and in CPU. In one run it builds two simulated nodes on one
// underlay bridge (see internal/cluster) running routeletd, one pod per
// node attached through the plugin, and — on the same bridge — two more
// nodes with the same datapath built by hand and no netfilter rules at all
// (veth, /32 and /128 host routes, proxy ARP gateway, vxlan.calico and
// vxlan-v6.calico with permanent ARP/FDB entries and onlink routes, or
// direct routes with -encapsulation none): the reference. It then runs
// iperf3 (one TCP stream) host to host over the underlay, and pod to pod
// across the nodes on the reference and on routelet, alternating, for
// IPv4 and IPv6 pods, with the iperf3 ends unpinned and both pinned to one
// CPU (taskset), with routeletd's NAT outgoing on and off (the daemons are
// restarted between the two).
//
// For every transfer it prints the rate and the CPU seconds per GB moved,
// for the whole machine (busy jiffies from /proc/stat over the transfer,
// divided by the bytes received): on this single-machine model both nodes'
// packet work shows up there. Beside it goes the CPU time attributable to
// the transfer per GB (both iperf3 processes and the softirq work, see
// attribution), which the machine's other load inflates less. The summary
// gives the medians, routelet's ratios to the reference in the same run
// and the pod/underlay throughput ratio. With -perf each transfer is profiled and its
// netfilter share printed per hook; -dump writes both datapaths'
// configuration for a diff instead of measuring. Everything runs in
// network namespaces and is removed at the end, also on Ctrl-C.
//
// Run as root: go run ./bench/overlay (or make bench).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/bench/internal/benchkit"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
)

const benchPrefix = "routelet-ovbench-"

var nsPrefix = netnstest.OwnedPrefix(benchPrefix)

// options are the command line.
type options struct {
	secs, rounds int
	encap        string
	binDir       string
	nat, pin     []string // "on", "off"
	ipv6         bool
	v6           []bool // pod families measured, in order: false IPv4, true IPv6
	perfDir      string // perf record each transfer into this directory
	dump         string // directory for the datapaths' state; no transfer then
	refRules     string // nft ruleset loaded into the reference's nodes
}

func main() {
	var o options
	var nat, pin, fam string
	flag.IntVar(&o.secs, "t", 5, "seconds per iperf3 transfer")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds; each runs every transfer once, reference and routelet alternating")
	flag.StringVar(&o.encap, "encapsulation", "vxlan", "vxlan, or none (host-gw: direct routes, no encapsulation)")
	flag.StringVar(&o.binDir, "plugin-dir", "bin", "directory holding the routelet plugin and routeletd (built into a temp dir when missing)")
	flag.StringVar(&nat, "nat", "on,off", "routeletd NAT outgoing settings to measure, in order")
	flag.StringVar(&pin, "pin", "off,on", "iperf3 placement: off (unpinned), on (both ends on the last CPU)")
	flag.BoolVar(&o.ipv6, "ipv6", true, "also measure IPv6 pods (over the IPv6 underlay)")
	flag.StringVar(&fam, "family", "4,6", "pod families to measure, in order: 4, 6 or both (6 needs -ipv6)")
	flag.StringVar(&o.perfDir, "perf", "", "record each transfer with perf record -a -g into this directory (for perf report --comm iperf3,...)")
	flag.StringVar(&o.dump, "dump", "", "write both datapaths' state (links, offloads, routes, neighbours, sysctls, netfilter) per namespace into this directory and exit without measuring")
	flag.StringVar(&o.refRules, "reference-nft", "", "nft ruleset file loaded into both reference nodes (placeholders {veth} {pod4} {pod6}), to measure a netfilter layout on the otherwise bare path")
	flag.Parse()
	o.nat, o.pin = strings.Split(nat, ","), strings.Split(pin, ",")
	for _, v := range append(slices.Clone(o.nat), o.pin...) {
		if v != "on" && v != "off" {
			fmt.Fprintf(os.Stderr, "overlay bench: -nat and -pin take on and off, not %q\n", v)
			os.Exit(2)
		}
	}
	for _, f := range strings.Split(fam, ",") {
		if f != "4" && (f != "6" || !o.ipv6) {
			fmt.Fprintf(os.Stderr, "overlay bench: -family takes 4 and 6 (6 only with -ipv6), not %q\n", f)
			os.Exit(2)
		}
		o.v6 = append(o.v6, f == "6")
	}
	if o.encap != "vxlan" && o.encap != "none" {
		fmt.Fprintf(os.Stderr, "overlay bench: -encapsulation %q: want vxlan or none\n", o.encap)
		os.Exit(2)
	}
	benchkit.Run("overlay bench", func(ctx context.Context) error { return run(ctx, os.Stdout, o) })
}

// Addresses of the four nodes: a and b run routeletd, ra and rb are the
// hand-built reference.
var (
	specA  = cluster.NodeSpec{Name: "a", Host4: "10.0.1.10/24", Gw4: "10.0.1.1", Block4: "10.244.1.0/24", Host6: "fd00:1::10/64", Gw6: "fd00:1::1", Block6: "fd00:244:1::/120"}
	specB  = cluster.NodeSpec{Name: "b", Host4: "10.0.1.11/24", Gw4: "10.0.1.1", Block4: "10.244.2.0/24", Host6: "fd00:1::11/64", Gw6: "fd00:1::1", Block6: "fd00:244:2::/120"}
	refA   = refNode{name: "ra", host4: "10.0.1.20", host6: "fd00:1::20", block4: "10.244.21.0/24", block6: "fd00:244:21::/120", pod4: "10.244.21.2", pod6: "fd00:244:21::2", mac4: "66:00:00:00:21:04", mac6: "66:00:00:00:21:06"}
	refB   = refNode{name: "rb", host4: "10.0.1.21", host6: "fd00:1::21", block4: "10.244.22.0/24", block6: "fd00:244:22::/120", pod4: "10.244.22.2", pod6: "fd00:244:22::2", mac4: "66:00:00:00:22:04", mac6: "66:00:00:00:22:06"}
	family = map[bool]string{false: "IPv4", true: "IPv6"}
)

// key names one measured setting.
type key struct {
	nat, pin string
	v6       bool
}

func (k key) String() string {
	pin := "unpinned"
	if k.pin == "on" {
		pin = "pinned  "
	}
	return fmt.Sprintf("%s %s NAT %-3s", family[k.v6], pin, k.nat)
}

func run(ctx context.Context, w io.Writer, o options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces")
	}
	for _, tool := range []string{"iperf3", "taskset", "ip", "bridge"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: install it (make deps)", tool)
		}
	}
	if _, err := cluster.RemoveStale(benchPrefix); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "routelet-ovbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	pluginDir, daemon, err := benchkit.Binaries(ctx, o.binDir, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	a, b := specA, specB
	if !o.ipv6 {
		a.Host6, a.Block6, b.Host6, b.Block6 = "", "", "", ""
	}
	baseArgs := []string{"--encapsulation=" + o.encap, "--health-addr="}
	daemonArgs := func(nat string) []string {
		return append(slices.Clone(baseArgs), "--nat-outgoing="+strconv.FormatBool(nat == "on"))
	}
	c, err := cluster.New(cluster.Options{Prefix: nsPrefix, PluginDir: pluginDir, Daemon: daemon, WorkDir: work,
		DaemonArgs: daemonArgs(o.nat[0]), Nodes: []cluster.NodeSpec{a, b}})
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
	ref, err := buildReference(ctx, c.Router, o.encap, o.ipv6, mtu)
	if err != nil {
		return errors.Join(err, ref.close())
	}
	defer func() { err = errors.Join(err, ref.close()) }()
	if o.refRules != "" {
		if err := ref.loadRules(ctx, o.refRules); err != nil {
			return err
		}
	}

	if o.dump != "" {
		roles := map[string]ns.NetNS{"routelet-node": na.CNI.NS, "routelet-pod": pa.NS, "reference-node": ref.nodes[0], "reference-pod": ref.pods[0]}
		if err := dumpState(ctx, o.dump, roles, []string{pa.HostIface, refHostVeth(refA)}); err != nil {
			return err
		}
		fmt.Fprintf(w, "overlay bench: state of node a, its pod and the reference's in %s (diff routelet-node.txt reference-node.txt)\n", o.dump)
		return nil
	}
	at, err := newAttribution()
	if err != nil {
		return err
	}
	if o.perfDir != "" {
		if err := os.MkdirAll(o.perfDir, 0o755); err != nil {
			return err
		}
	}
	pinCPU := strconv.Itoa(runtime.NumCPU() - 1)
	fmt.Fprintf(w, "overlay bench: iperf3 -t %d, %d round(s), encapsulation %s, pod MTU %d; routelet pods %s → %s", o.secs, o.rounds, o.encap, mtu, pa.IPv4, pb.IPv4)
	if o.ipv6 {
		fmt.Fprintf(w, " and %s → %s", pa.IPv6, pb.IPv6)
	}
	fmt.Fprintf(w, "; reference pods %s → %s; pinned: both iperf3 ends on CPU %s\n", refA.pod4, refB.pod4, pinCPU)
	if o.refRules != "" {
		fmt.Fprintf(w, "the reference runs the netfilter rules of %s\n", o.refRules)
	}
	fmt.Fprintf(w, "CPU-s/GB: whole machine (busy time in /proc/stat); attrib: %s\n", at)
	fmt.Fprintf(w, "load average at start: %s\n", benchkit.Loadavg())

	type result struct{ ref, rl []sample }
	results := map[key]*result{}
	var under []sample
	for ni, nat := range o.nat {
		if ni > 0 {
			for _, n := range c.Nodes {
				if err := c.Restart(ctx, n, daemonArgs(nat)...); err != nil {
					return fmt.Errorf("restart %s with NAT %s: %w", n.Spec.Name, nat, err)
				}
			}
		}
		for r := range o.rounds {
			if ni == 0 {
				u, err := transfer(ctx, at, netnstest.Name(na.CNI.NS), netnstest.Name(nb.CNI.NS), "10.0.1.11", o.secs, "", o.perfFile(fmt.Sprintf("r%d-underlay", r+1)))
				if err != nil {
					return fmt.Errorf("underlay transfer: %w", err)
				}
				under = append(under, u)
				fmt.Fprintf(w, "  round %d underlay host→host              %s\n", r+1, u)
			}
			for _, v6 := range o.v6 {
				for _, pin := range o.pin {
					k := key{nat: nat, pin: pin, v6: v6}
					if results[k] == nil {
						results[k] = &result{}
					}
					cpu := ""
					if pin == "on" {
						cpu = pinCPU
					}
					dstRef, dstRL := refB.pod4, pb.IPv4.String()
					if v6 {
						dstRef, dstRL = refB.pod6, pb.IPv6.String()
					}
					runRef := func() (sample, error) {
						return transfer(ctx, at, netnstest.Name(ref.pods[0]), netnstest.Name(ref.pods[1]), dstRef, o.secs, cpu, o.perfFile(fmt.Sprintf("r%d-%s-reference", r+1, k.file())))
					}
					runRL := func() (sample, error) {
						return transfer(ctx, at, netnstest.Name(pa.NS), netnstest.Name(pb.NS), dstRL, o.secs, cpu, o.perfFile(fmt.Sprintf("r%d-%s-routelet", r+1, k.file())))
					}
					first, second := runRef, runRL
					if r%2 == 1 {
						first, second = runRL, runRef
					}
					s1, err := first()
					if err != nil {
						return fmt.Errorf("%s transfer: %w", k, err)
					}
					s2, err := second()
					if err != nil {
						return fmt.Errorf("%s transfer: %w", k, err)
					}
					sRef, sRL := s1, s2
					if r%2 == 1 {
						sRef, sRL = s2, s1
					}
					results[k].ref = append(results[k].ref, sRef)
					results[k].rl = append(results[k].rl, sRL)
					fmt.Fprintf(w, "  round %d %s  reference %s   routelet %s\n", r+1, k, sRef, sRL)
					if o.perfDir != "" {
						fmt.Fprintf(w, "      reference %s\n      routelet  %s\n", sRef.nf, sRL.nf)
					}
				}
			}
		}
	}
	fmt.Fprintf(w, "load average at end: %s\n", benchkit.Loadavg())
	fmt.Fprintf(w, "medians (%s, %d round(s)); ratios = routelet / reference, the median of each round's pair (the two ran back to back):\n", o.encap, o.rounds)
	for _, nat := range o.nat {
		for _, v6 := range o.v6 {
			for _, pin := range o.pin {
				k := key{nat: nat, pin: pin, v6: v6}
				rs := results[k]
				var cpu, attr, rate []float64
				for i := range rs.ref {
					cpu = append(cpu, rs.rl[i].cpuPerGB/rs.ref[i].cpuPerGB)
					attr = append(attr, rs.rl[i].attrPerGB/rs.ref[i].attrPerGB)
					rate = append(rate, rs.rl[i].gbps/rs.ref[i].gbps)
				}
				fmt.Fprintf(w, "  %s  reference %s   routelet %s   CPU/GB ratio %.2f, attrib ratio %.2f, throughput ratio %.2f\n",
					k, medianSample(rs.ref), medianSample(rs.rl), benchkit.Median(cpu), benchkit.Median(attr), benchkit.Median(rate))
				if o.perfDir != "" {
					fmt.Fprintf(w, "      netfilter outside the router's bridge, median share of the transfer's samples: reference %.1f%%, routelet %.1f%%\n",
						100*medianOwn(rs.ref), 100*medianOwn(rs.rl))
				}
			}
		}
	}
	mu := medianSample(under)
	k := key{nat: o.nat[0], pin: o.pin[0], v6: o.v6[0]}
	mo := medianSample(results[k].rl)
	fmt.Fprintf(w, "underlay %s; routelet pod→pod (%s) %.2f Gbit/s: ratio %.2f to the underlay\n", mu, k, mo.gbps, mo.gbps/mu.gbps)
	return nil
}

// perfFile returns where perf records the transfer named name, or "" when
// no profile is wanted.
func (o options) perfFile(name string) string {
	if o.perfDir == "" {
		return ""
	}
	return filepath.Join(o.perfDir, name+".data")
}

// file returns k as a file name part.
func (k key) file() string {
	return strings.NewReplacer(" ", "", "IPv", "v").Replace(fmt.Sprintf("%s-pin%s-nat%s", family[k.v6], k.pin, k.nat))
}

// sample is one transfer: its rate, and the whole machine's CPU time and
// the CPU time attributable to it (attribution) per GB moved.
type sample struct {
	gbps      float64
	cpuPerGB  float64
	attrPerGB float64
	nf        *hookShares // with -perf: where the transfer's threads were in netfilter
}

func (s sample) String() string {
	return fmt.Sprintf("%6.2f Gbit/s %5.2f CPU-s/GB (attrib %4.2f)", s.gbps, s.cpuPerGB, s.attrPerGB)
}

// medianOwn returns the median of xs' netfilter shares (own).
func medianOwn(xs []sample) float64 {
	var f []float64
	for _, x := range xs {
		f = append(f, x.nf.own())
	}
	return benchkit.Median(f)
}

// medianSample returns the median rate and the median CPU per GB of xs
// (each taken on its own).
func medianSample(xs []sample) sample {
	var g, c, a []float64
	for _, x := range xs {
		g, c, a = append(g, x.gbps), append(c, x.cpuPerGB), append(a, x.attrPerGB)
	}
	return sample{gbps: benchkit.Median(g), cpuPerGB: benchkit.Median(c), attrPerGB: benchkit.Median(a)}
}

// transfer runs an iperf3 server in the namespace named srv and a client in
// cli sending to dst for secs seconds, both on CPU cpu when it is not
// empty, and returns the receiver's rate, the machine's busy CPU time
// (from /proc/stat, around the client's run) per GB received, and the CPU
// time attributable to the transfer (see attribution) per GB. With prof
// set, perf records the whole machine around the client's run into prof.
func transfer(ctx context.Context, at attribution, cli, srv, dst string, secs int, cpu, prof string) (sample, error) {
	var pinned func([]string) []string
	if cpu != "" {
		pinned = func(argv []string) []string { return append([]string{"taskset", "-c", cpu}, argv...) }
	}
	var busy, softirq, ksoftirqd float64
	r, err := benchkit.Iperf3{Client: cli, Server: srv, Dst: dst, Secs: secs, Wrap: pinned, Around: func() (func() error, error) {
		stop, err := startPerf(prof)
		if err != nil {
			return nil, err
		}
		before, err := benchkit.ReadMachine()
		if err != nil {
			return nil, err
		}
		kBefore, err := benchkit.TaskSeconds(at.ksoftirqd)
		if err != nil {
			return nil, err
		}
		return func() error {
			after, serr := benchkit.ReadMachine()
			kAfter, kerr := benchkit.TaskSeconds(at.ksoftirqd)
			if perr := stop(); perr != nil {
				return perr
			}
			busy, softirq, ksoftirqd = after.Busy-before.Busy, after.Softirq-before.Softirq, kAfter-kBefore
			return errors.Join(serr, kerr)
		}, nil
	}}.Run(ctx)
	if err != nil {
		return sample{}, err
	}
	gb := r.Bytes / 1e9
	attr := at.attributable(r.ClientCPU+r.ServerCPU, softirq, ksoftirqd)
	out := sample{gbps: r.BitsPerSecond / 1e9, cpuPerGB: busy / gb, attrPerGB: attr / gb}
	if prof != "" {
		nf, err := perfHookShares(ctx, prof)
		if err != nil {
			return sample{}, err
		}
		out.nf = &nf
	}
	return out, nil
}

// startPerf starts `perf record -a -g` into file (nothing when file is
// empty) with its events disabled, enables them once perf is set up (its
// control FIFO answers "ack"), and returns the function that stops it and
// waits for it.
func startPerf(file string) (stop func() error, err error) {
	if file == "" {
		return func() error { return nil }, nil
	}
	ctl, ack := file+".ctl", file+".ack"
	for _, f := range []string{ctl, ack} {
		os.Remove(f)
		if err := unix.Mkfifo(f, 0o600); err != nil {
			return nil, fmt.Errorf("perf control fifo %s: %w", f, err)
		}
	}
	cleanup := func() { os.Remove(ctl); os.Remove(ack) }
	p := exec.Command("perf", "record", "-q", "-a", "-g", "-F", "997", "-D", "-1", "--control", "fifo:"+ctl+","+ack, "-o", file)
	p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Start(); err != nil {
		cleanup()
		return nil, fmt.Errorf("perf record: %w", err)
	}
	fail := func(err error) (func() error, error) {
		p.Process.Kill()
		p.Wait()
		cleanup()
		return nil, fmt.Errorf("perf record -o %s: %w", file, err)
	}
	// Opening a FIFO blocks until perf opens the other end.
	c, err := os.OpenFile(ctl, os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	a, err := os.Open(ack)
	if err != nil {
		return fail(err)
	}
	defer a.Close()
	if _, err := io.WriteString(c, "enable\n"); err != nil {
		return fail(err)
	}
	if line, err := bufio.NewReader(a).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ack" {
		return fail(fmt.Errorf("no ack to enable: %q %v", line, err))
	}
	return func() error {
		defer cleanup()
		p.Process.Signal(os.Interrupt)
		// perf writes its file and then dies of the signal it was sent.
		if err := p.Wait(); err != nil && !interrupted(p.ProcessState) {
			return fmt.Errorf("perf record -o %s: %w", file, err)
		}
		return nil
	}, nil
}

// interrupted reports whether the process ended by SIGINT.
func interrupted(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGINT
}

// refNode is one node of the hand-built reference and its pod.
type refNode struct {
	name           string
	host4, host6   string // on the underlay /24 and /64
	block4, block6 string
	pod4, pod6     string
	mac4, mac6     string // VTEP MACs of vxlan.calico and vxlan-v6.calico
}

// tunnel4 and tunnel6 are the VTEP addresses: the block's first address,
// as routelet picks them.
func (n refNode) tunnel4() string { return strings.TrimSuffix(n.block4, ".0/24") + ".0" }
func (n refNode) tunnel6() string { return strings.TrimSuffix(n.block6, "/120") }

// family returns n's host IP, block, VTEP MAC and tunnel address of IPv4
// or (v6) IPv6.
func (n refNode) family(v6 bool) (host, block, mac, tunnel string) {
	if v6 {
		return n.host6, n.block6, n.mac6, n.tunnel6()
	}
	return n.host4, n.block4, n.mac4, n.tunnel4()
}

// refVXLAN is the commands that give node n the VXLAN device of one family
// (vxlan.calico, or vxlan-v6.calico for v6) with peer's neighbour, FDB
// entry and route, as routeletd programs them.
func refVXLAN(n, peer refNode, v6 bool) []string {
	ip, dev, mtu, bits, nodad := "ip", "vxlan.calico", "1450", "/32", ""
	if v6 {
		ip, dev, mtu, bits, nodad = "ip -6", "vxlan-v6.calico", "1430", "/128", " nodad"
	}
	host, _, mac, tunnel := n.family(v6)
	peerHost, peerBlock, peerMAC, peerTunnel := peer.family(v6)
	return []string{
		"ip link add " + dev + " address " + mac + " type vxlan id 4096 dstport 4789 local " + host + " dev eth0 nolearning",
		"ip link set " + dev + " mtu " + mtu + " up",
		ip + " addr add " + tunnel + bits + " dev " + dev + nodad,
		ip + " neigh add " + peerTunnel + " lladdr " + peerMAC + " dev " + dev + " nud permanent",
		"bridge fdb append " + peerMAC + " dev " + dev + " dst " + peerHost + " self permanent",
		ip + " route add " + peerBlock + " via " + peerTunnel + " dev " + dev + " onlink mtu " + mtu,
	}
}

// refHostVeth is the host-side veth of n's pod.
func refHostVeth(n refNode) string { return "cali" + n.name + "0000" }

// reference is the hand-built datapath: two node namespaces and a pod in
// each.
type reference struct {
	nodes, pods []ns.NetNS
}

// close removes the reference's namespaces; nil-safe.
func (r *reference) close() error {
	if r == nil {
		return nil
	}
	var errs []error
	for _, n := range append(slices.Clone(r.pods), r.nodes...) {
		errs = append(errs, netnstest.Remove(n))
	}
	return errors.Join(errs...)
}

// buildReference wires ra and rb to the router's bridge and builds, by hand
// and without any netfilter rule, what routelet builds for a pod and a
// peer: the pod's veth with its /32 (and /128), the link-local gateway
// answered by proxy ARP (IPv6: the gateway address on the host side), the
// host routes, and towards the other node vxlan.calico (vxlan-v6.calico)
// with a permanent ARP/NDP and FDB entry and an onlink route with the
// overlay MTU — or, with encapsulation none, a direct route.
func buildReference(ctx context.Context, router ns.NetNS, encap string, v6 bool, mtu int) (*reference, error) {
	r := &reference{}
	nodes := []refNode{refA, refB}
	for _, n := range nodes {
		nn, err := netnstest.NewNamed(nsPrefix + "ref-node-" + n.name)
		if err != nil {
			return r, err
		}
		r.nodes = append(r.nodes, nn)
		pn, err := netnstest.NewNamed(nsPrefix + "ref-pod-" + n.name)
		if err != nil {
			return r, err
		}
		r.pods = append(r.pods, pn)
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
	m := strconv.Itoa(mtu)
	for i, n := range nodes {
		peer := nodes[1-i]
		node, pod := r.nodes[i], r.pods[i]
		port := "to-" + n.name
		for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad"} {
			v := "1"
			if strings.HasSuffix(k, "accept_dad") {
				v = "0"
			}
			if _, err := netnstest.Sysctl(node, k, v); err != nil {
				return r, err
			}
		}
		if err := sh(node, "ip link add eth0 type veth peer name "+port+" netns "+netnstest.Name(router)); err != nil {
			return r, err
		}
		if err := sh(router, "ip link set "+port+" master br0 up"); err != nil {
			return r, err
		}
		// The same underlay as routelet's nodes (internal/cluster): an
		// address and a default route per family.
		cmds := []string{"ip addr add " + n.host4 + "/24 dev eth0", "ip link set eth0 up", "ip route add default via " + specA.Gw4}
		if v6 {
			cmds = append(cmds, "ip -6 addr add "+n.host6+"/64 dev eth0 nodad", "ip -6 route add default via "+specA.Gw6+" dev eth0")
		}
		switch {
		case encap == "vxlan":
			cmds = append(cmds, refVXLAN(n, peer, false)...)
			if v6 {
				cmds = append(cmds, refVXLAN(n, peer, true)...)
			}
		default:
			cmds = append(cmds, "ip route add "+peer.block4+" via "+peer.host4+" dev eth0")
			if v6 {
				cmds = append(cmds, "ip -6 route add "+peer.block6+" via "+peer.host6+" dev eth0")
			}
		}
		host := refHostVeth(n)
		cmds = append(cmds,
			"ip link add "+host+" mtu "+m+" type veth peer name eth0 mtu "+m+" netns "+netnstest.Name(pod),
			"sysctl -q -w net.ipv4.conf."+host+".proxy_arp=1 net.ipv4.neigh."+host+".proxy_delay=0",
			"ip link set "+host+" up",
			"ip route add "+n.pod4+"/32 dev "+host)
		if v6 {
			cmds = append(cmds,
				"ip -6 addr add fe80::ecee:eeff:feee:eeee/64 dev "+host+" nodad",
				"ip -6 route add "+n.pod6+"/128 dev "+host)
		}
		if err := sh(node, cmds...); err != nil {
			return r, err
		}
		podCmds := []string{"ip link set lo up", "ip addr add " + n.pod4 + "/32 dev eth0", "ip link set eth0 up",
			"ip route add 169.254.1.1 dev eth0 scope link", "ip route add default via 169.254.1.1 dev eth0"}
		if v6 {
			podCmds = append(podCmds, "ip -6 addr add "+n.pod6+"/128 dev eth0 nodad",
				"ip -6 route add default via fe80::ecee:eeff:feee:eeee dev eth0")
		}
		if err := sh(pod, podCmds...); err != nil {
			return r, err
		}
	}
	// Both pods reach each other before anything is measured.
	dsts := []string{refB.pod4}
	if v6 {
		dsts = append(dsts, refB.pod6)
	}
	for _, dst := range dsts {
		if out, err := netnstest.Ping(ctx, r.pods[0], dst, 3); err != nil {
			return r, fmt.Errorf("reference pod → %s: %w\n%s", dst, err, out)
		}
	}
	return r, nil
}

// loadRules loads the nft ruleset in file into each reference node, its
// placeholders {veth}, {pod4} and {pod6} replaced by that node's pod
// veth and addresses.
func (r *reference) loadRules(ctx context.Context, file string) error {
	text, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reference rules: %w", err)
	}
	for i, n := range []refNode{refA, refB} {
		rules := strings.NewReplacer("{veth}", refHostVeth(n), "{pod4}", n.pod4, "{pod6}", n.pod6).Replace(string(text))
		path := filepath.Join(os.TempDir(), fmt.Sprintf("%sref-%s-%d.nft", benchPrefix, n.name, os.Getpid()))
		if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
			return fmt.Errorf("reference rules: %w", err)
		}
		out, err := netnstest.Exec(ctx, r.nodes[i], "nft", "-f", path)
		os.Remove(path)
		if err != nil {
			return fmt.Errorf("reference rules %s on %s: %w\n%s", file, n.name, err, out)
		}
	}
	return nil
}
