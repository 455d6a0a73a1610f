//go:build !vmtest

package buildinfo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/buildinfo"
	"github.com/routelet/routelet/internal/netnstest"
)

func TestValid(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.22.333", "v0.1.0-rc.1", "v0.1.0-3-g1234abcd", "v0.1.0-3-g1234abcd-dirty"} {
		if err := buildinfo.Valid(v); err != nil {
			t.Errorf("Valid(%q) = %v, want nil", v, err)
		}
	}
	for _, v := range []string{"", "0.1.0", "v0.1", "v0.1.0.1", "v0.1.0-", "v0.1.0+meta", "v0.1.0 ", "v0.1.0\n", "latest", "v0.1.0-a/b"} {
		err := buildinfo.Valid(v)
		if err == nil {
			t.Errorf("Valid(%q) = nil, want an error", v)
		} else if !strings.Contains(err.Error(), strings.ReplaceAll(v, "\n", `\n`)) {
			t.Errorf("Valid(%q) = %v: the error does not name the value", v, err)
		}
	}
}

// TestStampedBinaries: the binaries built with LDFlag report that version
// (`routeletd version`, the plugin's about line); a stamp that is no
// version reports dev-invalid; an unstamped build from this checkout
// names its commit.
func TestStampedBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds routeletd and the plugin")
	}
	root, err := netnstest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	build := func(buildvcs bool, ldflags string) string {
		t.Helper()
		dir := t.TempDir()
		cmd := exec.Command("go", "build", "-buildvcs="+strconv.FormatBool(buildvcs), "-tags", netnstest.BuildTags, "-ldflags", ldflags, "-o", dir+"/", "./daemon", "./plugin")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -ldflags %q: %v\n%s", ldflags, err, out)
		}
		return dir
	}
	run := func(dir, bin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, bin), args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no CNI_COMMAND: the plugin prints its about line
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct{ stamp, want string }{
		{"v9.8.7-rc.1", "v9.8.7-rc.1"},
		{"9.8.7", "dev-invalid"},
	} {
		dir := build(false, buildinfo.LDFlag(tc.stamp))
		if got, want := run(dir, "daemon", "version"), "routeletd "+tc.want; got != want {
			t.Errorf("stamped %q: routeletd version printed %q, want %q", tc.stamp, got, want)
		}
		about, _, _ := strings.Cut(run(dir, "plugin"), "\n") // then the CNI versions it speaks
		if got, want := about, "CNI plugin routelet "+tc.want; got != want {
			t.Errorf("stamped %q: the plugin's about line is %q, want %q", tc.stamp, got, want)
		}
	}
	const someCommit = "0123456789abcdef0123456789abcdef01234567"
	if got, want := run(build(false, buildinfo.RevisionLDFlag(someCommit)), "daemon", "version"), "routeletd dev-"+someCommit[:12]; got != want {
		t.Errorf("a revision stamp alone: routeletd version printed %q, want %q", got, want)
	}
	if got, want := run(build(false, buildinfo.RevisionLDFlag("main")), "daemon", "version"), "routeletd dev"; got != want {
		t.Errorf("a revision stamp that is no commit: routeletd version printed %q, want %q", got, want)
	}
	rev, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no git checkout to check the toolchain's VCS stamp against: %v", err)
	}
	got := run(build(true, ""), "daemon", "version")
	if want := "routeletd dev-" + string(rev[:12]); got != want && got != want+"-dirty" {
		t.Errorf("unstamped with -buildvcs: routeletd version printed %q, want %q (or with -dirty)", got, want)
	}
}
