package netnstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// goBuild runs `go build -o out pkgs...` in root.
func goBuild(ctx context.Context, root, out string, pkgs ...string) error {
	args := append([]string{"build", "-o", out}, pkgs...)
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}
