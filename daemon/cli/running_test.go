package cli

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/instance"
)

// withDaemon makes findDaemon answer id and err for the test.
func withDaemon(t *testing.T, id *instance.Identity, err error) {
	t.Helper()
	old := findDaemon
	findDaemon = func() (*instance.Identity, error) { return id, err }
	t.Cleanup(func() { findDaemon = old })
}

// TestRunningConfig: with a daemon running, its settings are used
// whatever was given; each value given (flag, environment) that
// contradicts it is one line naming the key, the value given and the
// daemon's, and a value given that agrees or a default says nothing. With
// no daemon the configuration given is used silently; a daemon that does
// not say who it is is reported.
func TestRunningConfig(t *testing.T) {
	daemon := testConfig(t, "--node-name=node-z", "--state-dir=/srv/routelet", "--encapsulation=vxlan", "--pod-cidr=10.244.7.0/24")
	withDaemon(t, &instance.Identity{PID: 4242, Settings: instance.Settings(daemon)}, nil)
	env := map[string]string{"ROUTELET_MTU": "1400"}
	given, err := config.Load([]string{"--node-name=node-a", "--encapsulation=ipip", "--pod-cidr=10.244.7.0/24"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok }, os.ReadFile, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cfg := runningConfig("diagnose", given, &errb)
	if cfg.NodeName != "node-z" || cfg.StateDir != "/srv/routelet" || cfg.Encapsulation != "vxlan" || cfg.MTU != 0 {
		t.Errorf("configuration used: node %s, state dir %s, encapsulation %s, mtu %d; want the daemon's", cfg.NodeName, cfg.StateDir, cfg.Encapsulation, cfg.MTU)
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	for _, want := range []string{
		"routeletd diagnose: flag --encapsulation ipip contradicts the running routeletd (pid 4242), which runs with encapsulation vxlan: using the daemon's",
		"routeletd diagnose: environment variable ROUTELET_MTU 1400 contradicts the running routeletd (pid 4242), which runs with mtu 0: using the daemon's",
		"routeletd diagnose: flag --node-name node-a contradicts the running routeletd (pid 4242), which runs with node-name node-z: using the daemon's",
	} {
		if !strings.Contains(errb.String(), want+"\n") {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if len(lines) != 3 {
		t.Errorf("%d lines, want 3 (pod-cidr agrees, state-dir was not given):\n%s", len(lines), errb.String())
	}

	withDaemon(t, nil, instance.ErrNotRunning)
	errb.Reset()
	if cfg := runningConfig("status", given, &errb); cfg != given || errb.Len() != 0 {
		t.Errorf("no daemon: config %p (given %p), stderr %q; want the given one, silently", cfg, given, errb.String())
	}
	withDaemon(t, nil, errors.New("the holder does not say who it is"))
	if cfg := runningConfig("status", given, &errb); cfg != given || !strings.Contains(errb.String(), "does not say who it is; using the one given") {
		t.Errorf("a daemon that does not answer: stderr %q; want it said, and the given config used", errb.String())
	}
}
