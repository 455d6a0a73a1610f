package cniconf

import (
	"context"
	"log/slog"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/internal/readlimit"
)

// Conf is the conflist routeletd writes once it is ready (cni-conf-*
// keys): the template, checked at start-up.
type Conf struct {
	cfg  *config.Config
	dir  string // cni-conf-dir, symlinks resolved
	tmpl []byte
}

// FromConfig reads and checks the conflist template and the conf dir
// before anything touches the kernel; a bad one is a *config.Error naming
// the key (exit 2). nil when cni-conf-dir is empty.
func FromConfig(cfg *config.Config) (*Conf, error) {
	if cfg.CNIConfDir == "" {
		return nil, nil
	}
	dir, err := ResolveDir(cfg.CNIConfDir)
	if err != nil {
		return nil, cfg.KeyError("cni-conf-dir", cfg.CNIConfDir, err)
	}
	c := &Conf{cfg: cfg, dir: dir, tmpl: []byte(DefaultTemplate)}
	if cfg.CNIConfTemplate != "" {
		data, err := readlimit.File(cfg.CNIConfTemplate, config.MaxFileSize)
		if err != nil {
			return nil, cfg.KeyError("cni-conf-template", cfg.CNIConfTemplate, err)
		}
		c.tmpl = data
	}
	// The pod MTU is known only later; any valid one checks the rest.
	if _, err := c.render(1500); err != nil {
		return nil, cfg.KeyError("cni-conf-template", cfg.CNIConfTemplate, err)
	}
	return c, nil
}

// render fills the daemon's values into the template.
func (c *Conf) render(mtu int) ([]byte, error) {
	return Render(c.tmpl, Params{MTU: mtu, StateDir: c.cfg.StateDir, IfacePrefix: c.cfg.IfacePrefix})
}

// Start renders the list with the pod MTU and starts its writer until ctx
// is done; the returned function (agent.Options.OnReady) asks for a write.
// With no cni-conf-dir it returns nil.
func (c *Conf) Start(ctx context.Context, podMTU int, log *slog.Logger) (func(), error) {
	if c == nil {
		return nil, nil
	}
	data, err := c.render(podMTU)
	if err != nil {
		return nil, c.cfg.KeyError("cni-conf-template", c.cfg.CNIConfTemplate, err)
	}
	w := NewWriter(c.dir, c.cfg.CNIConfName, data, log.With("component", "cniconf"))
	go w.Run(ctx)
	return w.Notify, nil
}
