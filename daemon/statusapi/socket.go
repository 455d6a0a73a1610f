package statusapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/readlimit"
	"github.com/routelet/routelet/internal/termsafe"
)

// ErrNoDaemon means no daemon answers on the state directory's socket (none
// there, or a stale one nobody listens on).
var ErrNoDaemon = errors.New("no routeletd answers on its state socket")

// MaxStateSize bounds the State Get reads: a node with ten thousand pods
// and peers answers in a few MiB.
const MaxStateSize = 64 << 20

// Get asks the daemon of stateDir for its State. ErrNoDaemon (wrapped)
// when none answers; ctx bounds the whole exchange.
func Get(ctx context.Context, stateDir string) (*State, error) {
	path := SocketPath(stateDir)
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://routeletd"+StatePath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoDaemon, path, err)
		}
		return nil, fmt.Errorf("state socket %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("state socket %s: %s: %s", path, termsafe.Escape(resp.Status), termsafe.Escape(string(b)))
	}
	body, err := readlimit.All(resp.Body, "state socket "+path, MaxStateSize)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("state socket %s: decode: %w", path, err)
	}
	return &st, nil
}

// Listener is the endpoint's bound socket.
type Listener struct {
	*net.UnixListener
	path string
	info fs.FileInfo // the socket file as created, to remove only ours
}

// Listen binds the endpoint's socket in stateDir, mode 0600 from the
// start: it is bound in a fresh private directory, chmodded and renamed
// into place without replacing anything. A socket already at the path is
// a stale one of a daemon that held the state directory before (the
// caller holds the state directory's daemon lock) and is removed when it
// belongs to this user; anything else there (a symlink, a file, another
// user's socket) is an error naming it and is left alone.
func Listen(stateDir string) (*Listener, error) {
	path := SocketPath(stateDir)
	if err := removeStale(path); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(stateDir, ".sock-")
	if err != nil {
		return nil, fmt.Errorf("state socket: %w", err)
	}
	defer os.RemoveAll(tmp)
	tmpPath := filepath.Join(tmp, SocketName)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmpPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("state socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmpPath, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("state socket: %w", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmpPath, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE); err != nil {
		l.Close()
		return nil, fmt.Errorf("state socket: move into place at %s: %w", path, err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("state socket: %w", err)
	}
	return &Listener{UnixListener: l, path: path, info: info}, nil
}

// removeStale removes a socket of this user at path; anything else there
// is an error.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("state socket: %s exists and is not a socket (%s); not removed", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("state socket: %s belongs to uid %d, not to us; not removed", path, st.Uid)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state socket: remove stale %s: %w", path, err)
	}
	return nil
}

// Close closes the socket and removes its file when it is still the one
// Listen created.
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	if fi, lerr := os.Lstat(l.path); lerr == nil && os.SameFile(fi, l.info) {
		os.Remove(l.path)
	}
	return err
}

// Serve answers GET StatePath with get's State as JSON until ctx is
// done, then closes l.
func Serve(ctx context.Context, l *Listener, get func(context.Context) (*State, error), log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+StatePath, func(w http.ResponseWriter, r *http.Request) {
		st, err := get(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(st); err != nil {
			log.Debug("state endpoint: write", "err", err)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-stop:
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	err := srv.Serve(l)
	close(stop)
	<-done
	l.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
