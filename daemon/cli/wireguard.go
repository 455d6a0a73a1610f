package cli

import (
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/routelet/routelet/pkg/wireguard"
)

// isRoot reports whether routeletd runs as root; tests replace it.
var isRoot = func() bool { return os.Geteuid() == 0 }

// WireGuard is `routeletd wireguard rotate-key [flags]`: it replaces the
// node's WireGuard private key (<stateDir>/wireguard/private.key) with a
// new one and prints the new public key. A running routeletd (whose state
// directory is used, see runningConfig) sees the file change, sets the
// new key on its device and publishes the new public key at once; a
// stopped one takes it at its next start.
func WireGuard(args []string) int { return wireGuardCmd(args, os.Stdout, os.Stderr) }

func wireGuardCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "rotate-key" {
		fmt.Fprintln(stderr, "usage: routeletd wireguard rotate-key [flags]")
		return ExitConfig
	}
	const cmd = "wireguard rotate-key"
	if !isRoot() {
		fmt.Fprintf(stderr, "routeletd %s: must run as root (the key is root's, in <state-dir>/wireguard)\n", cmd)
		return ExitFail
	}
	cfg, _, code := LoadConfig(args[1:])
	if cfg == nil {
		return code
	}
	cfg = runningConfig(cmd, cfg, stderr)
	fi, err := os.Lstat(cfg.StateDir)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "routeletd %s: state directory %s: %s\n", cmd, esc(cfg.StateDir), esc(err.Error()))
		return ExitFail
	case fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir():
		fmt.Fprintf(stderr, "routeletd %s: state directory %s is not a directory (a symlink is not followed)\n", cmd, esc(cfg.StateDir))
		return ExitFail
	}
	key, err := wireguard.RotateKey(cfg.StateDir)
	if err != nil {
		fmt.Fprintf(stderr, "routeletd %s: %s\n", cmd, esc(err.Error()))
		return ExitFail
	}
	fmt.Fprintln(stdout, key.PublicKey().String())
	return ExitOK
}
