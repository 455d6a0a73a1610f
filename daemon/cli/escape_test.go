package cli

import (
	"bytes"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/state"
)

// evil is a pod name, a record file name or a kernel name built to take
// over the operator's terminal: clear the screen, ring the bell, print a
// forged verdict line, reverse the rest of the line.
const evil = "x\x1b[2J\a\n✓ all ok\u202e"

// evilEscaped is how text output must show it.
const evilEscaped = `x\x1b[2J\a\n✓ all ok\u202e`

// checkNoRawControls fails t when out holds a control, bidi or invalid
// character other than the line ends the renderer writes itself, or a
// line that starts with a forged verdict; and unless the escaped value
// shows at least want times.
func checkNoRawControls(t *testing.T, what, out string, want int) {
	t.Helper()
	for i, r := range out {
		switch {
		case r == '\n':
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r == utf8.RuneError:
			t.Errorf("%s: raw %U at byte %d:\n%q", what, r, i, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "✓ all ok") {
			t.Errorf("%s: forged line %q", what, l)
		}
	}
	if got := strings.Count(out, evilEscaped); got < want {
		t.Errorf("%s: the escaped value %s shows %d times, want %d:\n%s", what, evilEscaped, got, want, out)
	}
}

// writeEvilFile writes a record file named after evil into dir.
func writeEvilFile(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, evil+".json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStatusTextEscapesValues: the offline status of a node whose pod is
// named evil (its veth missing, so it is a problem line) and whose nodes/
// holds a record file named evil shows both escaped; so does the
// daemon's view with errors, a peer, a device and a reason naming it.
func TestStatusTextEscapesValues(t *testing.T) {
	n := newFakeStatusNode(t, 2, 1)
	n.program(t)
	if err := n.store.PutWorkload(&state.Workload{ContainerID: "cevil", IfName: "eth0", HostIface: "cali9999", Netns: "/var/run/netns/evil",
		IPs: []string{"10.244.7.99/32"}, ContainerMAC: "02:00:00:00:00:09", PodNamespace: "default", PodName: evil, Created: statusNow}); err != nil {
		t.Fatal(err)
	}
	writeEvilFile(t, n.store.NodesDir())
	st := n.status(t, nil)
	text, _ := rendered(t, st)
	checkNoRawControls(t, "offline status", text, 2)

	st.Source, st.Loop = statusapi.SourceDaemon, true
	st.Readiness = statusapi.Readiness{Ready: false, Reason: "sync failed: " + evil}
	st.Errors = append(st.Errors, statusapi.ObjectError{Object: "workload " + evil, Error: evil})
	st.Peers = append(st.Peers, statusapi.Peer{Name: evil, HostIPv4: evil, Path: evil, Device: evil, Problem: evil})
	st.Devices = append(st.Devices, statusapi.Device{Name: evil, Kind: "vxlan", Problem: evil})
	st.Repairs = append(st.Repairs, statusapi.Repair{Time: statusNow, Object: evil})
	text, _ = rendered(t, st)
	checkNoRawControls(t, "daemon status", text, 10)

	st.Loop = false
	text, _ = rendered(t, st)
	checkNoRawControls(t, "daemon status before the loop", text, 3)
}

// TestNodesTextEscapesValues: nodes list names an unreadable record file
// named evil escaped.
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
	st.SetReady(false, "refusing workload record "+evil)
	rec := httptest.NewRecorder()
	health.Handler(st, health.NewMetrics()).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	checkNoRawControls(t, "/readyz", strings.TrimSuffix(rec.Body.String(), "\n"), 1)
}

// TestEscapedJSONForTheTerminal: nodes show's record, printed as JSON in
// the text form, has the C1 controls, DEL and bidi overrides JSON leaves
// raw escaped too (and JSON's own escapes kept).
func TestEscapedJSONForTheTerminal(t *testing.T) {
	var b bytes.Buffer
	if err := writeEscapedJSON(&b, map[string]string{"name": evil + "\u009b2J\x7f"}); err != nil {
		t.Fatal(err)
	}
	checkNoRawControls(t, "nodes show", b.String(), 0)
	if want := `x\u001b[2J\u0007\n✓ all ok\u202e\u009b2J\x7f`; !strings.Contains(b.String(), want) {
		t.Errorf("nodes show wrote %q, want it to hold %q", b.String(), want)
	}
}
