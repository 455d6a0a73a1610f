package debugapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestListenServeGet: the socket is 0600, serves State to Get, and is
// removed when Serve ends; a stale socket of ours is replaced.
func TestListenServeGet(t *testing.T) {
	dir := t.TempDir()
	// A stale socket a killed daemon left: bound, then the process "died".
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	gctx, gcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer gcancel()
	if _, err := Get(gctx, dir); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("Get on a stale socket = %v, want ErrNoDaemon", err)
	}

	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(SocketPath(dir))
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket = %v, %v; want mode 0600", fi, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, l, func(context.Context) (*State, error) {
			return &State{Source: SourceDaemon, Node: Node{Name: "node-a"}}, nil
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	st, err := Get(gctx, dir)
	if err != nil || st.Node.Name != "node-a" || st.Source != SourceDaemon {
		t.Fatalf("Get = %+v, %v", st, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(SocketPath(dir)); !os.IsNotExist(err) {
		t.Errorf("socket left after Serve ended: %v", err)
	}
	if _, err := Get(gctx, dir); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("Get without a daemon = %v, want ErrNoDaemon", err)
	}
}

// TestListenRefusesNonSocket: a symlink or a regular file at the socket's
// path is named and left alone (never followed, never removed).
func TestListenRefusesNonSocket(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(path, target string) error
	}{
		{"symlink", func(path, target string) error { return os.Symlink(target, path) }},
		{"file", func(path, _ string) error { return os.WriteFile(path, []byte("x"), 0o600) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := c.make(SocketPath(dir), target); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Lstat(SocketPath(dir))
			l, err := Listen(dir)
			if err == nil {
				l.Close()
				t.Fatal("Listen replaced a non-socket")
			}
			if !strings.Contains(err.Error(), SocketPath(dir)) {
				t.Errorf("error %q does not name the path", err)
			}
			after, lerr := os.Lstat(SocketPath(dir))
			if lerr != nil || !os.SameFile(before, after) {
				t.Errorf("the %s at the socket path was changed: %v", c.name, lerr)
			}
			if b, _ := os.ReadFile(target); string(b) != "keep" {
				t.Errorf("symlink target changed: %q", b)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("state dir holds %d entries after a refused Listen, want only the %s", len(ents), c.name)
			}
		})
	}
}
