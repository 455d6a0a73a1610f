// Command bgp measures how fast routeletd programs the routes it learns
// over BGP, and what holding them costs in memory, against the same number
// of routes through the file datastore, in one run.
//
// It builds a router namespace and two nodes on one underlay bridge (see
// internal/cluster), with --encapsulation none:
//
//   - BGP: node "bgp" runs routeletd --bgp (AS 64512, no node mesh), its one
//     peer BIRD 2 in the router (AS 65000, eBGP), and --bgp-pool the pool
//     the prefixes are in. BIRD holds -n /26 prefixes of the pool as the
//     static routes of a protocol that starts disabled; the round's clock
//     starts at `birdc enable` on the established session, so BIRD
//     announces them all at once (next hop: the router), and stops when
//     the node's main table holds every one with protocol 186.
//   - file: node "file" runs routeletd with the file datastore only; -n
//     node records (each with one /26 of the same pool and a host IP on the
//     node's subnet), written beforehand into a directory beside the state
//     directory, are renamed into its nodes/ one after the other; the clock
//     starts at the first rename and stops when the main table holds every
//     block's route with protocol 80.
//
// The kernel's route events (a netlink subscription in the node's
// namespace) say when the last route arrived; a full read confirms the
// count. Each round starts each daemon afresh on an empty table (the
// routes of an earlier round deleted, the records removed, the static
// protocol disabled), so its VmRSS and VmHWM (/proc/PID/status), read
// once every route is there, are those of one daemon programming -n
// routes from its start. The two paths alternate in order between rounds;
// the summary gives the medians and the ratios BGP/file. Everything runs
// in network namespaces and is removed at the end, also on Ctrl-C.
//
// Run as root: go run ./bench/bgp (see docs/bench-bgp.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/routelet/routelet/bench/internal/benchkit"
	"github.com/routelet/routelet/internal/birdtest"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

const benchPrefix = "routelet-bgpbench-"

var nsPrefix = netnstest.OwnedPrefix(benchPrefix)

// The underlay, the ASes and the pool the prefixes are taken from.
const (
	nodeAS   = 64512
	routerAS = 65000
	// bgpProto is the kernel protocol of the routes routeletd learned
	// over BGP (bgp-route-protocol's default).
	bgpProto = 186
	// blockBits is the length of every prefix announced and of every
	// block in the file path's records.
	blockBits = 26
	// staticProto is BIRD's protocol holding the announced prefixes.
	staticProto = "bench_static"
	// birdPeer is BIRD's protocol of the session with the BGP node.
	birdPeer = "node_bgp"
	// maxPrefixes is bgp-max-prefixes' default: more need the flag.
	maxPrefixes = 10000
)

var (
	// pool holds the prefixes of both paths: 2^14 /26 blocks.
	pool     = netip.MustParsePrefix("10.64.0.0/12")
	routerIP = netip.MustParseAddr("10.0.0.1")
	specBGP  = cluster.NodeSpec{Name: "bgp", Host4: "10.0.0.2/16", Gw4: routerIP.String(), Block4: "10.244.1.0/24"}
	specFile = cluster.NodeSpec{Name: "file", Host4: "10.0.0.3/16", Gw4: routerIP.String(), Block4: "10.244.2.0/24"}
)

// options are the command line.
type options struct {
	n, rounds int
	binDir    string
	timeout   time.Duration
	// bgp and file say which paths run; both for the ratios.
	bgp, file bool
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 1000, "prefixes BIRD announces, and node records the file path gets")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each measures both paths once, the order alternating")
	flag.StringVar(&o.binDir, "plugin-dir", "bin", "directory holding the routelet plugin and routeletd (built into a temp dir when missing)")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Minute, "longest wait for one path's routes")
	paths := flag.String("paths", "bgp,file", "paths measured: bgp, file or both (the ratios need both)")
	flag.Parse()
	for _, p := range strings.Split(*paths, ",") {
		switch p {
		case "bgp":
			o.bgp = true
		case "file":
			o.file = true
		default:
			fmt.Fprintf(os.Stderr, "bgp bench: -paths takes bgp and file, not %q\n", p)
			os.Exit(2)
		}
	}
	if o.rounds < 1 || o.n < 1 || o.n > 1<<(blockBits-pool.Bits()) || o.timeout <= 0 {
		fmt.Fprintf(os.Stderr, "bgp bench: -n %d, -rounds %d, -timeout %s: want 1 ≤ n ≤ %d, at least one round, a timeout\n",
			o.n, o.rounds, o.timeout, 1<<(blockBits-pool.Bits()))
		os.Exit(2)
	}
	benchkit.Run("bgp bench", func(ctx context.Context) error { return run(ctx, os.Stdout, o) })
}

// sample is one path's round.
type sample struct {
	elapsed   time.Duration // announcement or first rename → every route in the kernel
	rss, hwm  int64         // routeletd's VmRSS and VmHWM then, KiB
	writeTime time.Duration // file path: the renames alone
}

func (s sample) String() string {
	out := fmt.Sprintf("%9.1f ms  RSS %6.1f MiB  HWM %6.1f MiB", ms(s.elapsed), mib(s.rss), mib(s.hwm))
	if s.writeTime > 0 {
		out += fmt.Sprintf("  (renames %.1f ms)", ms(s.writeTime))
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mib(kib int64) float64      { return float64(kib) / 1024 }

func run(ctx context.Context, w io.Writer, o options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces")
	}
	if err := birdtest.Installed(); err != nil {
		return err
	}
	prefixes, err := birdtest.Subnets(pool, blockBits, o.n)
	if err != nil {
		return err
	}
	if _, err := cluster.RemoveStale(benchPrefix); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", benchPrefix)
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	pluginDir, daemon, err := benchkit.Binaries(ctx, o.binDir, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	bgpSpec, fileSpec := specBGP, specFile
	bgpSpec.DaemonArgs = []string{"--bgp", fmt.Sprintf("--bgp-as=%d", nodeAS), "--bgp-node-mesh=false",
		fmt.Sprintf("--bgp-peer=%s,as=%d", routerIP, routerAS), "--bgp-pool=" + pool.String()}
	if o.n > maxPrefixes {
		bgpSpec.DaemonArgs = append(bgpSpec.DaemonArgs, fmt.Sprintf("--bgp-max-prefixes=%d", o.n))
	}
	c, err := cluster.New(cluster.Options{Prefix: nsPrefix, PluginDir: pluginDir, Daemon: daemon, WorkDir: work,
		DaemonArgs: []string{"--encapsulation=none", "--log-level=info", "--health-addr="},
		Nodes:      []cluster.NodeSpec{bgpSpec, fileSpec}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	rb, err := c.StartRouterBird(ctx, routerConfig(prefixes))
	if err != nil {
		return err
	}
	bp, err := newBGPPath(c.Nodes[0], bgpProto, daemonSpeaker{c: c, n: c.Nodes[0]}, rb, o)
	if err != nil {
		return err
	}
	defer bp.watch.Close()
	fp, err := newFilePath(c.Nodes[1], c, work, o)
	if err != nil {
		return err
	}
	defer fp.watch.Close()

	fmt.Fprintf(w, "bgp bench: %d /%d prefixes of %s, %d round(s), --encapsulation none\n", o.n, blockBits, pool, o.rounds)
	fmt.Fprintf(w, "BGP:  BIRD (AS %d) in the router, static protocol enabled on the established session → routeletd --bgp (AS %d) → %d routes proto %d\n",
		routerAS, nodeAS, o.n, bgpProto)
	fmt.Fprintf(w, "file: %d node records renamed into nodes/ → %d routes proto %d\n", o.n, o.n, routes.DefaultProtocol)
	fmt.Fprintln(w, "time: clock start (birdc enable / first rename) → the last route's kernel event; RSS/HWM: routeletd's VmRSS/VmHWM then")
	fmt.Fprintf(w, "machine: %s\n", machine())
	fmt.Fprintf(w, "load average at start: %s\n", benchkit.Loadavg())

	var bgpS, fileS []sample
	for r := range o.rounds {
		var paths []func() error
		if o.bgp {
			paths = append(paths, func() error { s, err := bp.round(ctx); bgpS = append(bgpS, s); return err })
		}
		if o.file {
			paths = append(paths, func() error { s, err := fp.round(ctx); fileS = append(fileS, s); return err })
		}
		if r%2 == 1 && len(paths) == 2 {
			paths[0], paths[1] = paths[1], paths[0]
		}
		for _, p := range paths {
			if err := p(); err != nil {
				return fmt.Errorf("round %d: %w", r+1, err)
			}
		}
		line := fmt.Sprintf("  round %d", r+1)
		if o.bgp {
			fmt.Fprintf(w, "%s  bgp  %s\n", line, bgpS[r])
			line = strings.Repeat(" ", len(line))
		}
		if o.file {
			fmt.Fprintf(w, "%s  file %s\n", line, fileS[r])
		}
	}
	fmt.Fprintf(w, "load average at end: %s\n", benchkit.Loadavg())
	fmt.Fprintf(w, "medians (%d round(s)):\n", o.rounds)
	if o.bgp {
		fmt.Fprintf(w, "  bgp  %s\n", medianSample(bgpS))
	}
	if o.file {
		fmt.Fprintf(w, "  file %s\n", medianSample(fileS))
	}
	if !o.bgp || !o.file {
		return nil
	}
	var tr, rr []float64
	for i := range bgpS {
		tr = append(tr, float64(bgpS[i].elapsed)/float64(fileS[i].elapsed))
		rr = append(rr, float64(bgpS[i].rss)/float64(fileS[i].rss))
	}
	verdict := "met"
	if benchkit.Median(tr) > 1.5 {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "ratio bgp/file (median of the rounds' ratios): time %.2f, RSS %.2f; requirement time ≤ 1.5: %s\n",
		benchkit.Median(tr), benchkit.Median(rr), verdict)
	return nil
}

// medianSample returns the median of each figure of xs, taken on its own.
func medianSample(xs []sample) sample {
	var e, r, h, wt []float64
	for _, x := range xs {
		e, r, h, wt = append(e, float64(x.elapsed)), append(r, float64(x.rss)), append(h, float64(x.hwm)), append(wt, float64(x.writeTime))
	}
	return sample{elapsed: time.Duration(benchkit.Median(e)), rss: int64(benchkit.Median(r)), hwm: int64(benchkit.Median(h)),
		writeTime: time.Duration(benchkit.Median(wt))}
}

// routerConfig is the router's BIRD: one eBGP session to the BGP node
// (graceful restart on, as routeletd's), exporting the static routes, and
// the prefixes as the blackhole routes of a static protocol written
// disabled, so nothing is announced until `birdc enable`. Learned routes
// stay in BIRD (no kernel protocol): the router's table is not measured.
func routerConfig(prefixes []netip.Prefix) birdtest.Config {
	var b strings.Builder
	fmt.Fprintf(&b, "protocol static %s {\n\tdisabled;\n\tipv4;\n", staticProto)
	for _, p := range prefixes {
		fmt.Fprintf(&b, "\troute %s blackhole;\n", p)
	}
	b.WriteString("}\n")
	return birdtest.Config{RouterID: routerIP, NoKernel: true, Extra: b.String(),
		Neighbors: []birdtest.Neighbor{{Name: birdPeer, Address: netip.MustParsePrefix(specBGP.Host4).Addr(),
			ASN: nodeAS, LocalASN: routerAS, GracefulRestart: true}}}
}

// readMem returns VmRSS and VmHWM of pid, in KiB.
func readMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		var v *int64
		switch f[0] {
		case "VmRSS:":
			v = &rss
		case "VmHWM:":
			v = &hwm
		default:
			continue
		}
		if _, err := fmt.Sscanf(f[1], "%d", v); err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q: %w", pid, l, err)
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return rss, hwm, nil
}

// memOf reads n's running routeletd's memory.
func memOf(n *cluster.Node) (rss, hwm int64, err error) {
	pid := n.DaemonPID()
	if pid == 0 {
		return 0, 0, fmt.Errorf("routeletd on %s has exited:\n%s", n.Spec.Name, n.LogTail(20))
	}
	return readMem(pid)
}

// startDaemon starts n's routeletd afresh and waits until it is ready.
func startDaemon(ctx context.Context, c *cluster.Cluster, n *cluster.Node) error {
	since := time.Now()
	if err := c.StartDaemon(n); err != nil {
		return err
	}
	if err := n.WaitReadySince(ctx, since, netnstest.ReadyTimeout); err != nil {
		return fmt.Errorf("%w\n%s", err, n.LogTail(20))
	}
	return nil
}

// machine describes the machine: CPUs, their model, the kernel.
func machine() string {
	model, cpus := "unknown CPU", 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			switch k = strings.TrimSpace(k); {
			case !ok:
			case k == "processor":
				cpus++
			case k == "model name" && model == "unknown CPU":
				model = strings.TrimSpace(v)
			}
		}
	}
	kernel := "unknown kernel"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPU(s), %s, %s", cpus, model, kernel)
}

// encodeRecord returns the file name, host IP and bytes of node record i
// of the file path: block i of the pool, host IP 10.0.(1+i/250).(1+i%250)
// on the node's /16.
func encodeRecord(i int, block netip.Prefix) (name string, host netip.Addr, data []byte, err error) {
	host = netip.AddrFrom4([4]byte{10, 0, byte(1 + i/250), byte(1 + i%250)})
	n := &state.Node{Name: fmt.Sprintf("peer-%05d", i), HostIPv4: host.String(), Blocks: []string{block.String()}, Updated: time.Now().UTC()}
	data, err = state.EncodeNode(n)
	return n.Name + ".json", host, data, err
}
