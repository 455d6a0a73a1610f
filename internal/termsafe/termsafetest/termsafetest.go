// Package termsafetest is what the tests of routelet's text output share
// to show that hostile values cannot take over an operator's terminal.
package termsafetest

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Hostile is a pod name, a record file name or a kernel name built to
// take over the operator's terminal: clear the screen, ring the bell,
// print a forged verdict line, reverse the rest of the line.
const Hostile = "x\x1b[2J\a\n✓ all ok\u202e"

// HostileEscaped is how text output must show Hostile
// (termsafe.String).
const HostileEscaped = `x\x1b[2J\a\n✓ all ok\u202e`

// CheckNoRawControls fails t when out (the text output named what) holds
// a control, bidi or invalid character other than the line ends the
// renderer writes itself, or a line that starts with Hostile's forged
// verdict.
func CheckNoRawControls(t testing.TB, what, out string) {
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
}
