package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/instance"
)

// findDaemon asks the running routeletd who it is (instance.Find), which
// it answers root only; tests replace it.
var findDaemon = func() (*instance.Identity, error) {
	if os.Geteuid() != 0 {
		return nil, errNotRoot
	}
	return instance.Find()
}

// errNotRoot: the caller is not root, whom alone the daemon answers.
var errNotRoot = errors.New("not root")

// runningConfig is the configuration status and diagnose look at the node
// with: when a routeletd runs in this network namespace, the settings it
// runs with (node name, state directory, encapsulation, …:
// instance.SettingKeys), whatever flags were given; else cfg. A value of
// cfg given for one of those keys (flag, environment, config file) that
// contradicts the daemon's is reported on stderr, one line each naming the
// key, the value given and the daemon's; the daemon's is used. A daemon
// that cannot say who it is is reported too, and cfg is used.
func runningConfig(cmd string, cfg *config.Config, stderr io.Writer) *config.Config {
	id, err := findDaemon()
	if errors.Is(err, instance.ErrNotRunning) || errors.Is(err, errNotRoot) {
		return cfg
	}
	var run *config.Config
	if err == nil {
		run, err = id.Config()
	}
	if err != nil {
		fmt.Fprintf(stderr, "routeletd %s: cannot learn the running routeletd's configuration: %s; using the one given\n", cmd, esc(err.Error()))
		return cfg
	}
	given, theirs := instance.Settings(cfg), instance.Settings(run)
	keys := make([]string, 0, len(instance.SettingKeys))
	for k := range instance.SettingKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		src := keySource(cfg, k)
		if src == config.SourceDefault || slices.Equal(given[k], theirs[k]) {
			continue
		}
		fmt.Fprintf(stderr, "routeletd %s: %s %s contradicts the running routeletd (pid %d), which runs with %s %s: using the daemon's\n",
			cmd, givenAs(cfg, k, src), esc(showValue(given[k])), id.PID, k, esc(showValue(theirs[k])))
	}
	return run
}

// keySource is the layer key's value in cfg came from (config reports it
// through KeyError).
func keySource(cfg *config.Config, key string) config.Source {
	var e *config.Error
	if errors.As(cfg.KeyError(key, "", nil), &e) {
		return e.Source
	}
	return config.SourceDefault
}

// givenAs names where key's value was given: a flag, a variable, a file.
func givenAs(cfg *config.Config, key string, src config.Source) string {
	switch src {
	case config.SourceFlag:
		return "flag --" + key
	case config.SourceEnv:
		return "environment variable " + config.EnvName(key)
	case config.SourceNodeNameEnv:
		return "environment variable " + config.NodeNameEnv
	case config.SourceFile:
		return "config file " + esc(cfg.ConfigFile) + " key " + key
	}
	return string(src) + " " + key
}

// showValue is a setting's value for a message: a list comma-separated,
// an empty one or an empty string quoted.
func showValue(v []string) string {
	s := strings.Join(v, ",")
	if s == "" {
		return `""`
	}
	return s
}
