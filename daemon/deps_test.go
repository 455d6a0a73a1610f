//go:build !vmtest

// Build inspections: these run the go tool on the source tree, so they
// are unit tests of the host that builds routelet. The test binaries of
// hack/vmtest are built with the vmtest tag and leave them out: the VM
// has the binaries and the checkout, no toolchain and no module cache.

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestNoClientsetLinked: routeletd does not link client-go's clientset,
// whose package initialisation registers every API group's types and
// costs the daemon about 9 MiB of RSS in every datastore mode; the
// Kubernetes datastore uses kubernetes.NewNodeClient (core/v1 only).
func TestNoClientsetLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "k8s.io/client-go/kubernetes" || p == "k8s.io/client-go/kubernetes/scheme" || (strings.HasPrefix(p, "k8s.io/api/") && p != "k8s.io/api/core/v1") {
			t.Errorf("routeletd links %s", p)
		}
	}
}

// TestBuildsLeaveOutGRPCTrace: routeletd built with netnstest.BuildTags
// links no golang.org/x/net/trace, and every build of the binaries passes
// those tags. Nor does any of routelet's own packages, or its other
// dependencies, import text/template or html/template (whose
// MethodByName keeps every exported method in the binary, pages of which
// count in the daemon's RSS): the only importers allowed are spf13/cast
// and spf13/viper, which the BGP speaker's library (GoBGP's server, through
// its configuration package) cannot be built without.
func TestBuildsLeaveOutGRPCTrace(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", netnstest.BuildTags, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "golang.org/x/net/trace" {
			t.Errorf("routeletd built with -tags %s links %s", netnstest.BuildTags, f[0])
		}
		for _, imp := range f[1:] {
			if (imp == "text/template" || imp == "html/template") && !strings.HasPrefix(f[0], "github.com/spf13/") && !strings.HasPrefix(f[0], "text/") && !strings.HasPrefix(f[0], "html/") {
				t.Errorf("routeletd built with -tags %s links %s through %s", netnstest.BuildTags, imp, f[0])
			}
		}
	}
	for _, c := range []struct{ file, want string }{
		{"../Makefile", "TAGS    := " + netnstest.BuildTags},
		{"../Makefile", `$(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/routeletd ./daemon`},
		{"../Dockerfile", "go build -trimpath -tags " + netnstest.BuildTags + ` -ldflags "$ld" -o /out/routeletd ./daemon`},
		{"../hack/vmtest/vmtest.sh", "go build -tags " + netnstest.BuildTags + ` -o "$run/bin/routeletd" ./daemon`},
	} {
		file, want := c.file, c.want
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), want) {
			t.Errorf("%s does not build with the tags: no %q", file, want)
		}
	}
}
