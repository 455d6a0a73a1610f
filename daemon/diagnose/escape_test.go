package diagnose

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// evil is a pod name (or record value) built to take over the terminal:
// clear the screen, ring the bell, print a forged verdict line, reverse
// the rest of the line.
const evil = "x\x1b[2J\a\n✓ all ok\u202e"

// evilEscaped is how the text output must show it.
const evilEscaped = `x\x1b[2J\a\n✓ all ok\u202e`

// TestWriteTextEscapesValues: a pod name and why the daemon is down holding ESC,
// BEL, a newline and a bidi override reach the text report escaped and
// visible; no control character of them is written raw and no forged
// line appears. JSON stays exact.
func TestWriteTextEscapesValues(t *testing.T) {
	n := newFakeNode(3, 3)
	for _, w := range n.st.wl {
		if w.PodName == "pod-0" {
			w.PodName = evil
		}
	}
	rep, err := Run(n.cfg, n.st, n.k, "10.244.1.1", "10.100.1.5", Options{DaemonDown: "routeletd does not answer: " + evil})
	if err != nil {
		t.Fatal(err)
	}
	var txt, js bytes.Buffer
	if err := WriteText(&txt, rep); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	checkNoRawControls(t, out)
	if got := strings.Count(out, evilEscaped); got < 3 {
		t.Errorf("the escaped value %s shows %d times, want it in the daemon's line, the heading and the record's step:\n%s", evilEscaped, got, out)
	}
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `x\u001b[2J\u0007\n✓ all ok`) {
		t.Errorf("JSON lost the exact value:\n%s", js.String())
	}
}

// checkNoRawControls fails t when out holds a control or bidi character
// other than the line ends of the report itself, or a line that starts
// with a forged verdict.
func checkNoRawControls(t *testing.T, out string) {
	t.Helper()
	for i, r := range out {
		switch {
		case r == '\n':
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r == utf8.RuneError:
			t.Errorf("raw %U at byte %d of the text output:\n%q", r, i, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "✓ all ok") {
			t.Errorf("forged line %q in the text output", l)
		}
	}
}
