package cli

import (
	"bytes"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/termsafe/termsafetest"
	"github.com/routelet/routelet/pkg/state"
)

// checkNoRawControls fails t when out holds a raw control or a forged
// verdict line (termsafetest.CheckNoRawControls), and unless the escaped
// value shows at least want times.
func checkNoRawControls(t *testing.T, what, out string, want int) {
	t.Helper()
	termsafetest.CheckNoRawControls(t, what, out)
	if got := strings.Count(out, termsafetest.HostileEscaped); got < want {
		t.Errorf("%s: the escaped value %s shows %d times, want %d:\n%s", what, termsafetest.HostileEscaped, got, want, out)
	}
}

// writeEvilFile writes a record file named after the hostile value into dir.
func writeEvilFile(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, termsafetest.Hostile+".json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStatusTextEscapesValues: the offline status of a node whose pod is
// named with the hostile value (its veth missing, so it is a problem line) and whose nodes/
// holds a record file named with it shows both escaped; so does the
// daemon's view with errors, a peer, a device and a reason naming it.
func TestStatusTextEscapesValues(t *testing.T) {
	n := newFakeStatusNode(t, 2, 1)
	n.program(t)
	if err := n.store.PutWorkload(&state.Workload{ContainerID: "cevil", IfName: "eth0", HostIface: "cali9999", Netns: "/var/run/netns/termsafetest.Hostile",
		IPs: []string{"10.244.7.99/32"}, ContainerMAC: "02:00:00:00:00:09", PodNamespace: "default", PodName: termsafetest.Hostile, Created: statusNow}); err != nil {
		t.Fatal(err)
	}
	writeEvilFile(t, n.store.NodesDir())
	st := n.status(t, nil)
	text, _ := rendered(t, st)
	checkNoRawControls(t, "offline status", text, 2)

	st.Source, st.Loop = statusapi.SourceDaemon, true
	st.Readiness = statusapi.Readiness{Ready: false, Reason: "sync failed: " + termsafetest.Hostile}
	st.Errors = append(st.Errors, statusapi.ObjectError{Object: "workload " + termsafetest.Hostile, Error: termsafetest.Hostile})
	st.Peers = append(st.Peers, statusapi.Peer{Name: termsafetest.Hostile, HostIPv4: termsafetest.Hostile, Path: termsafetest.Hostile, Device: termsafetest.Hostile, Problem: termsafetest.Hostile})
	st.Devices = append(st.Devices, statusapi.Device{Name: termsafetest.Hostile, Kind: "vxlan", Problem: termsafetest.Hostile})
	st.Repairs = append(st.Repairs, statusapi.Repair{Time: statusNow, Object: termsafetest.Hostile})
	text, _ = rendered(t, st)
	checkNoRawControls(t, "daemon status", text, 10)

	st.Loop = false
	text, _ = rendered(t, st)
	checkNoRawControls(t, "daemon status before the loop", text, 3)
}

// TestNodesTextEscapesValues: nodes list names an unreadable record file
// named with the hostile value escaped.
func TestNodesTextEscapesValues(t *testing.T) {
	n := newFakeStatusNode(t, 0, 2)
	writeEvilFile(t, n.store.NodesDir())
	var b bytes.Buffer
	if err := listNodes(&b, n.store, n.cfg, "text"); err != nil {
		t.Fatal(err)
	}
	checkNoRawControls(t, "nodes list", b.String(), 1)
	if !strings.Contains(b.String(), "node-0001") {
		t.Errorf("nodes list lost the good records:\n%s", b.String())
	}
}

// TestReadyzEscapesReason: the readiness probe's reason (read with curl
// on a terminal) names records' values escaped.
func TestReadyzEscapesReason(t *testing.T) {
	st := health.NewStatus(0)
	st.SetReady(false, "refusing workload record "+termsafetest.Hostile)
	rec := httptest.NewRecorder()
	health.Handler(st, health.NewMetrics()).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	checkNoRawControls(t, "/readyz", strings.TrimSuffix(rec.Body.String(), "\n"), 1)
}

// TestEscapedJSONForTheTerminal: nodes show's record, printed as JSON in
// the text form, has the C1 controls, DEL and bidi overrides JSON leaves
// raw escaped too (and JSON's own escapes kept).
func TestEscapedJSONForTheTerminal(t *testing.T) {
	var b bytes.Buffer
	if err := writeEscapedJSON(&b, map[string]string{"name": termsafetest.Hostile + "\u009b2J\x7f"}); err != nil {
		t.Fatal(err)
	}
	checkNoRawControls(t, "nodes show", b.String(), 0)
	if want := `x\u001b[2J\u0007\n✓ all ok\u202e\u009b2J\x7f`; !strings.Contains(b.String(), want) {
		t.Errorf("nodes show wrote %q, want it to hold %q", b.String(), want)
	}
}
