// Command cni benchmarks the routelet CNI plugin against the reference ptp
// plugin with host-local IPAM. Both run the same way: built from source
// (ptp and host-local at the containernetworking/plugins version go.mod
// requires), executed by libcni from a fresh node network namespace, with
// pod namespaces created before the clock starts. Each plugin gets an
// equivalent config: the same MTU and one /24 of addresses.
//
// Phases: one unmeasured warm-up ADD+DEL per plugin; a sequential ADD of
// -pods pods, then their sequential DEL, interleaved pod by pod across the
// plugins so background load hits each alike; then -rounds rounds of
// -parallel concurrent ADDs followed by their concurrent DELs, one plugin at a
// time with the order rotating; then the scale phase: -scale-samples ADDs of
// one pod on an empty node, and as many with -full pods on it. It prints
// p50/p99 latency per phase, the routelet/ptp ratio of the p50s, each
// plugin's ADD at -full pods over its ADD at 1, and failures; it exits 1 when
// any operation failed. Run as root: go run ./bench/cni (or make bench).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/bench/internal/benchkit"
	"github.com/routelet/routelet/internal/netnstest"
)

// benchPrefix starts the name of every namespace a bench run makes, followed
// by the run's PID: concurrent runs keep apart, and namespaces of crashed runs
// are removed at start.
const benchPrefix = "routelet-bench-"

// nsPrefix is this run's own prefix.
var nsPrefix = netnstest.OwnedPrefix(benchPrefix)

func main() {
	pods := flag.Int("pods", 50, "pods in the sequential phase")
	parallel := flag.Int("parallel", 32, "concurrent ADDs in the parallel phase")
	mtu := flag.Int("mtu", 1450, "pod MTU given to both plugins")
	rounds := flag.Int("rounds", 3, "rounds of the parallel phase (plugin order rotates each round)")
	full := flag.Int("full", 250, "pods on the node in the scale phase (ADD at 1 pod vs ADD at this many)")
	scaleN := flag.Int("scale-samples", 20, "ADD+DEL samples at each end of the scale phase (0: skip the phase)")
	only := flag.String("plugins", "ptp,routelet", "comma-separated plugins to run: ptp, routelet")
	work := flag.String("workdir", defaultWorkDir(), "parent of the temp dir holding routelet's stateDir and host-local's dataDir")
	flag.Parse()

	benchkit.Run("cni bench", func(ctx context.Context) error {
		return run(ctx, *work, *pods, *parallel, *rounds, *mtu, *full, *scaleN, strings.Split(*only, ","))
	})
}

// sample is one measured CNI operation.
type sample struct {
	d   time.Duration
	err error
}

// phase is the outcome of one phase of one plugin.
type phase struct {
	plugin, name string
	samples      []sample
}

func run(ctx context.Context, workDir string, pods, parallel, rounds, mtu, full, scaleN int, plugins []string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root (creates network namespaces)")
	}
	if pods < 1 || parallel < 1 || rounds < 1 || pods+parallel > 250 {
		return fmt.Errorf("pods %d, parallel %d, rounds %d: each must be ≥ 1, pods+parallel ≤ 250 (one /24)",
			pods, parallel, rounds)
	}
	if scaleN < 0 || scaleN > 0 && (full < 2 || full > 250) {
		return fmt.Errorf("full %d, scale-samples %d: full must be 2 to 250 (one /24), scale-samples ≥ 0", full, scaleN)
	}
	nPods := pods + parallel
	if scaleN > 0 {
		nPods = max(nPods, full)
	}
	if _, err := netnstest.RemoveStale(benchPrefix); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(workDir, "routelet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	binDir := filepath.Join(tmp, "bin")

	var targets []*target
	defer func() {
		for _, t := range targets {
			err = errors.Join(err, t.close())
		}
	}()
	for _, p := range plugins {
		work := filepath.Join(tmp, p)
		var list *libcni.NetworkConfigList
		switch p {
		case "ptp":
			if err := netnstest.BuildReference(ctx, binDir, netnstest.PTPPackage, netnstest.HostLocalPackage); err != nil {
				return err
			}
			list, err = netnstest.PTPConf{Name: "bench-ptp", CNIVersion: "1.1.0", DataDir: work,
				MTU: mtu, Subnet: "10.250.0.0/24"}.ConfList()
		case "routelet":
			if err := netnstest.BuildRoutelet(ctx, binDir); err != nil {
				return err
			}
			list, err = netnstest.RouteletConf{Name: "bench-routelet", CNIVersion: "1.1.0", StateDir: work,
				MTU: mtu, Blocks: []string{"10.250.0.0/24"}}.ConfList()
		default:
			return fmt.Errorf("plugin %q: want ptp or routelet", p)
		}
		if err != nil {
			return err
		}
		t, err := newTarget(p, binDir, work, list, nPods)
		if t != nil {
			targets = append(targets, t)
		}
		if err != nil {
			return err
		}
	}

	// Warm-up: page cache, first exec; not measured.
	for _, t := range targets {
		if _, err := t.node.Add(ctx, t.list, t.rt(0)); err != nil {
			return fmt.Errorf("%s: warm-up ADD: %w", t.name, err)
		}
		if err := t.node.Del(ctx, t.list, t.rt(0)); err != nil {
			return fmt.Errorf("%s: warm-up DEL: %w", t.name, err)
		}
	}

	// Sequential phases, interleaved pod by pod so that load from anything
	// else on the machine hits every plugin alike.
	for _, t := range targets {
		t.seqAdd = phase{plugin: t.name, name: "seq ADD"}
		t.seqDel = phase{plugin: t.name, name: "seq DEL"}
		t.parAdd = phase{plugin: t.name, name: fmt.Sprintf("%d-par ADD", parallel)}
		t.parDel = phase{plugin: t.name, name: fmt.Sprintf("%d-par DEL", parallel)}
	}
	for i := range pods {
		for _, t := range targets {
			t.seqAdd.samples = append(t.seqAdd.samples, timed(func() error { _, err := t.node.Add(ctx, t.list, t.rt(i)); return err }))
		}
	}
	for i := range pods {
		for _, t := range targets {
			t.seqDel.samples = append(t.seqDel.samples, timed(func() error { return t.node.Del(ctx, t.list, t.rt(i)) }))
		}
	}

	// Parallel phases: one plugin at a time, the order rotating each round.
	for r := range rounds {
		for k := range targets {
			t := targets[(r+k)%len(targets)]
			add := make([]sample, parallel)
			del := make([]sample, parallel)
			concurrently(parallel, func(i int) {
				add[i] = timed(func() error { _, err := t.node.Add(ctx, t.list, t.rt(pods+i)); return err })
			})
			concurrently(parallel, func(i int) {
				del[i] = timed(func() error { return t.node.Del(ctx, t.list, t.rt(pods+i)) })
			})
			t.parAdd.samples = append(t.parAdd.samples, add...)
			t.parDel.samples = append(t.parDel.samples, del...)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if scaleN > 0 {
		if err := scale(ctx, targets, full, scaleN); err != nil {
			return err
		}
	}

	var results []phase
	for _, t := range targets {
		results = append(results, t.seqAdd, t.seqDel, t.parAdd, t.parDel)
		if scaleN > 0 {
			results = append(results, t.addAt1, t.addAtFull)
		}
	}
	return report(os.Stdout, results, mtu, rounds, tmp)
}

// scale measures how ADD grows with the pods on the node: n ADDs (each
// followed by its DEL, unmeasured) of one pod on an empty node, then, with
// full-1 other pods attached (unmeasured), n ADDs (each with its DEL) of the
// last one. Plugins are interleaved sample by sample; every pod is deleted at
// the end.
func scale(ctx context.Context, targets []*target, full, n int) error {
	for _, t := range targets {
		t.addAt1 = phase{plugin: t.name, name: "ADD at 1"}
		t.addAtFull = phase{plugin: t.name, name: fmt.Sprintf("ADD at %d", full)}
	}
	last := full - 1
	sampleAdd := func(ph *phase, t *target) error {
		s := timed(func() error { _, err := t.node.Add(ctx, t.list, t.rt(last)); return err })
		ph.samples = append(ph.samples, s)
		if err := t.node.Del(ctx, t.list, t.rt(last)); err != nil {
			return fmt.Errorf("%s: scale phase DEL: %w", t.name, err)
		}
		return ctx.Err()
	}
	for range n {
		for _, t := range targets {
			if err := sampleAdd(&t.addAt1, t); err != nil {
				return err
			}
		}
	}
	for i := range last {
		for _, t := range targets {
			if _, err := t.node.Add(ctx, t.list, t.rt(i)); err != nil {
				return fmt.Errorf("%s: scale phase fill ADD %d: %w", t.name, i, err)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for range n {
		for _, t := range targets {
			if err := sampleAdd(&t.addAtFull, t); err != nil {
				return err
			}
		}
	}
	var errs []error
	for _, t := range targets {
		for i := range last {
			if err := t.node.Del(ctx, t.list, t.rt(i)); err != nil {
				errs = append(errs, fmt.Errorf("%s: scale phase DEL %d: %w", t.name, i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// defaultWorkDir is /dev/shm when it is a tmpfs: routelet's state dir
// (/run/routelet) lives on tmpfs on a normal host, and on a disk file system
// its fsyncs would dominate. Else the system temp dir.
func defaultWorkDir() string {
	if fsType("/dev/shm") == "tmpfs" {
		return "/dev/shm"
	}
	return os.TempDir()
}

// fsType names the file system holding path: "tmpfs" or "other".
func fsType(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		return "tmpfs"
	}
	return "other"
}

// target is one plugin under test: its own node namespace, its conflist and
// pod namespaces created up front, and the samples measured so far.
type target struct {
	name                           string
	node                           *netnstest.Node
	list                           *libcni.NetworkConfigList
	pods                           []ns.NetNS
	seqAdd, seqDel, parAdd, parDel phase
	addAt1, addAtFull              phase
}

// newTarget creates the node and n pod namespaces for one plugin. On error it
// returns what it made so far, for close.
func newTarget(name, binDir, work string, list *libcni.NetworkConfigList, n int) (*target, error) {
	node, err := netnstest.NewNode(nsPrefix+name+"-node", []string{binDir}, filepath.Join(work, "cache"))
	if err != nil {
		return nil, err
	}
	t := &target{name: name, node: node, list: list}
	for i := range n {
		p, err := netnstest.NewNamed(fmt.Sprintf("%s%s-pod%03d", nsPrefix, name, i))
		if err != nil {
			return t, err
		}
		t.pods = append(t.pods, p)
	}
	return t, nil
}

// close removes the pod and node namespaces (and with them every veth).
func (t *target) close() error {
	var errs []error
	for _, p := range t.pods {
		errs = append(errs, netnstest.Remove(p))
	}
	return errors.Join(append(errs, t.node.Close())...)
}

// rt is the runtime config of pod i, with the arguments containerd passes.
func (t *target) rt(i int) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: fmt.Sprintf("bench%03d", i),
		NetNS:       t.pods[i].Path(),
		IfName:      "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"},
			{"K8S_POD_NAME", fmt.Sprintf("pod%03d", i)}},
	}
}

// timed runs op and measures it.
func timed(op func() error) sample {
	start := time.Now()
	err := op()
	return sample{time.Since(start), err}
}

// concurrently runs f(0..n-1) in n goroutines released together.
func concurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// percentile returns the nearest-rank q-quantile (0 < q ≤ 1) of the
// successful samples, and how many failed.
func percentile(s []sample, q float64) (time.Duration, int) {
	var ds []time.Duration
	fails := 0
	for _, x := range s {
		if x.err != nil {
			fails++
			continue
		}
		ds = append(ds, x.d)
	}
	if len(ds) == 0 {
		return 0, fails
	}
	slices.Sort(ds)
	rank := int(q*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(rank, len(ds)-1))], fails
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// report prints the table and the ratios; it returns an error when any
// operation failed.
func report(w *os.File, phases []phase, mtu, rounds int, dir string) error {
	fmt.Fprintf(w, "CNI plugin bench: libcni from a fresh node netns per plugin, cniVersion 1.1.0, MTU %d, one /24;\n", mtu)
	fmt.Fprintf(w, "stateDir/dataDir under %s (%s file system);\n", filepath.Dir(dir), fsType(dir))
	fmt.Fprintf(w, "sequential phases interleaved pod by pod, parallel phase %d rounds (samples pooled)\n", rounds)
	fmt.Fprintf(w, "%-14s %-12s %4s %5s %9s %9s\n", "plugin", "phase", "n", "fail", "p50 ms", "p99 ms")
	p50 := map[string]time.Duration{}
	total := 0
	var firstErrs []string
	for _, ph := range phases {
		a, fails := percentile(ph.samples, 0.50)
		b, _ := percentile(ph.samples, 0.99)
		total += fails
		p50[ph.plugin+" "+ph.name] = a
		label := ph.plugin
		if label == "ptp" {
			label = "ptp+host-local"
		}
		fmt.Fprintf(w, "%-14s %-12s %4d %5d %9s %9s\n", label, ph.name, len(ph.samples), fails, ms(a), ms(b))
		for _, s := range ph.samples {
			if s.err != nil && len(firstErrs) < 3 {
				firstErrs = append(firstErrs, fmt.Sprintf("%s %s: %v", ph.plugin, ph.name, s.err))
			}
		}
	}
	for _, ph := range phases {
		if ph.plugin != "routelet" {
			continue
		}
		r, p := p50["routelet "+ph.name], p50["ptp "+ph.name]
		if p > 0 && r > 0 {
			fmt.Fprintf(w, "ratio routelet/ptp+host-local %-12s p50 %.2f\n", ph.name, float64(r)/float64(p))
		}
	}
	for _, ph := range phases {
		if ph.name == "ADD at 1" || !strings.HasPrefix(ph.name, "ADD at ") {
			continue
		}
		a, b := p50[ph.plugin+" ADD at 1"], p50[ph.plugin+" "+ph.name]
		if a > 0 && b > 0 {
			label := ph.plugin
			if label == "ptp" {
				label = "ptp+host-local"
			}
			fmt.Fprintf(w, "growth %-14s %s / ADD at 1 p50 %.2f\n", label, ph.name, float64(b)/float64(a))
		}
	}
	fmt.Fprintf(w, "failures: %d\n", total)
	for _, e := range firstErrs {
		slog.Error("bench failure", "err", e)
	}
	if total > 0 {
		return fmt.Errorf("%d operations failed", total)
	}
	return nil
}
