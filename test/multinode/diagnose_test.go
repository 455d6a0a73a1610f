package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/daemon/diagnose"
	"github.com/routelet/routelet/internal/cluster"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/overlay"
)

// vxlanArgs are the flags the diagnose tests' daemons run with.
var vxlanArgs = append(slices.Clone(baseArgs), "--encapsulation=vxlan")

// diagnoseRun is one routeletd diagnose run.
type diagnoseRun struct {
	rep  diagnose.Report
	code int
	out  string
}

// failing lists the failed steps as "id" or "id/v".
func (r diagnoseRun) failing() []string {
	var out []string
	for _, s := range r.rep.Steps {
		if s.Status == diagnose.Fail {
			id := s.ID
			if s.Family != 0 {
				id = fmt.Sprintf("%s/%d", s.ID, s.Family)
			}
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// step returns the first step with id (and family v, when not 0).
func (r diagnoseRun) step(id string, v int) (diagnose.Step, bool) {
	for _, s := range r.rep.Steps {
		if s.ID == id && (v == 0 || s.Family == v) {
			return s, true
		}
	}
	return diagnose.Step{}, false
}

// diagnoseIn runs routeletd diagnose in n with the daemon's identity and
// --output=json, then args (flags, SRC, DST), in VXLAN mode.
func diagnoseIn(t *testing.T, n *node, args ...string) diagnoseRun {
	t.Helper()
	return diagnoseMode(t, n, []string{"--encapsulation=vxlan"}, args...)
}

// diagnoseMode is diagnoseIn with the daemon's mode flags.
func diagnoseMode(t *testing.T, n *node, mode []string, args ...string) diagnoseRun {
	t.Helper()
	full := append(append([]string{"diagnose", "--output=json", "--node-name=" + n.Spec.Name, "--state-dir=" + n.StateDir}, mode...), args...)
	out, err := netnstest.Exec(context.Background(), n.CNI.NS, filepath.Join(binDir, "routeletd"), full...)
	r := diagnoseRun{out: out}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("routeletd diagnose: %v", err)
	}
	if r.code != 2 {
		if jerr := json.Unmarshal([]byte(out), &r.rep); jerr != nil {
			t.Fatalf("routeletd diagnose %v: exit %d, output is not a report (%v):\n%s", args, r.code, jerr, out)
		}
	}
	return r
}

// podRef is how diagnose on node on names pod p (placed on pn): by
// namespace/name when it is on that node, else by its address of family v.
func podRef(on, pn *node, p *cluster.Pod, v int) string {
	if on == pn {
		return "demo/" + p.Name
	}
	if v == 6 {
		return p.IPv6.String()
	}
	return p.IPv4.String()
}

// cleanPairs diagnoses every ordered pair of pods over IPv4 and IPv6, on
// the source's node and on the destination's, and fails t for any that
// is not clean (exit 0, no failed step). It returns the number of runs.
func (c *testCluster) cleanPairs(t *testing.T, mode []string) int {
	pods := c.allPods()
	runs := 0
	for _, from := range pods {
		for _, to := range pods {
			if from.p == to.p {
				continue
			}
			for _, v := range []int{4, 6} {
				for _, on := range []*node{from.n, to.n} {
					if on == to.n && on == from.n && v == 6 {
						continue // same node: once is enough
					}
					src, dst := podRef(on, from.n, from.p, v), podRef(on, to.n, to.p, v)
					r := diagnoseMode(t, on, mode, src, dst)
					runs++
					if r.code != 0 || !r.rep.OK {
						t.Errorf("diagnose %s → %s on %s: exit %d, failing %v:\n%s", src, dst, on.Spec.Name, r.code, r.failing(), r.out)
					}
				}
			}
		}
	}
	return runs
}

// TestDiagnoseHealthy: on a healthy three-node VXLAN cluster every ordered
// pair of pods diagnoses clean (exit 0, no failed step) over IPv4 and
// IPv6, run on the source's node and on the destination's, and so do a pod
// and a peer node; a DF probe of the pod MTU comes back over both
// families; an unknown name is exit 2 naming it.
func TestDiagnoseHealthy(t *testing.T) {
	c := newCluster(t, "--encapsulation=vxlan")
	c.checkAll("vxlan")
	t.Logf("%d clean runs", c.cleanPairs(t, []string{"--encapsulation=vxlan"}))
	a := c.node("a")
	for _, dst := range []string{"b", "c"} {
		if r := diagnoseIn(t, a, "demo/a-pod0", dst); r.code != 0 {
			t.Errorf("diagnose demo/a-pod0 → node %s: exit %d, failing %v:\n%s", dst, r.code, r.failing(), r.out)
		}
	}
	for _, dst := range []string{c.node("c").Pods[0].IPv4.String(), c.node("c").Pods[0].IPv6.String(), "demo/a-pod1"} {
		r := diagnoseIn(t, a, "--probe", "demo/a-pod0", dst)
		if s, ok := r.step(diagnose.StepProbe, 0); r.code != 0 || !ok || s.Status != diagnose.Pass {
			t.Errorf("probe a-pod0 → %s: exit %d, probe step %+v:\n%s", dst, r.code, s, r.out)
		}
	}
	for _, bad := range [][]string{{"demo/nosuch", "demo/a-pod1"}, {"demo/a-pod0", "not-a-node"}, {"demo/a-pod0", "127.0.0.1"}} {
		r := diagnoseIn(t, a, bad...)
		if r.code != 2 || !strings.Contains(r.out, fmt.Sprintf("%q", slices.DeleteFunc(slices.Clone(bad), func(s string) bool { return s == "demo/a-pod0" || s == "demo/a-pod1" })[0])) {
			t.Errorf("diagnose %v: exit %d, want 2 naming the bad value:\n%s", bad, r.code, r.out)
		}
	}
}

// TestDiagnoseOtherModes: with cross-subnet VXLAN (a and b direct, c
// through the tunnel) and without encapsulation (a and b only), every pair
// of pods that the mode connects diagnoses clean, and with encapsulation
// none a pod on c is named unroutable: not on our subnet.
func TestDiagnoseOtherModes(t *testing.T) {
	mode := []string{"--encapsulation=vxlan", "--cross-subnet"}
	c := newCluster(t, mode...)
	c.checkAll("vxlan-cross-subnet")
	t.Logf("cross-subnet: %d clean runs", c.cleanPairs(t, mode))
	a, b := c.node("a"), c.node("b")
	r := diagnoseMode(t, a, mode, "demo/a-pod0", b.Pods[0].IPv4.String())
	if s, _ := r.step(diagnose.StepRoute, 4); !strings.Contains(s.Fact, "(direct)") {
		t.Errorf("a → b with cross-subnet: route step %+v, want the direct route", s)
	}

	none := []string{"--encapsulation=none"}
	c = newCluster(t, none...)
	c.checkAll("none")
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	for _, pair := range [][2]*node{{a, b}, {b, a}} {
		for _, p := range pair[0].Pods {
			for _, q := range pair[1].Pods {
				if r := diagnoseMode(t, pair[0], none, "demo/"+p.Name, q.IPv4.String()); r.code != 0 {
					t.Errorf("none: %s → %s: exit %d, failing %v:\n%s", p.Name, q.Name, r.code, r.failing(), r.out)
				}
			}
		}
	}
	r = diagnoseMode(t, a, none, "demo/a-pod0", cn.Pods[0].IPv4.String())
	if s, _ := r.step(diagnose.StepRoute, 4); r.code != 1 || !slices.Equal(r.failing(), []string{"route/4"}) || !strings.Contains(s.Problem, "L2 adjacency") {
		t.Errorf("none: a → c: exit %d, failing %v, route %+v; want route/4 naming L2 adjacency", r.code, r.failing(), s)
	}
}

// TestDiagnoseBroken: each broken state an operator meets is named by
// exactly the step that reads it (and only that step fails), diagnose
// exits 1, and after the repair the same pair diagnoses clean again.
func TestDiagnoseBroken(t *testing.T) {
	c := newCluster(t, "--encapsulation=vxlan")
	c.checkAll("vxlan")
	a, b := c.node("a"), c.node("b")
	ap, bp := a.Pods[0], b.Pods[0]
	ctx := context.Background()
	bv4 := bp.IPv4.String()
	exe := func(in ns.NetNS, args ...string) {
		t.Helper()
		if _, err := netnstest.Exec(ctx, in, args[0], args[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	restart := func(n *node) {
		t.Helper()
		if err := c.c.Restart(ctx, n.Node, vxlanArgs...); err != nil {
			t.Fatal(err)
		}
	}
	stop := func(n *node) {
		t.Helper()
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	recordOfB := func(edit func(rec map[string]any)) {
		t.Helper()
		rec, err := b.Store.GetNode("b")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{"vtepMAC": rec.VTEPMAC, "blocks": rec.Blocks}
		edit(m)
		rec.VTEPMAC = m["vtepMAC"].(string)
		rec.Blocks = m["blocks"].([]string)
		rec.Updated = time.Now().UTC()
		putRecord(t, a, *rec)
	}
	restoreRecord := func() {
		t.Helper()
		if err := cluster.CopyRecord(b.Node, a.Node); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		name     string
		on       *node
		src, dst string
		flags    []string
		break_   func()
		want     []string // the failing steps
		says     string   // in the failed step's problem
		repair   func()
	}{
		{
			name: "peer record missing", on: a, src: "demo/" + ap.Name, dst: bv4,
			break_: func() {
				if err := a.Store.DeleteNode("b"); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"peer-record/4"}, says: "peer record is missing", repair: restoreRecord,
		},
		{
			name: "VTEP MAC wrong", on: a, src: "demo/" + ap.Name, dst: bv4,
			break_: func() { recordOfB(func(m map[string]any) { m["vtepMAC"] = "02:00:00:00:0b:04" }) },
			want:   []string{"vtep/4"}, says: overlay.VTEPMAC("b", 4).String(), repair: restoreRecord,
		},
		{
			name: "FDB deleted, daemon stopped", on: a, src: "demo/" + ap.Name, dst: bv4, flags: []string{"--probe"},
			break_: func() {
				stop(a)
				exe(a.CNI.NS, "bridge", "fdb", "del", overlay.VTEPMAC("b", 4).String(), "dev", "vxlan.calico", "dst", hostAddr(b.Spec.Host4))
			},
			want: []string{"probe/4", "vtep-fdb/4"}, says: "no underlay destination", repair: func() { restart(a) },
		},
		{
			name: "allowlist member missing on the far side", on: b, src: ap.IPv4.String(), dst: "demo/" + bp.Name,
			break_: func() {
				stop(b)
				exe(b.CNI.NS, "ipset", "del", "routelet-vxlan-peers", hostAddr(a.Spec.Host4))
			},
			want: []string{"allowlist/4"}, says: "missing from routelet-vxlan-peers", repair: func() { restart(b) },
		},
		{
			name: "pod route missing, daemon stopped", on: a, src: "demo/" + ap.Name, dst: bv4,
			break_: func() {
				stop(a)
				exe(a.CNI.NS, "ip", "route", "del", ap.IPv4.String()+"/32", "dev", ap.HostIface)
			},
			want: []string{"src-host-route/4"}, says: "is missing", repair: func() { restart(a) },
		},
		{
			name: "MTU mismatch", on: a, src: "demo/" + ap.Name, dst: bv4,
			break_: func() { exe(ap.NS, "ip", "link", "set", "eth0", "mtu", "1500") },
			want:   []string{"src-pod-mtu"}, says: "MTU 1500",
			repair: func() {
				exe(ap.NS, "ip", "link", "set", "eth0", "mtu", fmt.Sprint(podMTU))
			},
		},
		{
			name: "overlapping peer block refused", on: a, src: "demo/" + ap.Name, dst: "10.244.1.130",
			break_: func() {
				recordOfB(func(m map[string]any) { m["blocks"] = append(m["blocks"].([]string), "10.244.1.128/25") })
			},
			want: []string{"route/4"}, says: "10.244.1.128/25 missing: node b's block was refused", repair: restoreRecord,
		},
		{
			name: "veth down, daemon stopped", on: a, src: "demo/" + ap.Name, dst: bv4,
			break_: func() {
				stop(a)
				exe(a.CNI.NS, "ip", "link", "set", ap.HostIface, "down")
			},
			want: []string{"src-veth"}, says: "is down", repair: func() { restart(a) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append(slices.Clone(tc.flags), tc.src, tc.dst)
			clean := append(slices.Clone(tc.flags), tc.src, tc.dst)
			if strings.Contains(tc.dst, "10.244.1.130") {
				clean = []string{tc.src, bv4} // the address means nothing before the break
			}
			netnstest.WaitFor(t, 10*time.Second, "the pair diagnoses clean before the break", func() error {
				if r := diagnoseIn(t, tc.on, clean...); r.code != 0 {
					return fmt.Errorf("exit %d, failing %v", r.code, r.failing())
				}
				return nil
			})
			tc.break_()
			var last diagnoseRun
			netnstest.WaitFor(t, 10*time.Second, "diagnose names "+strings.Join(tc.want, ", "), func() error {
				last = diagnoseIn(t, tc.on, args...)
				if last.code != 1 || !slices.Equal(last.failing(), tc.want) {
					return fmt.Errorf("exit %d, failing %v, want exit 1 and %v", last.code, last.failing(), tc.want)
				}
				return nil
			})
			id, _, _ := strings.Cut(tc.want[len(tc.want)-1], "/")
			if s, _ := last.step(id, 0); !strings.Contains(s.Problem, tc.says) || s.Fix == "" {
				t.Errorf("step %s: problem %q, fix %q; want the problem to say %q and a fix", id, s.Problem, s.Fix, tc.says)
			}
			if tc.name == "allowlist member missing on the far side" {
				// The source's node cannot see b's sets: it says where it is checked.
				r := diagnoseIn(t, a, "demo/"+ap.Name, bv4)
				if s, ok := r.step(diagnose.StepAllowlistFar, 4); !ok || s.Status != diagnose.Info || !strings.Contains(s.Fix, "node b") {
					t.Errorf("on a: allowlist-far step %+v, want an info step pointing at node b", s)
				}
			}
			// The text output names the same cause with its ✗.
			txt, _ := netnstest.Exec(ctx, tc.on.CNI.NS, filepath.Join(binDir, "routeletd"), append([]string{"diagnose", "--node-name=" + tc.on.Spec.Name,
				"--state-dir=" + tc.on.StateDir, "--encapsulation=vxlan"}, args...)...)
			if !strings.Contains(txt, "✗ "+id) {
				t.Errorf("text output lacks ✗ %s:\n%s", id, txt)
			}
			tc.repair()
			c.checkAll("vxlan")
			netnstest.WaitFor(t, 10*time.Second, "the pair diagnoses clean after the repair", func() error {
				if r := diagnoseIn(t, tc.on, clean...); r.code != 0 {
					return fmt.Errorf("exit %d, failing %v", r.code, r.failing())
				}
				return nil
			})
		})
	}
}
