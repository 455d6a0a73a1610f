package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/instance"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/wireguard"
)

func asRoot(t *testing.T, root bool) {
	t.Helper()
	old := isRoot
	isRoot = func() bool { return root }
	t.Cleanup(func() { isRoot = old })
}

// TestRotateKey: rotate-key writes a new private key into the state
// directory and prints its public key; it refuses to run as another user
// than root, a state directory that does not exist, and other
// subcommands, writing nothing.
func TestRotateKey(t *testing.T) {
	withDaemon(t, nil, instance.ErrNotRunning)
	dir := t.TempDir()
	old, _, err := wireguard.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	asRoot(t, true)
	var out, errb bytes.Buffer
	if code := wireGuardCmd([]string{"rotate-key", "--node-name=n1", "--state-dir=" + dir}, &out, &errb); code != ExitOK {
		t.Fatalf("rotate-key: exit %d, stderr %q", code, errb.String())
	}
	now, err := wireguard.LoadKey(dir)
	if err != nil || now == old {
		t.Fatalf("key after rotate-key: changed %v, err %v", now != old, err)
	}
	if got := strings.TrimSpace(out.String()); got != now.PublicKey().String() {
		t.Errorf("printed %q, want the new public key %s", got, now.PublicKey())
	}

	for name, tc := range map[string]struct {
		root bool
		args []string
		want string
		code int
	}{
		"not root":        {false, []string{"rotate-key", "--node-name=n1", "--state-dir=" + dir}, "must run as root", ExitFail},
		"no state dir":    {true, []string{"rotate-key", "--node-name=n1", "--state-dir=" + filepath.Join(dir, "nope")}, "nope", ExitFail},
		"other command":   {true, []string{"show-key"}, "usage: routeletd wireguard rotate-key", ExitConfig},
		"no command":      {true, nil, "usage", ExitConfig},
		"bad daemon flag": {true, []string{"rotate-key", "--mtu=5"}, "", ExitConfig}, // LoadConfig says why on os.Stderr
	} {
		t.Run(name, func(t *testing.T) {
			asRoot(t, tc.root)
			var out, errb bytes.Buffer
			if code := wireGuardCmd(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) || out.Len() != 0 {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want it to name %q)", code, tc.code, out.String(), errb.String(), tc.want)
			}
			if k, _ := wireguard.LoadKey(dir); k != now {
				t.Error("the key changed")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); err == nil {
		t.Error("rotate-key made the missing state directory")
	}
}

// TestStatusRendersWireGuard: the status text sums up the WireGuard
// device and lists its error and every peer the device does not hold as
// wanted among the problems.
func TestStatusRendersWireGuard(t *testing.T) {
	age := int64(7)
	st := &statusapi.State{Source: statusapi.SourceDaemon, Loop: true, Readiness: statusapi.Readiness{Ready: true},
		WireGuard: &statusapi.WireGuard{Implementation: "userspace", Device: "wireguard.cali", PublicKey: "PUB=", Port: 51820, MTU: 1420, Up: true,
			Error: "route table: boom", PeersWithoutKey: []string{"node-d"},
			Peers: []statusapi.WireGuardPeer{
				{Node: "node-b", PublicKey: "B=", Configured: true, HandshakeAgeSeconds: &age},
				{Node: "node-c", PublicKey: "C="},
			}}}
	out := renderStatus(st, time.Now())
	for _, want := range []string{
		"wireguard.cali (userspace, up, port 51820, mtu 1420), public key PUB=; 2 peers, 1 with a handshake; 1 without a key (their pods unreachable): node-d",
		"✗ wireguard wireguard.cali: route table: boom",
		"✗ wireguard peer node-c (key C=): not configured on wireguard.cali as wanted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "peer node-b (key") {
		t.Errorf("a configured peer is listed as a problem:\n%s", out)
	}
}
