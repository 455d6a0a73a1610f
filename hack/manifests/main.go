// Command manifests writes install/kubernetes/ from the Helm chart
// (install/helm/routelet), its one source: `helm template` with the
// chart's default values, release namespace kube-system, one file per
// template, each headed by a line saying where it comes from. The chart's
// test fails when the files differ from what this writes, so the two
// cannot drift.
//
// helm is the cached test binary (make test-bins; internal/testbins).
//
// With -release v it writes a release's instead, into -out: the manifests
// with the image pinned to routelet:<v> (kubernetes/) and the chart
// packaged as that version (make release; hack/release.sh).
//
// Usage: go run ./hack/manifests [-check] [-release v0.1.0 -out dist/v0.1.0]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/routelet/routelet/install/chart"
	"github.com/routelet/routelet/internal/buildinfo"
	"github.com/routelet/routelet/internal/netnstest"
)

func main() {
	check := flag.Bool("check", false, "write nothing; exit 1 when install/kubernetes differs from the chart's render")
	release := flag.String("release", "", "a release's version: write its manifests and chart package into -out")
	out := flag.String("out", "", "with -release: the directory to write into")
	flag.Parse()
	var err error
	if *release != "" {
		err = writeRelease(*release, *out)
	} else {
		err = run(*check)
	}
	if err != nil {
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

// writeRelease writes release v's manifests into out/kubernetes and its
// chart package into out.
func writeRelease(v, out string) error {
	if err := buildinfo.Valid(v); err != nil {
		return err
	}
	if out == "" {
		return errors.New("-release needs -out")
	}
	root, err := netnstest.ModuleRoot()
	if err != nil {
		return err
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	files, err := chart.Manifests(root, `image.tag="`+v+`"`)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, "kubernetes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := chart.Write(dir, files); err != nil {
		return err
	}
	pkg, err := chart.Package(root, v, out)
	if err != nil {
		return err
	}
	fmt.Println(pkg)
	return nil
}
