package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/instance"
)

// TestParseDiagnoseArgs: diagnose's own flags are taken from anywhere,
// SRC and DST from the end, and the rest is the daemon's configuration.
func TestParseDiagnoseArgs(t *testing.T) {
	d, err := parseDiagnoseArgs([]string{"--state-dir", "/x", "-o", "json", "--node-name=a", "--probe", "demo/p", "10.0.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if d.output != "json" || !d.probe || d.src != "demo/p" || d.dst != "10.0.0.5" || !slices.Equal(d.config, []string{"--state-dir", "/x", "--node-name=a"}) {
		t.Errorf("parsed %+v", d)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--output=yaml", "a", "b"}, `--output "yaml"`},
		{[]string{"only-one"}, "SRC and DST"},
		{[]string{"a", "--probe=maybe", "b"}, `--probe="maybe"`},
		{[]string{"a", "--node-name=x"}, "SRC and DST"},
	} {
		if _, err := parseDiagnoseArgs(tc.args); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("parseDiagnoseArgs(%q) = %v, want an error saying %s", tc.args, err, tc.says)
		}
	}
}

// TestDiagnoseExitCodes: bad arguments and a bad configuration are exit 2
// naming the value; a missing state directory (no daemon running) is exit
// 1.
func TestDiagnoseExitCodes(t *testing.T) {
	withDaemon(t, nil, instance.ErrNotRunning)
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--output", "xml", "a", "b"}, ExitConfig, `"xml"`},
		{[]string{"--mtu=12abc", "a", "b"}, ExitConfig, `"12abc"`},
		{[]string{"--state-dir=" + dir + "/missing", "--node-name=a", "a", "b"}, ExitFail, "missing"},
	} {
		var out, errb bytes.Buffer
		if code := diagnoseMain(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.says) {
			t.Errorf("diagnose %q: exit %d, stderr %q; want %d naming %s", tc.args, code, errb.String(), tc.code, tc.says)
		}
	}
}
