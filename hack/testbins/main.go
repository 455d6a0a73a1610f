// Command testbins builds the kube-apiserver, etcd and helm binaries the
// Kubernetes, etcd and chart tests run, from the Go module proxy, into a cache
// outside the repository (internal/testbins.CacheDir), and reuses them when
// present. Each binary is built in a throwaway module generated in the cache
// directory, so the project's go.mod never sees k8s.io/kubernetes.
//
// Usage: go run ./hack/testbins [-only etcd|kube-apiserver|helm] [-v]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/routelet/routelet/internal/testbins"
)

// target is one binary to build: its cache path, the module to require,
// the main package and any replace lines.
type target struct {
	name    string
	out     string
	module  string
	version string
	pkg     string
	ldflags string
	// check is the arguments of the run that must succeed before the
	// binary goes into the cache (absent: --version).
	check []string
}

func main() {
	only := flag.String("only", "", "build only this binary (etcd, kube-apiserver or helm)")
	verbose := flag.Bool("v", false, "show the go commands' output")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))

	targets := []target{
		{
			name: "etcd", out: testbins.EtcdPath(),
			module: "go.etcd.io/etcd/server/v3", version: testbins.EtcdVersion,
			pkg: "go.etcd.io/etcd/server/v3",
		},
		{
			name: "kube-apiserver", out: testbins.KubeAPIServerPath(),
			module: "k8s.io/kubernetes", version: testbins.KubeVersion,
			pkg:     "k8s.io/kubernetes/cmd/kube-apiserver",
			ldflags: kubeLdflags(testbins.KubeVersion),
		},
		{
			name: "helm", out: testbins.HelmPath(),
			module: "helm.sh/helm/v4", version: testbins.HelmVersion,
			pkg: "helm.sh/helm/v4/cmd/helm", ldflags: "-s -w",
			check: []string{"version", "--short"},
		},
	}
	if *only != "" && *only != "etcd" && *only != "kube-apiserver" && *only != "helm" {
		fmt.Fprintf(os.Stderr, "testbins: unknown binary %q (want etcd, kube-apiserver or helm)\n", *only)
		os.Exit(2)
	}
	for _, t := range targets {
		if *only != "" && t.name != *only {
			continue
		}
		if err := build(t, *verbose); err != nil {
			fmt.Fprintf(os.Stderr, "testbins: %v\n", err)
			os.Exit(1)
		}
	}
}

// kubeLdflags sets the version kube-apiserver reports (and derives its
// emulation version from); a build outside kubernetes' Makefile has none.
func kubeLdflags(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	minor := ""
	if len(parts) > 1 {
		minor = parts[1]
	}
	var b strings.Builder
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, "-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ",
			p, v, p, p, minor, p)
	}
	return "-s -w " + b.String()
}

// build makes t.out unless it is already there and runs.
func build(t target, verbose bool) error {
	if st, err := os.Stat(t.out); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
		slog.Info("reusing cached binary", "binary", t.name, "path", t.out)
		return nil
	}
	start := time.Now()
	src := filepath.Join(testbins.CacheDir(), "src", t.name+"-"+t.version)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("create module dir: %w", err)
	}
	gomod, err := moduleFile(t, src, verbose)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), gomod, 0o644); err != nil {
		return fmt.Errorf("write go.mod: %w", err)
	}
	slog.Info("resolving modules", "binary", t.name, "dir", src)
	if err := goCmd(src, verbose, "get", t.pkg+"@"+t.version); err != nil {
		return fmt.Errorf("resolve %s: %w", t.pkg, err)
	}
	tmp := t.out + ".tmp"
	slog.Info("building", "binary", t.name, "package", t.pkg)
	args := []string{"build", "-trimpath", "-o", tmp}
	if t.ldflags != "" {
		args = append(args, "-ldflags", t.ldflags)
	}
	if err := goCmd(src, verbose, append(args, t.pkg)...); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build %s: %w", t.pkg, err)
	}
	// It must run before it goes into the cache.
	check := t.check
	if check == nil {
		check = []string{"--version"}
	}
	if out, err := exec.Command(tmp, check...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("built %s does not run: %w\n%s", t.name, err, out)
	}
	if err := os.Rename(tmp, t.out); err != nil {
		return fmt.Errorf("move %s into the cache: %w", t.name, err)
	}
	slog.Info("built", "binary", t.name, "path", t.out, "took", time.Since(start).Round(time.Second))
	return nil
}

// moduleFile returns the throwaway go.mod for t. For k8s.io/kubernetes
// it replaces each staging module of kubernetes' own go.mod (a
// "=> ./staging/..." replace, unusable outside its repository) with the
// published module at the matching v0 version.
func moduleFile(t target, src string, verbose bool) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "module routelet.test/testbins/%s\n\ngo 1.26\n\nrequire %s %s\n", t.name, t.module, t.version)
	if t.module != "k8s.io/kubernetes" {
		return b.Bytes(), nil
	}
	staging, err := stagingModules(src, t.module+"@"+t.version, verbose)
	if err != nil {
		return nil, err
	}
	b.WriteString("\nreplace (\n")
	for _, m := range staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, testbins.StagingVersion)
	}
	b.WriteString(")\n")
	return b.Bytes(), nil
}

var stagingRe = regexp.MustCompile(`^\s*(k8s\.io/\S+)\s+=>\s+\./staging/`)

// parseStaging lists the modules a go.mod replaces with a ./staging/
// directory.
func parseStaging(r io.Reader) ([]string, error) {
	var mods []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := stagingRe.FindStringSubmatch(sc.Text()); m != nil {
			mods = append(mods, m[1])
		}
	}
	return mods, sc.Err()
}

// stagingModules downloads mod's go.mod and lists the modules it replaces
// with a staging directory.
func stagingModules(dir, mod string, verbose bool) ([]string, error) {
	// A bare module file so "go mod download" runs outside any module.
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module routelet.test/testbins/probe\n\ngo 1.26\n"), 0o644); err != nil {
		return nil, fmt.Errorf("write go.mod: %w", err)
	}
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = dir
	cmd.Env = goEnv()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", mod, err)
	}
	var info struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("decode go mod download output for %s: %w", mod, err)
	}
	if info.Error != "" {
		return nil, fmt.Errorf("download %s: %s", mod, info.Error)
	}
	f, err := os.Open(info.GoMod)
	if err != nil {
		return nil, fmt.Errorf("read %s go.mod: %w", mod, err)
	}
	defer f.Close()
	mods, err := parseStaging(f)
	if err != nil {
		return nil, fmt.Errorf("read %s go.mod: %w", mod, err)
	}
	if len(mods) == 0 {
		return nil, errors.New("no staging replaces found in " + info.GoMod)
	}
	if verbose {
		slog.Info("staging modules", "count", len(mods))
	}
	return mods, nil
}

// goEnv is the environment of the go commands: module mode, no workspace,
// static binaries, and none of the caller's GOFLAGS.
func goEnv() []string {
	return append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0")
}

// goCmd runs go with args in dir.
func goCmd(dir string, verbose bool, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = goEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if verbose {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}
