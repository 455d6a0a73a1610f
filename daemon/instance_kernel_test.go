package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestSquatterCannotStopDaemon: an unprivileged process (uid 65534) that
// binds routeletd's abstract socket @routeletd first, listening or not,
// stops neither routeletd nor `routeletd cleanup`; the daemon names it in
// a warning. A second routeletd in the namespace, on another state
// directory, still refuses, naming the first one, also after the
// squatter is gone.
func TestSquatterCannotStopDaemon(t *testing.T) {
	for _, listen := range []bool{false, true} {
		t.Run(fmt.Sprintf("listen=%v", listen), func(t *testing.T) {
			tn := newTestNode(t, true)
			tn.addVeth("calisq0", "psq0")
			tn.addRecord("sq", "calisq0", "/var/run/netns/x", "10.244.7.80/32")
			sq := netnstest.Squat(t, tn.node.NS, "@routeletd", listen)

			d := tn.startDaemon()
			tn.waitReady()
			netnstest.Eventually(t, 5*time.Second, "the daemon's route", func() bool { return tn.hasRoute(v4, "10.244.7.80/32 calisq0 proto 80") })
			if log := d.log.String(); !strings.Contains(log, "uid 65534") || !strings.Contains(log, "pid "+strconv.Itoa(sq.PID())) {
				t.Errorf("the daemon's log does not name the squatter (uid 65534, pid %d):\n%s", sq.PID(), log)
			}

			second := func(what string) {
				t.Helper()
				other := filepath.Join(t.TempDir(), "other-state")
				code, out, exited := tn.runDaemonArgs(10*time.Second, nil, "--node-name=node-b", "--state-dir="+other,
					"--pod-cidr=10.244.8.0/24", "--encapsulation=none", "--health-addr=127.0.0.1:9098")
				first := "pid " + strconv.Itoa(d.proc.Cmd.Process.Pid)
				if !exited || code != 1 || !strings.Contains(out, "another routeletd is running in this network namespace") || !strings.Contains(out, first) {
					t.Errorf("second daemon with another state dir %s: exited %v with %d, want exit 1 naming the first (%s):\n%s", what, exited, code, first, out)
				}
			}
			second("while the squatter holds @routeletd")
			sq.Stop()
			second("after the squatter is gone")
			if code, _, err := tn.get("/readyz"); err != nil || code != 200 {
				t.Errorf("first daemon /readyz = %d, %v", code, err)
			}

			if err := d.stop(t); err != nil {
				t.Fatal(err)
			}
			// cleanup, with another squatter in place.
			netnstest.Squat(t, tn.node.NS, "@routeletd", listen)
			out, err := netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
				"--state-dir="+tn.stateDir, "--node-name=node-a")
			if err != nil {
				t.Fatalf("cleanup with @routeletd held by uid 65534: %v\n%s", err, out)
			}
			if tn.hasRoute(v4, "10.244.7.80/32 calisq0 proto 80") {
				t.Errorf("cleanup left the pod's route")
			}
		})
	}
}
