package netnstest

import (
	"errors"
	"strings"
	"testing"
)

// TestSkipUnlessRootBuildFailed: as root, SkipUnlessRoot fails a test of
// a package whose Privileged.Main could not build its binaries, with the
// build's error, and passes once the build succeeded.
func TestSkipUnlessRootBuildFailed(t *testing.T) {
	saved := privilegedBuild
	t.Cleanup(func() { privilegedBuild = saved })
	privilegedBuild.names, privilegedBuild.err = []string{Routeletd}, errors.New("compile error")
	failed := run(t, func(tb testing.TB) { SkipUnlessRoot(tb, "checks the build") }) // skips t unless root
	if !strings.Contains(failed, "compile error") {
		t.Errorf("failure %q, want the build's", failed)
	}
	privilegedBuild.names, privilegedBuild.err = nil, nil
	if failed := run(t, func(tb testing.TB) { SkipUnlessRoot(tb, "checks the build") }); failed != "" {
		t.Errorf("failed %q after a good build", failed)
	}
}
