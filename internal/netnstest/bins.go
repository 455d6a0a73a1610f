package netnstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Names of routelet's own binaries for BuildBins and Bins; any other name
// is a reference plugin's package (PTPPackage, HostLocalPackage,
// PortmapPackage).
const (
	Routelet  = "routelet"
	Routeletd = "routeletd"
)

// bins is the one directory a test process builds its binaries into, and
// what has been built there.
var bins struct {
	mu    sync.Mutex
	dir   string
	built map[string]error // name → outcome of its build
}

// BuildBins builds each named binary (Routelet, Routeletd or a reference
// plugin package) once per test process into one directory and returns the
// directory; a name built before is not built again, and its earlier outcome
// counts. TestMain calls it for what every test needs, tests call Bins for
// what only some need; RemoveBins, after m.Run, deletes the directory.
func BuildBins(names ...string) (string, error) {
	bins.mu.Lock()
	defer bins.mu.Unlock()
	if bins.dir == "" {
		dir, err := os.MkdirTemp("", "routelet-test-bin-")
		if err != nil {
			return "", fmt.Errorf("binaries directory: %w", err)
		}
		bins.dir, bins.built = dir, map[string]error{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var errs []error
	for _, name := range names {
		err, done := bins.built[name]
		if !done {
			switch name {
			case Routelet:
				err = BuildRoutelet(ctx, bins.dir)
			case Routeletd:
				err = BuildRouteletd(ctx, bins.dir)
			default:
				err = BuildReference(ctx, bins.dir, name)
			}
			bins.built[name] = err
		}
		errs = append(errs, err)
	}
	return bins.dir, errors.Join(errs...)
}

// Bins is BuildBins for a test: it fails t when a build failed.
func Bins(t testing.TB, names ...string) string {
	t.Helper()
	dir, err := BuildBins(names...)
	if err != nil {
		t.Fatalf("build %v: %v", names, err)
	}
	return dir
}

// RemoveBins deletes the directory BuildBins built into, if any.
func RemoveBins() {
	bins.mu.Lock()
	defer bins.mu.Unlock()
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
		bins.dir, bins.built = "", nil
	}
}

// Privileged is the TestMain of a package whose tests all need root (the
// packages under test/): Main runs the package's tests with everything they
// share set up once.
type Privileged struct {
	// Stale is the namespace prefix (without the PID) of the package's
	// namespaces; what crashed earlier runs left under it is removed first.
	Stale string
	// RemoveStale removes them; nil means this package's RemoveStale.
	RemoveStale func(prefix string) ([]string, error)
	// Bins are built once before the tests (BuildBins). When that fails,
	// every test fails in SkipUnlessRoot with the build's error.
	Bins []string
	// Built receives the binaries' directory before any test runs.
	Built func(dir string)
}

// privilegedBuild is the outcome of Privileged.Main's build, set before
// m.Run and only read by the tests (SkipUnlessRoot).
var privilegedBuild struct {
	names []string
	err   error
}

// Main runs m and returns its exit code. As an ordinary user it only runs
// m (every test skips on its own; nothing is built). As root it removes
// the stale namespaces (a failure is printed, not fatal), builds p.Bins,
// runs m, and removes the binaries.
func (p Privileged) Main(m *testing.M) int {
	if os.Geteuid() != 0 {
		return m.Run()
	}
	remove := p.RemoveStale
	if remove == nil {
		remove = RemoveStale
	}
	if _, err := remove(p.Stale); err != nil {
		fmt.Fprintf(os.Stderr, "remove stale namespaces %s*: %v\n", p.Stale, err)
	}
	defer RemoveBins()
	dir, err := BuildBins(p.Bins...)
	privilegedBuild.names, privilegedBuild.err = p.Bins, err
	if p.Built != nil {
		p.Built(dir)
	}
	return m.Run()
}
