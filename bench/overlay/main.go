// Command overlay measures what the VXLAN overlay costs in TCP throughput:
// in one run it builds two simulated nodes on one underlay bridge (see
// internal/cluster) running routeletd with --encapsulation=vxlan, attaches
// one pod per node through the plugin, and runs iperf3 twice — host to host
// over the underlay (node a's eth0 → node b's eth0), then pod to pod across
// the nodes, which the routes send through vxlan.calico — alternating
// -rounds times so background load hits both alike. It prints each
// transfer's rate, the medians and the overlay/underlay ratio (target
// ≥ 0.8). -encapsulation none measures the same pod path without
// encapsulation (host-gw), which separates the cost of VXLAN from that of
// the pods' extra hops. Everything runs in network namespaces and is
// removed at the end, also on Ctrl-C.
//
// Run as root: go run ./bench/overlay (or make bench).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
)

const benchPrefix = "routelet-ovbench-"

var nsPrefix = netnstest.OwnedPrefix(benchPrefix)

func main() {
	secs := flag.Int("t", 5, "seconds per iperf3 transfer")
	rounds := flag.Int("rounds", 1, "underlay/overlay transfer pairs")
	encap := flag.String("encapsulation", "vxlan", "routeletd --encapsulation for the pod transfer (none: host-gw, a reference without encapsulation)")
	binDir := flag.String("plugin-dir", "bin", "directory holding the routelet plugin and routeletd (built into a temp dir when missing)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *binDir, *encap, *secs, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "overlay bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, binDir, encap string, secs, rounds int) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return errors.New("iperf3 not found: install it (make deps)")
	}
	if _, err := cluster.RemoveStale(benchPrefix); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "routelet-ovbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	pluginDir, daemon, err := binaries(ctx, binDir, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	c, err := cluster.New(cluster.Options{Prefix: nsPrefix, PluginDir: pluginDir, Daemon: daemon, WorkDir: work,
		DaemonArgs: []string{"--encapsulation=" + encap, "--health-addr="},
		Nodes: []cluster.NodeSpec{
			{Name: "a", Host4: "10.0.1.10/24", Gw4: "10.0.1.1", Block4: "10.244.1.0/24"},
			{Name: "b", Host4: "10.0.1.11/24", Gw4: "10.0.1.1", Block4: "10.244.2.0/24"},
		}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	if err := c.Start(ctx); err != nil {
		return err
	}
	a, b := c.Nodes[0], c.Nodes[1]
	pa, err := c.AddPod(ctx, a, "bench-a")
	if err != nil {
		return err
	}
	pb, err := c.AddPod(ctx, b, "bench-b")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "overlay bench: iperf3 -t %d, %d round(s); nodes a 10.0.1.10 and b 10.0.1.11 on one bridge (MTU 1500); pods %s → %s, encapsulation %s\n",
		secs, rounds, pa.IPv4, pb.IPv4, encap)
	var under, over []float64
	for i := range rounds {
		u, err := iperf(ctx, netnstest.Name(a.CNI.NS), netnstest.Name(b.CNI.NS), "10.0.1.11", secs)
		if err != nil {
			return fmt.Errorf("underlay transfer: %w", err)
		}
		o, err := iperf(ctx, netnstest.Name(pa.NS), netnstest.Name(pb.NS), pb.IPv4.String(), secs)
		if err != nil {
			return fmt.Errorf("overlay transfer: %w", err)
		}
		fmt.Fprintf(w, "  round %d: underlay host→host %6.2f Gbit/s   pod→pod %6.2f Gbit/s\n", i+1, u, o)
		under, over = append(under, u), append(over, o)
	}
	mu, mo := median(under), median(over)
	ratio := mo / mu
	verdict := "meets"
	if ratio < 0.8 {
		verdict = "BELOW"
	}
	fmt.Fprintf(w, "underlay %.2f Gbit/s, pod→pod (%s) %.2f Gbit/s (medians): ratio %.2f, %s the 0.80 target\n", mu, encap, mo, ratio, verdict)
	return nil
}

// iperf runs an iperf3 server in the namespace named srv and a client in
// cli sending to dst for secs seconds; it returns the receiver's rate in
// Gbit/s.
func iperf(ctx context.Context, cli, srv, dst string, secs int) (float64, error) {
	port := "5201"
	server := exec.Command("ip", "netns", "exec", srv, "iperf3", "-s", "-1", "-p", port)
	server.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	serverOut := &lockedBuffer{}
	server.Stdout, server.Stderr = serverOut, serverOut
	if err := server.Start(); err != nil {
		return 0, err
	}
	defer func() { server.Process.Kill(); server.Wait() }()
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	// The server needs a moment to listen: a refused connection is retried.
	// (iperf3 -J reports errors in its JSON and may still exit 0.)
	for try := 0; ; try++ {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", cli, "iperf3", "-c", dst, "-p", port,
			"-t", strconv.Itoa(secs), "-J").Output()
		res.Error = ""
		if jerr := json.Unmarshal(out, &res); jerr != nil {
			return 0, errors.Join(err, fmt.Errorf("iperf3 output: %w", jerr))
		}
		if err == nil && res.Error == "" {
			break
		}
		if try == 50 || ctx.Err() != nil || !strings.Contains(res.Error, "unable to connect") {
			return 0, fmt.Errorf("iperf3 -c %s: %v %s (server: %s)", dst, err, res.Error, strings.TrimSpace(serverOut.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return res.End.SumReceived.BitsPerSecond / 1e9, nil
}

// lockedBuffer collects a child's output; safe to read while it writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// binaries returns the plugin dir and routeletd path: binDir's when both
// exist, else built into built.
func binaries(ctx context.Context, binDir, built string) (pluginDir, daemon string, err error) {
	pluginDir, daemon = binDir, filepath.Join(binDir, "routeletd")
	if _, err := os.Stat(filepath.Join(binDir, "routelet")); err != nil {
		pluginDir = built
		if err := netnstest.BuildRoutelet(ctx, built); err != nil {
			return "", "", err
		}
	}
	if _, err := os.Stat(daemon); err != nil {
		daemon = filepath.Join(built, "routeletd")
		if err := netnstest.BuildRouteletd(ctx, built); err != nil {
			return "", "", err
		}
	}
	return pluginDir, daemon, nil
}
