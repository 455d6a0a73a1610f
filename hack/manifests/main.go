// Command manifests writes install/kubernetes/ from the Helm chart
// (install/helm/routelet), its one source: `helm template` with the
// chart's default values, release namespace kube-system, one file per
// template, each headed by a line saying where it comes from. The chart's
// test fails when the files differ from what this writes, so the two
// cannot drift.
//
// helm is the cached test binary (make test-bins; internal/testbins).
//
// Usage: go run ./hack/manifests [-check]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/routelet/routelet/install/chart"
	"github.com/routelet/routelet/internal/netnstest"
)

func main() {
	check := flag.Bool("check", false, "write nothing; exit 1 when install/kubernetes differs from the chart's render")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintf(os.Stderr, "manifests: %v\n", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	root, err := netnstest.ModuleRoot()
	if err != nil {
		return err
	}
	files, err := chart.Manifests(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, chart.ManifestDir)
	if check {
		return chart.Diff(dir, files)
	}
	return chart.Write(dir, files)
}
