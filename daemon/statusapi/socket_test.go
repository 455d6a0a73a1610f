package statusapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
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

// TestGetBoundsTheAnswer: an endless answer on the state socket ends at
// MaxStateSize with an error naming the socket and the limit (a status
// never grows without bound), and a refusal's body reaches the message
// with its control characters escaped.
func TestGetBoundsTheAnswer(t *testing.T) {
	dir := t.TempDir()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	refuse := make(chan bool, 2)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if <-refuse {
			http.Error(w, "no\x1b[2J\n✓ all ok", http.StatusInternalServerError)
			return
		}
		w.Write([]byte(`{"node":"`))
		zeros := make([]byte, 64<<10)
		for i := range zeros {
			zeros[i] = 'a'
		}
		for r.Context().Err() == nil {
			if _, err := w.Write(zeros); err != nil {
				return
			}
		}
	})}
	go srv.Serve(l)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	refuse <- false
	_, err = Get(ctx, dir)
	if err == nil || !strings.Contains(err.Error(), SocketPath(dir)) || !strings.Contains(err.Error(), "more than 64 MiB") {
		t.Errorf("Get of an endless answer = %v, want an error naming the socket and the 64 MiB limit", err)
	}
	refuse <- true
	_, err = Get(ctx, dir)
	if err == nil || strings.ContainsAny(err.Error(), "\x1b\n") || !strings.Contains(err.Error(), `no\x1b[2J\n✓ all ok`) {
		t.Errorf("Get of a refusal = %q, want the body with its control characters escaped", err)
	}
}
