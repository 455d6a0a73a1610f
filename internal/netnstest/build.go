package netnstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// Reference plugins from the containernetworking/plugins module, built at the
// version go.mod requires.
const (
	PTPPackage       = "github.com/containernetworking/plugins/plugins/main/ptp"
	HostLocalPackage = "github.com/containernetworking/plugins/plugins/ipam/host-local"
	PortmapPackage   = "github.com/containernetworking/plugins/plugins/meta/portmap"
)

// ModuleRoot returns the directory holding routelet's go.mod, searching from
// the working directory upwards.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/routelet/routelet\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module root: no go.mod of github.com/routelet/routelet above the working directory")
		}
		dir = parent
	}
}

// goTool returns the go command: the one on PATH, else the one of the
// toolchain that built this binary.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// BuildRoutelet builds the routelet plugin (./plugin) into dir/routelet.
func BuildRoutelet(ctx context.Context, dir string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	return goBuild(ctx, root, filepath.Join(dir, "routelet"), "./plugin")
}

// BuildRouteletd builds the node daemon (./daemon) into dir/routeletd.
func BuildRouteletd(ctx context.Context, dir string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	return goBuild(ctx, root, filepath.Join(dir, "routeletd"), "./daemon")
}

// BuildReference builds the given reference plugin packages (PTPPackage…)
// into dir, each binary named after its package's last element.
func BuildReference(ctx context.Context, dir string, pkgs ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	if len(pkgs) == 0 {
		return nil
	}
	return goBuild(ctx, root, dir+string(filepath.Separator), pkgs...)
}

// PrebuiltEnv names the environment variable that points the Build
// functions at a directory of binaries built beforehand (routelet,
// routeletd, and the reference plugins under their package's last element):
// they then copy from there instead of running the go tool. The VM lane
// uses it, so nothing is compiled under emulation.
const PrebuiltEnv = "ROUTELET_PREBUILT_BIN"

// BuildTags are the build tags every routelet binary is built with (the
// Makefile, the Dockerfile, the image and VM builds, the tests' builds).
// grpcnotrace keeps gRPC (the etcd client's) from linking
// golang.org/x/net/trace, whose html/template makes the linker keep every
// exported method of every type in the binary: without it routeletd's
// code, read-only data and pclntab are about 5.6 MB larger, and the pages
// of them a run touches count in the daemon's RSS. gRPC's request traces
// (grpc.EnableTracing, off by default) are what the tag leaves out.
const BuildTags = "grpcnotrace"

// goBuild runs `CGO_ENABLED=0 go build -tags BuildTags -o out pkgs...` in root, or copies the binaries
// from the PrebuiltEnv directory when it is set. out is a file for one
// package and a directory (ending in a separator) for several.
func goBuild(ctx context.Context, root, out string, pkgs ...string) error {
	if dir := os.Getenv(PrebuiltEnv); dir != "" {
		return copyPrebuilt(dir, out, pkgs)
	}
	args := append([]string{"build", "-tags", BuildTags, "-o", out}, pkgs...)
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = root
	// Static, as the releases of routelet and of the reference plugins
	// are: a dynamically linked Go binary starts about a millisecond later
	// (the loader, libc, cgo's thread start), which every CNI call pays.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// copyPrebuilt copies the binaries of pkgs from dir to out (see goBuild):
// "./plugin" is routelet, "./daemon" routeletd, any other package the last
// element of its path.
func copyPrebuilt(dir, out string, pkgs []string) error {
	for _, pkg := range pkgs {
		name := path.Base(pkg)
		switch pkg {
		case "./plugin", ".":
			name = "routelet"
		case "./daemon":
			name = "routeletd"
		}
		dst := out
		if strings.HasSuffix(out, string(filepath.Separator)) {
			dst = filepath.Join(out, name)
		}
		if err := copyExecutable(filepath.Join(dir, name), dst); err != nil {
			return fmt.Errorf("prebuilt %s (%s=%s): %w", pkg, PrebuiltEnv, dir, err)
		}
	}
	return nil
}

// copyExecutable copies the file src to dst with mode 0755, creating dst's
// directory as go build -o does.
func copyExecutable(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return f.Close()
}
