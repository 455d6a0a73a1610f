package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/diagnose"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/routes"
)

// diagnoseJSON runs `routeletd diagnose --output json` from this node to
// an address in node-b's block with the daemon's configuration.
func (tn *testNode) diagnoseJSON(t *testing.T) (*diagnose.Report, int) {
	t.Helper()
	out, errs, code := tn.runIn("diagnose", "--output", "json", "--node-name=node-a", "--state-dir="+tn.stateDir,
		"--pod-cidr="+tn.podCIDR, "--encapsulation=vxlan", "node-a", "10.244.8.5")
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("diagnose exited %d: %v\n%s\n%s", code, err, out, errs)
	}
	return &rep, code
}

// routeStep returns the report's IPv4 route step.
func routeStep(rep *diagnose.Report) diagnose.Step {
	for _, s := range rep.Steps {
		if s.ID == diagnose.StepRoute && s.Family == 4 {
			return s
		}
	}
	return diagnose.Step{}
}

// TestDiagnoseShowsDaemonError: a static route an operator put at node-b's
// block keeps the running daemon from programming its own (RouteTable
// never replaces a foreign route); diagnose asks the daemon's state
// endpoint and shows the daemon's error for that route in the failing
// route step. With the daemon stopped, diagnose says so first and still
// names the foreign route from the kernel.
func TestDiagnoseShowsDaemonError(t *testing.T) {
	tn := newTestNode(t, true)
	tn.addPeerRecord()
	if _, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "route", "add", "10.244.8.0/24", "via", "192.0.2.1",
		"dev", "up0", "proto", "static"); err != nil {
		t.Fatal(err)
	}
	d := tn.startDaemon("--encapsulation=vxlan")
	tn.waitReady()

	var rep *diagnose.Report
	var code int
	netnstest.Eventually(t, netnstest.ReadyTimeout, "diagnose showing the daemon's error for 10.244.8.0/24", func() bool {
		rep, code = tn.diagnoseJSON(t)
		return strings.Contains(routeStep(rep).Fact, "routeletd's last error")
	})
	st := routeStep(rep)
	for _, want := range []string{"10.244.8.0/24 via 192.0.2.1 dev up0", "not programmed", routes.ErrForeignRoute.Error()} {
		if !strings.Contains(st.Fact, want) {
			t.Errorf("route step fact %q lacks %q", st.Fact, want)
		}
	}
	if code != 1 || st.Status != diagnose.Fail || rep.Source != statusapi.SourceDaemon || rep.DaemonDown != "" {
		t.Errorf("diagnose exit %d, route step %+v, source %q, daemonDown %q; want 1, a failed step, the daemon's endpoint",
			code, st, rep.Source, rep.DaemonDown)
	}

	if err := d.stop(t); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	rep, code = tn.diagnoseJSON(t)
	if st = routeStep(rep); code != 1 || st.Status != diagnose.Fail || !strings.Contains(st.Fix, "ip route del 10.244.8.0/24") ||
		rep.Source != statusapi.SourceOffline || !strings.Contains(rep.DaemonDown, "not running") {
		t.Errorf("with the daemon stopped: exit %d, route step %+v, source %q, daemonDown %q", code, st, rep.Source, rep.DaemonDown)
	}
	out, _, _ := tn.runIn("diagnose", "--node-name=node-a", "--state-dir="+tn.stateDir, "--pod-cidr="+tn.podCIDR,
		"--encapsulation=vxlan", "node-a", "10.244.8.5")
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "routeletd is not running") {
		t.Errorf("first line of diagnose with the daemon stopped = %q, want it to say so:\n%s", first, out)
	}
}
