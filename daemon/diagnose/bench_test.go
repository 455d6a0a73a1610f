package diagnose

import (
	"testing"

	"github.com/routelet/routelet/pkg/state"
)

// Scale of the benchmarks: a node with 250 pods and 1,000 peers.
const (
	benchPods  = 250
	benchPeers = 1000
)

// benchPairs are the pairs each iteration diagnoses: a pod to a pod on a
// peer (the longest walk), and a peer's pod to one of ours.
var benchPairs = [][2]string{{"demo/pod-0", "10.103.231.5"}, {"fd00:245:3e7::9", "demo/pod-249"}}

// runBench diagnoses benchPairs on st and a counted fake kernel and
// reports the kernel reads per diagnose.
func runBench(b *testing.B, n *fakeNode, st State) {
	k := NewCounted(n.k)
	runs := 0
	for b.Loop() {
		for _, p := range benchPairs {
			rep, err := Run(n.cfg, st, k, p[0], p[1], Options{})
			if err != nil {
				b.Fatal(err)
			}
			if !rep.OK {
				b.Fatalf("diagnose %v is not clean: %+v", p, rep.Steps)
			}
			runs++
		}
	}
	_, total := k.ByMethod()
	b.ReportMetric(float64(total)/float64(runs), "kernel-reads/diagnose")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(runs)/1000, "ms/diagnose")
}

// BenchmarkDiagnose: the checks and the desired state of a 250-pod,
// 1,000-peer node, records in memory.
func BenchmarkDiagnose(b *testing.B) {
	n := newFakeNode(benchPods, benchPeers)
	runBench(b, n, n.st)
}

// BenchmarkDiagnoseStateDir: the same with every record read from a real
// state directory (250 workload and 1,001 node records), as the command
// reads it.
func BenchmarkDiagnoseStateDir(b *testing.B) {
	n := newFakeNode(benchPods, benchPeers)
	dir := b.TempDir()
	store, err := state.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range n.st.wl {
		if err := store.PutWorkload(w); err != nil {
			b.Fatal(err)
		}
	}
	for _, r := range n.st.nodes {
		if err := store.PutNode(&state.Node{Name: r.Name, HostIPv4: r.HostIPv4, HostIPv6: r.HostIPv6, Blocks: r.Blocks,
			VTEPMAC: r.VTEPMAC, VTEPMACv6: r.VTEPMACv6, TunnelIPv4: r.TunnelIPv4, TunnelIPv6: r.TunnelIPv6, Updated: r.Updated}); err != nil {
			b.Fatal(err)
		}
	}
	if err := store.WriteDaemonStatus(n.st.status); err != nil {
		b.Fatal(err)
	}
	st, err := OpenStateDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	runBench(b, n, st)
}
