package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/diagnose"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/netnstest"
)

// verdicts are a diagnose report's steps without their facts: what each
// step said.
func verdicts(rep *diagnose.Report) []string {
	var out []string
	for _, s := range rep.Steps {
		out = append(out, fmt.Sprintf("%s/%d %s", s.ID, s.Family, s.Status))
	}
	return out
}

// diagnoseWith runs `routeletd diagnose --output json` with args before
// SRC and DST and returns the report, the exit status and stderr.
func (tn *testNode) diagnoseWith(t *testing.T, args ...string) (*diagnose.Report, int, string) {
	t.Helper()
	out, errs, code := tn.runIn(append(append([]string{"diagnose", "--output", "json"}, args...), "node-z", "10.244.8.5")...)
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("diagnose %q exited %d: %v\n%s\n%s", args, code, err, out, errs)
	}
	return &rep, code, errs
}

// statusWith runs `routeletd status --output json` with args.
func (tn *testNode) statusWith(t *testing.T, args ...string) (*statusapi.State, string) {
	t.Helper()
	out, errs, code := tn.runIn(append([]string{"status", "--output", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("status %q exited %d: %s", args, code, errs)
	}
	st, err := parseState(out)
	if err != nil {
		t.Fatal(err)
	}
	return st, errs
}

// TestDiagnoseAndStatusWithoutDaemonFlags: on a node whose daemon runs
// with a node name, a state directory and an encapsulation of its own,
// `routeletd diagnose SRC DST` and `routeletd status` with no daemon flags
// learn them from the running daemon (its claim on the namespace) and
// give the verdicts they give with the daemon's flags: this node's VXLAN
// device has the VTEP MAC node-z derives, not the one a default node name
// would want. A flag that
// contradicts the daemon is reported, naming the flag, the value given and
// the daemon's, and changes no verdict.
func TestDiagnoseAndStatusWithoutDaemonFlags(t *testing.T) {
	tn := newTestNode(t, true)
	tn.setStateDir(filepath.Join(t.TempDir(), "elsewhere"))
	tn.addPeerRecord()
	tn.startDaemon("--node-name=node-z", "--encapsulation=vxlan")
	tn.waitReady()
	flags := []string{"--node-name=node-z", "--state-dir=" + tn.stateDir, "--pod-cidr=" + tn.podCIDR, "--encapsulation=vxlan"}

	var want *diagnose.Report
	var wantCode int
	netnstest.Eventually(t, netnstest.ReadyTimeout, "diagnose with the daemon's flags seeing node-b's VTEP entries", func() bool {
		want, wantCode, _ = tn.diagnoseWith(t, flags...)
		return !slices.Contains(verdicts(want), diagnose.StepVTEPFDB+"/4 "+string(diagnose.Fail))
	})
	if !slices.Contains(verdicts(want), diagnose.StepOverlayDevice+"/4 "+string(diagnose.Pass)) || want.Source != statusapi.SourceDaemon {
		t.Fatalf("diagnose with the daemon's flags: source %q, steps %q; want the daemon's endpoint and this node's VXLAN device passing", want.Source, verdicts(want))
	}
	got, code, errs := tn.diagnoseWith(t)
	if !slices.Equal(verdicts(got), verdicts(want)) || code != wantCode || got.Node != "node-z" || got.Source != statusapi.SourceDaemon {
		t.Errorf("diagnose without flags: node %q, source %q, exit %d, steps %q; want node-z, the daemon's endpoint, exit %d, steps %q (stderr %s)",
			got.Node, got.Source, code, verdicts(got), wantCode, verdicts(want), errs)
	}
	if errs != "" {
		t.Errorf("diagnose without flags said on stderr: %s", errs)
	}
	got, code, errs = tn.diagnoseWith(t, "--encapsulation=ipip")
	if !slices.Equal(verdicts(got), verdicts(want)) || code != wantCode {
		t.Errorf("diagnose with a contradicting flag: exit %d, steps %q; want the daemon's verdicts: exit %d, steps %q", code, verdicts(got), wantCode, verdicts(want))
	}
	if !strings.Contains(errs, "flag --encapsulation ipip contradicts the running routeletd") || !strings.Contains(errs, "which runs with encapsulation vxlan") {
		t.Errorf("diagnose with --encapsulation=ipip does not report the contradiction naming the flag, ipip and vxlan:\n%s", errs)
	}

	st, _ := tn.statusWith(t, flags...)
	bare, errs := tn.statusWith(t)
	if bare.Source != statusapi.SourceDaemon || bare.Node.Name != "node-z" || bare.Node.Mode != "vxlan" || bare.Node.StateDir != tn.stateDir ||
		!bare.Readiness.Ready || len(bare.Peers) != len(st.Peers) || errs != "" {
		t.Errorf("status without flags: source %s, node %+v, readiness %+v, %d peers, stderr %q; want the daemon's view as with its flags (%d peers)",
			bare.Source, bare.Node, bare.Readiness, len(bare.Peers), errs, len(st.Peers))
	}
	if p, _ := peerOf(bare, "node-b"); !healthyPeer(p) {
		t.Errorf("status without flags: node-b %+v, want every check passing", p)
	}
	_, errs = tn.statusWith(t, "--node-name=node-a", "--state-dir=/nonexistent")
	for _, want := range []string{"flag --node-name node-a contradicts the running routeletd", "which runs with node-name node-z",
		"flag --state-dir /nonexistent contradicts", "which runs with state-dir " + tn.stateDir} {
		if !strings.Contains(errs, want) {
			t.Errorf("status with contradicting flags: stderr lacks %q:\n%s", want, errs)
		}
	}
}
