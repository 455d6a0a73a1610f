// Package chart renders routelet's Helm chart (install/helm/routelet)
// with the helm binary, and keeps install/kubernetes/ what the chart
// renders with its default values: the chart is the one source of both.
package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/internal/testbins"
)

// Paths inside the repository.
const (
	ChartDir    = "install/helm/routelet"
	ManifestDir = "install/kubernetes"
)

// ManifestNamespace and ManifestRelease are what install/kubernetes/ is
// rendered with.
const (
	ManifestNamespace = "kube-system"
	ManifestRelease   = "routelet"
)

// Helm returns the helm binary's path: ROUTELET_HELM, else the cached test
// binary (make test-bins).
func Helm() (string, error) {
	p := os.Getenv("ROUTELET_HELM")
	if p == "" {
		p = testbins.HelmPath()
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("helm %s: %w (make test-bins builds it)", p, err)
	}
	return p, nil
}

// run runs helm with args in dir and returns its standard output; the
// error holds its standard error.
func run(dir string, args ...string) ([]byte, error) {
	helm, err := Helm()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Dir = dir
	// Helm's own state (repositories, cache) in a throwaway place, never
	// the invoking user's.
	tmp, err := os.MkdirTemp("", "routelet-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+tmp+"/cache", "HELM_CONFIG_HOME="+tmp+"/config", "HELM_DATA_HOME="+tmp+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Render is `helm template` of the chart under root as release in
// namespace, with set (helm --set-json key=value pairs) over the default
// values.
func Render(root, release, namespace string, set ...string) ([]byte, error) {
	args := []string{"template", release, ChartDir, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set-json", s)
	}
	return run(root, args...)
}

// Lint is `helm lint --strict` of the chart under root, with set as in
// Render; it returns helm's report with the error.
func Lint(root string, set ...string) (string, error) {
	args := []string{"lint", "--strict", ChartDir}
	for _, s := range set {
		args = append(args, "--set-json", s)
	}
	out, err := run(root, args...)
	return string(out), err
}

// sourcePrefix starts the line helm puts before each template's output.
const sourcePrefix = "# Source: routelet/templates/"

// Split cuts a render into its templates' outputs, by file name; a
// template's documents stay together, separated by "---".
func Split(render []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	for doc := range strings.SplitSeq(string(render), "---\n") {
		head, body, ok := strings.Cut(doc, "\n")
		if strings.TrimSpace(doc) == "" {
			continue
		}
		name, found := strings.CutPrefix(head, sourcePrefix)
		if !ok || !found || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("a rendered document does not start with %q and a template's name: %q", sourcePrefix, head)
		}
		body = strings.TrimRight(body, "\n") + "\n"
		if prev, more := files[name]; more { // a template of several documents
			files[name] = append(append(prev, "---\n"...), body...)
			continue
		}
		files[name] = []byte(body)
	}
	if len(files) == 0 {
		return nil, errors.New("the render holds no template")
	}
	return files, nil
}

// header is the first line of every generated manifest.
func header(name string) string {
	return "# Rendered from " + ChartDir + "/templates/" + name + " by hack/manifests; edit the chart, not this file.\n"
}

// Manifests are install/kubernetes/'s files as the chart renders them with
// its default values, and set (as in Render) over them: a release's
// manifests pin the image with image.tag.
func Manifests(root string, set ...string) (map[string][]byte, error) {
	render, err := Render(root, ManifestRelease, ManifestNamespace, set...)
	if err != nil {
		return nil, err
	}
	files, err := Split(render)
	if err != nil {
		return nil, err
	}
	for name, body := range files {
		files[name] = append([]byte(header(name)), body...)
	}
	return files, nil
}

// Package writes the chart under root, as release version v (a v-tag),
// into dir: chart version v without its "v", appVersion (the default
// image tag) v. It returns the package's path, once a render of the
// package shows the image routelet:<v>.
func Package(root, v, dir string) (string, error) {
	semver := strings.TrimPrefix(v, "v")
	if _, err := run(root, "package", ChartDir, "--version", semver, "--app-version", v, "-d", dir); err != nil {
		return "", err
	}
	pkg := filepath.Join(dir, "routelet-"+semver+".tgz")
	render, err := run(root, "template", ManifestRelease, pkg, "--namespace", ManifestNamespace)
	if err != nil {
		return "", err
	}
	if want := "image: routelet:" + v + "\n"; !strings.Contains(string(render), want) {
		return "", fmt.Errorf("the packaged chart %s does not default to image routelet:%s", pkg, v)
	}
	return pkg, nil
}

// Diff says how the YAML files in dir differ from files, or nil.
func Diff(dir string, files map[string][]byte) error {
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		got, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", name, err))
		case !bytes.Equal(got, files[name]):
			bad = append(bad, name+": differs from the chart's render")
		}
	}
	extra, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, p := range extra {
		if _, ok := files[filepath.Base(p)]; !ok {
			bad = append(bad, filepath.Base(p)+": not rendered by the chart")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s is not the chart's render (edit %s and run make manifests):\n%s", dir, ChartDir, strings.Join(bad, "\n"))
	}
	return nil
}

// Write puts files into dir, each through a temp file renamed into place,
// and removes the YAML files there the chart no longer renders.
func Write(dir string, files map[string][]byte) error {
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, name)
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, files[name], 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, p := range old {
		if _, ok := files[filepath.Base(p)]; !ok {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}
