package diagnose

import (
	"bytes"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/termsafe/termsafetest"
)

// TestWriteTextEscapesValues: a pod name and why the daemon is down holding ESC,
// BEL, a newline and a bidi override reach the text report escaped and
// visible; no control character of them is written raw and no forged
// line appears. JSON stays exact.
func TestWriteTextEscapesValues(t *testing.T) {
	n := newFakeNode(3, 3)
	for _, w := range n.st.wl {
		if w.PodName == "pod-0" {
			w.PodName = termsafetest.Hostile
		}
	}
	rep, err := Run(n.cfg, n.st, n.k, "10.244.1.1", "10.100.1.5", Options{DaemonDown: "routeletd does not answer: " + termsafetest.Hostile})
	if err != nil {
		t.Fatal(err)
	}
	var txt, js bytes.Buffer
	if err := WriteText(&txt, rep); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	termsafetest.CheckNoRawControls(t, "the text output", out)
	if got := strings.Count(out, termsafetest.HostileEscaped); got < 3 {
		t.Errorf("the escaped value %s shows %d times, want it in the daemon's line, the heading and the record's step:\n%s", termsafetest.HostileEscaped, got, out)
	}
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `x\u001b[2J\u0007\n✓ all ok`) {
		t.Errorf("JSON lost the exact value:\n%s", js.String())
	}
}
