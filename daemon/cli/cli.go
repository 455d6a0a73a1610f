// Package cli implements routeletd's subcommands beside running the
// daemon: status, diagnose, nodes, cleanup, etcd init, leave and
// wireguard rotate-key (see docs/daemon.md). Each takes what follows its
// name on the command line and returns the exit status.
package cli

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/routelet/routelet/daemon/allowsetup"
	"github.com/routelet/routelet/daemon/bgpmgr"
	"github.com/routelet/routelet/daemon/cleanup"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/instance"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/wireguard"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitFail   = 1
	ExitConfig = 2
)

// LoadConfig reads the daemon's configuration (flags, environment, file)
// and sets up logging. A nil config means stop with the exit code given
// (0 after --help).
func LoadConfig(args []string) (*config.Config, *slog.Logger, int) {
	cfg, err := config.Load(args, os.LookupEnv, config.ReadFile, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil, nil, ExitOK
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd: %s\n", esc(err.Error()))
		return nil, nil, ExitConfig
	}
	log := newLogger(cfg)
	slog.SetDefault(log)
	return cfg, log, ExitOK
}

// newLogger is the daemon's logger: level and format from cfg, on stderr.
func newLogger(cfg *config.Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// Cleanup removes what routelet created on this node (the daemon must
// be stopped).
func Cleanup(args []string) int {
	cfg, log, code := LoadConfig(args)
	if cfg == nil {
		return code
	}
	// Before the daemon lock is taken, which would create routeletd.lock
	// in a directory that is not routelet's (or through a symlink).
	if err := cleanup.CheckStateDir(cfg.StateDir); err != nil {
		log.Error("cleanup refused", "stateDir", cfg.StateDir, "err", err)
		return ExitFail
	}
	release, err := instance.Stopped(cfg.StateDir, log)
	if err != nil {
		log.Error("cleanup refused: stop routeletd first", "err", err)
		return ExitFail
	}
	defer release()
	// The WireGuard device is routelet's with encryption on, or when
	// routelet made its key here (it ran with encryption before).
	wgDevice := ""
	if fi, err := os.Lstat(filepath.Join(cfg.StateDir, wireguard.KeyDir)); cfg.Encrypted() || err == nil && fi.IsDir() {
		wgDevice = cfg.WireGuard.Device
	}
	// The learned BGP routes are routelet's only with bgp on: their
	// protocol (186 by default) is also other routing daemons' (FRR).
	bgpProto := 0
	if cfg.BGP.Enabled {
		bgpProto = cmp.Or(cfg.BGP.RouteProtocol, bgpmgr.DefaultRouteProtocol)
	}
	rep, err := cleanup.Run(cleanup.Options{StateDir: cfg.StateDir, IfacePrefix: cfg.IfacePrefix, RouteProtocol: cfg.RouteProtocol,
		BGPRouteProtocol: bgpProto, VXLANDevices: []string{cfg.VXLANDevice, overlay.DeviceVXLANv6}, WireGuardDevice: wgDevice,
		IptablesBackend: allowsetup.Backend(cfg.IptablesBackend)}, log)
	log.Info("cleanup done", "links", len(rep.Links), "routes", len(rep.Routes), "paths", len(rep.Paths), "left", len(rep.Left))
	if err != nil {
		log.Error("cleanup incomplete", "err", err)
		return ExitFail
	}
	return ExitOK
}

// loadStopped loads the configuration of subcommand what, which needs the
// daemon stopped (see instance.Stopped); release ends that. A nil config
// means stop with the exit code given.
func loadStopped(args []string, what string) (cfg *config.Config, log *slog.Logger, release func(), code int) {
	cfg, log, code = LoadConfig(args)
	if cfg == nil {
		return nil, nil, nil, code
	}
	release, err := instance.Stopped(cfg.StateDir, log)
	if err != nil {
		log.Error(what+" refused: stop routeletd first", "err", err)
		return nil, nil, nil, ExitFail
	}
	return cfg, log, release, ExitOK
}
