// Package birdtest runs BIRD 2 (Debian's bird2) as a real BGP peer for
// routelet's tests: inside a network namespace the test made, in the
// foreground, with its configuration (written from a Config), control
// socket and pid file in a directory of the test's, ended by its PID.
// Queries go through birdc on that socket and are parsed: `show
// protocols` into Protocol, `show route` into Route.
//
// Tests call StartT, which skips them when BIRD is not installed (or fails
// them when ROUTELET_REQUIRE_TEST_BINS=1, as for the other test binaries)
// and stops BIRD at cleanup, showing its log when the test failed.
package birdtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// Paths of the BIRD 2 daemon and its client, as Debian's bird2 installs
// them.
const (
	BirdPath  = "/usr/sbin/bird"
	BirdcPath = "/usr/sbin/birdc"
)

// RequireEnv set to 1 turns the skip for a missing BIRD into a failure
// (a lane that installs the test binaries first).
const RequireEnv = "ROUTELET_REQUIRE_TEST_BINS"

// Installed returns nil when BIRD and birdc are there, else an error
// naming what is missing and the package that has it.
func Installed() error {
	for _, p := range []string{BirdPath, BirdcPath} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing (Debian package bird2; hack/deps.sh installs it): %w", p, err)
		}
	}
	return nil
}

// SkipUnlessInstalled skips t when BIRD is not installed, or fails it when
// RequireEnv is 1.
func SkipUnlessInstalled(t testing.TB) {
	t.Helper()
	if err := Installed(); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// Bird is a running BIRD.
type Bird struct {
	NS      ns.NetNS
	Dir     string // holds the files below
	Conf    string // bird.conf
	Socket  string // the control socket birdc talks to
	PIDFile string
	cfg     Config
	proc    *netnstest.Proc
	log     *netnstest.Buffer
}

// Start writes cfg into dir (which must exist), starts BIRD inside n and
// waits until it answers on its control socket. Stop ends it.
func Start(ctx context.Context, n ns.NetNS, dir string, cfg Config) (*Bird, error) {
	if err := Installed(); err != nil {
		return nil, err
	}
	text, err := cfg.Render()
	if err != nil {
		return nil, err
	}
	b := &Bird{NS: n, Dir: dir, Conf: filepath.Join(dir, "bird.conf"), Socket: filepath.Join(dir, "bird.ctl"),
		PIDFile: filepath.Join(dir, "bird.pid"), cfg: cfg, log: &netnstest.Buffer{}}
	// A unix socket path is at most 107 bytes; t.TempDir's can come near.
	if len(b.Socket) > 100 {
		return nil, fmt.Errorf("bird control socket path %s: %d bytes, want at most 100", b.Socket, len(b.Socket))
	}
	// Check first: a refused configuration is then reported with BIRD's
	// own words rather than as a daemon that exited.
	if b.Conf, err = parseCheck(ctx, text, dir); err != nil {
		return nil, err
	}
	if b.proc, err = netnstest.StartIn(n, b.log, BirdPath, "-f", "-c", b.Conf, "-s", b.Socket, "-P", b.PIDFile); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(netnstest.Generous(10 * time.Second))
	for {
		_, err := b.Birdc(ctx, "show", "status")
		if err == nil {
			return b, nil
		}
		select {
		case <-b.proc.Done():
			return nil, fmt.Errorf("bird in netns %s exited (%v) before it answered; log:\n%s", netnstest.Name(n), b.proc.Err(), b.log.String())
		case <-ctx.Done():
			b.Kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Kill()
			return nil, fmt.Errorf("bird in netns %s not answering on %s: %v; log:\n%s", netnstest.Name(n), b.Socket, err, b.log.String())
		}
	}
}

// StartT is Start for a test: it skips t when BIRD is not installed (see
// SkipUnlessInstalled), fails t when BIRD does not start, and stops BIRD
// at cleanup, logging its output when t failed. Its files go into a
// temporary directory removed at cleanup.
func StartT(t testing.TB, n ns.NetNS, cfg Config) *Bird {
	t.Helper()
	SkipUnlessInstalled(t)
	// t.TempDir's path holds the test's name; a short directory keeps the
	// control socket's path within the unix socket limit.
	dir, err := os.MkdirTemp("", "birdtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := Start(t.Context(), n, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("stop bird in netns %s: %v", netnstest.Name(n), err)
		}
		if t.Failed() {
			t.Logf("bird in netns %s log:\n%s", netnstest.Name(n), b.Log())
		}
	})
	return b
}

// Config returns the configuration BIRD was last given.
func (b *Bird) Config() Config { return b.cfg }

// Log returns what BIRD wrote to stderr so far.
func (b *Bird) Log() string { return b.log.String() }

// PID returns BIRD's process ID, 0 once it has exited.
func (b *Bird) PID() int {
	select {
	case <-b.proc.Done():
		return 0
	default:
		return b.proc.Cmd.Process.Pid
	}
}

// Stop ends BIRD: SIGTERM (BIRD shuts its sessions down with a Cease and
// withdraws its kernel routes), SIGKILL after 5 s. Stopping a stopped BIRD
// is success.
func (b *Bird) Stop() error {
	select {
	case <-b.proc.Done():
		return nil
	default:
	}
	if err := b.proc.Stop(5 * time.Second); errors.Is(err, netnstest.ErrStillRunning) {
		_ = b.proc.Kill()
		return fmt.Errorf("bird %d ignored SIGTERM for 5s; killed", b.proc.Cmd.Process.Pid)
	}
	return nil // exited, whatever its status: gone
}

// Kill ends BIRD with SIGKILL, as a crash would: no Cease is sent, its
// kernel routes stay.
func (b *Bird) Kill() {
	select {
	case <-b.proc.Done():
	default:
		_ = b.proc.Kill()
	}
}

// Done is closed once BIRD has exited.
func (b *Bird) Done() <-chan struct{} { return b.proc.Done() }

// Birdc runs `birdc -s SOCKET args…` and returns its output without the
// greeting line. A reply that is an error (birdc prints it and still exits
// 0 for some) is returned as an error.
func (b *Bird) Birdc(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, BirdcPath, append([]string{"-s", b.Socket}, args...)...).CombinedOutput()
	text := string(out)
	if i := strings.IndexByte(text, '\n'); i >= 0 && strings.HasPrefix(text, "BIRD ") && strings.HasSuffix(text[:i], "ready.") {
		text = text[i+1:]
	}
	if err != nil {
		return text, fmt.Errorf("birdc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(text))
	}
	// An error is BIRD's whole reply, one line; the first line of a good
	// one is a header ("Name  Proto …", "Table master4:") or a message.
	first, _, _ := strings.Cut(text, "\n")
	for _, bad := range []string{"syntax error", "No such ", "No protocols match", "Unable to connect", "unknown command"} {
		if strings.Contains(first, bad) {
			return text, fmt.Errorf("birdc %s: %s", strings.Join(args, " "), strings.TrimSpace(text))
		}
	}
	return text, nil
}

// Reconfigure writes cfg and has BIRD load it (`birdc configure`):
// protocols whose settings changed restart, the others keep their
// sessions.
func (b *Bird) Reconfigure(ctx context.Context, cfg Config) error {
	text, err := cfg.Render()
	if err != nil {
		return err
	}
	if err := os.WriteFile(b.Conf, []byte(text), 0o600); err != nil {
		return fmt.Errorf("bird config: %w", err)
	}
	out, err := b.Birdc(ctx, "configure")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Reconfigured") && !strings.Contains(out, "Reconfiguration in progress") {
		return fmt.Errorf("birdc configure: %s\n%s", strings.TrimSpace(out), numbered(text))
	}
	b.cfg = cfg
	return nil
}

// Enable, Disable and Restart run `birdc enable|disable|restart NAME`: a
// disabled BGP protocol closes its session with a Cease and withdraws
// what it learned.
func (b *Bird) Enable(ctx context.Context, name string) error { return b.protoCmd(ctx, "enable", name) }
func (b *Bird) Disable(ctx context.Context, name string) error {
	return b.protoCmd(ctx, "disable", name)
}
func (b *Bird) Restart(ctx context.Context, name string) error {
	return b.protoCmd(ctx, "restart", name)
}

func (b *Bird) protoCmd(ctx context.Context, cmd, name string) error {
	if !symbol.MatchString(name) {
		return fmt.Errorf("birdc %s %q: not a protocol name", cmd, name)
	}
	_, err := b.Birdc(ctx, cmd, name)
	return err
}

// parseCheck writes text as dir/bird.conf and has BIRD parse it (-p: it
// starts nothing), returning the file's path.
func parseCheck(ctx context.Context, text, dir string) (string, error) {
	path := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return "", fmt.Errorf("bird config: %w", err)
	}
	if out, err := exec.CommandContext(ctx, BirdPath, "-p", "-c", path).CombinedOutput(); err != nil {
		return "", fmt.Errorf("bird refuses %s: %w: %s\n%s", path, err, strings.TrimSpace(string(out)), numbered(text))
	}
	return path, nil
}

// numbered returns text with line numbers, as BIRD's errors name lines.
func numbered(text string) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(&b, "%3d  %s\n", i+1, l)
	}
	return b.String()
}
