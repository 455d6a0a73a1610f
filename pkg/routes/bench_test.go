package routes

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	benchIfaces       = 1000
	benchRoutesPerIfc = 10
)

// benchEnv is a namespace with benchIfaces veth pairs (cali0000…, peers
// p0000…), created with "ip -batch" (setup is not measured).
type benchEnv struct {
	*kernelEnv
	dir     string
	targets map[string][]Target
	// routeBatch programs the same 10k routes as the RouteTable would.
	routeBatch string
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	e := &benchEnv{kernelEnv: newKernelEnv(b), dir: b.TempDir(), targets: map[string][]Target{}}
	var links, routes strings.Builder
	base := netip.MustParseAddr("10.0.0.0").As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for i := range benchIfaces {
		name := fmt.Sprintf("cali%04d", i)
		fmt.Fprintf(&links, "link add %s type veth peer name p%04d\nlink set %s up\nlink set p%04d up\n", name, i, name, i)
		for range benchRoutesPerIfc {
			n++
			a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
			e.targets[name] = append(e.targets[name], Target{CIDR: netip.PrefixFrom(a, 32)})
			fmt.Fprintf(&routes, "route replace %s/32 dev %s proto 80 scope link\n", a, name)
		}
	}
	e.routeBatch = filepath.Join(e.dir, "routes.batch")
	if err := os.WriteFile(e.routeBatch, []byte(routes.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	linkBatch := filepath.Join(e.dir, "links.batch")
	if err := os.WriteFile(linkBatch, []byte(links.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	e.ip("-batch", linkBatch)
	return e
}

// timeIP runs "ip -n <ns> args..." and returns how long it took, output
// discarded (the process start is included, as for any operator).
func (e *benchEnv) timeIP(args ...string) time.Duration {
	e.t.Helper()
	cmd := exec.Command("ip", append([]string{"-n", e.name}, args...)...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
	return time.Since(start)
}

func (e *benchEnv) flush() {
	e.t.Helper()
	e.ip("-4", "route", "flush", "proto", "80")
}

func (e *benchEnv) newTable() *RouteTable {
	rt := e.table(Config{
		IPVersion:            4,
		InterfacePrefixes:    []string{"cali"},
		RemoveExternalRoutes: true,
	}, nil)
	for name, ts := range e.targets {
		rt.SetRoutes(name, ts)
	}
	return rt
}

func (e *benchEnv) countRoutes() int {
	return strings.Count(e.ip("-4", "route", "show", "proto", "80"), "\n")
}

// median returns the median of ds (ds is sorted in place).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// Trials per sub-benchmark. The box is shared and noisy, so each number is
// the median of several interleaved runs of ours and the baseline.
const (
	trialsFromEmpty = 5
	trialsResync    = 11
	trialsChange    = 101
)

// BenchmarkRouteTable10k measures the RouteTable on the real kernel: a
// namespace with 1,000 veths and 10,000 /32 routes (10 per veth), against
// iproute2 in the same run. Run it with `make bench` (as root). ns/op is the
// median of the trials; the x-* metrics divide our median by iproute2's.
func BenchmarkRouteTable10k(b *testing.B) {
	e := newBenchEnv(b)
	total := benchIfaces * benchRoutesPerIfc

	b.Run("from-empty", func(b *testing.B) {
		var ours, theirs []time.Duration
		for range b.N * trialsFromEmpty {
			e.flush()
			theirs = append(theirs, e.timeIP("-batch", e.routeBatch))
			if n := e.countRoutes(); n != total {
				b.Fatalf("ip -batch programmed %d routes, want %d", n, total)
			}
			e.flush()
			rt := e.newTable()
			start := time.Now()
			if err := rt.Apply(); err != nil {
				b.Fatal(err)
			}
			ours = append(ours, time.Since(start))
			if n := e.countRoutes(); n != total {
				b.Fatalf("RouteTable programmed %d routes, want %d", n, total)
			}
			rt.Close()
		}
		o, t := median(ours), median(theirs)
		b.ReportMetric(float64(o.Nanoseconds()), "ns/op")
		b.ReportMetric(float64(o)/float64(t), "x-ip-batch")
		b.ReportMetric(float64(t.Microseconds())/1e3, "ip-batch-ms")
	})

	rt := e.newTable()
	if err := rt.Apply(); err != nil {
		b.Fatal(err)
	}
	defer rt.Close()

	b.Run("no-change-resync", func(b *testing.B) {
		var ours, theirs []time.Duration
		var writes uint64
		for range b.N * trialsResync {
			theirs = append(theirs, e.timeIP("-4", "route", "show", "table", "main"))
			rt.QueueResync()
			took, w := timedApply(b, rt)
			ours = append(ours, took)
			writes += w
		}
		if writes != 0 {
			b.Errorf("no-change resync made %d netlink writes, want 0", writes)
		}
		o, t := median(ours), median(theirs)
		b.ReportMetric(float64(o.Nanoseconds()), "ns/op")
		b.ReportMetric(float64(writes), "writes")
		b.ReportMetric(float64(o)/float64(t), "x-ip-route-show")
		b.ReportMetric(float64(t.Microseconds())/1e3, "ip-show-ms")
	})

	b.Run("one-route-change", func(b *testing.B) {
		name := "cali0500"
		ts := e.targets[name]
		var ours []time.Duration
		var writes uint64
		n := b.N * trialsChange
		for i := range n {
			t := ts[3]
			t.MTU = 1300 + i%100
			rt.RouteUpdate(name, t)
			took, w := timedApply(b, rt)
			ours = append(ours, took)
			writes += w
		}
		want := fmt.Sprintf("%s dev %s proto 80 scope link mtu %d", ts[3].CIDR.Addr(), name, 1300+(n-1)%100)
		if out := e.ip("-4", "route", "show", ts[3].CIDR.String()); strings.TrimSpace(out) != want {
			b.Fatalf("after change: %q, want %q", out, want)
		}
		o := median(ours)
		b.ReportMetric(float64(o.Nanoseconds()), "ns/op")
		b.ReportMetric(float64(ours[len(ours)*9/10].Microseconds()), "p90-us")
		b.ReportMetric(float64(writes)/float64(n), "writes/op")
	})
}

// timedApply runs rt.Apply and returns how long it took and how many
// netlink writes it made.
func timedApply(b *testing.B, rt *RouteTable) (time.Duration, uint64) {
	b.Helper()
	before := rt.Stats().Writes
	start := time.Now()
	if err := rt.Apply(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start), rt.Stats().Writes - before
}
