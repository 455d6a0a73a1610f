package debugapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
)

// ErrNoDaemon means no daemon answers on the state directory's socket (none
// there, or a stale one nobody listens on).
var ErrNoDaemon = errors.New("no routeletd answers on its state socket")

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
		return nil, fmt.Errorf("state socket %s: %s: %s", path, resp.Status, b)
	}
	var st State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("state socket %s: decode: %w", path, err)
	}
	return &st, nil
}
