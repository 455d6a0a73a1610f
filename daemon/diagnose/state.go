package diagnose

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/workloads"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// State is what diagnose reads besides the kernel: the records the daemon
// works from and what it published. StateDir reads them from the state
// directory, which works whether or not the daemon runs; a source that
// asks the running daemon (its state endpoint) can implement the same
// interface and be tried first.
type State interface {
	// DaemonStatus is daemon.json (nil, nil when there is none).
	DaemonStatus() (*state.DaemonStatus, error)
	// DaemonRunning reports whether a daemon holds the state directory.
	DaemonRunning() (bool, error)
	// Workloads returns the workload records by key (as the daemon keys
	// them) and why each unreadable one is not served.
	Workloads() (map[string]*state.Workload, map[string]string, error)
	// Nodes returns every node record as delivered (this node's own
	// included) and the ones that cannot be read.
	Nodes() ([]peers.Record, []error, error)
	// Ledger returns the first-seen times of the peer values the daemon
	// keeps (pkg/peers), which decide between competing claims.
	Ledger() (map[peers.Claim]peers.Sighting, error)
}

// StateDir is State read from a state directory, without writing to it.
type StateDir struct {
	dir   string
	store *state.Store
}

// OpenStateDir opens dir, which must exist.
func OpenStateDir(dir string) (*StateDir, error) {
	if _, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	s, err := state.Open(dir)
	if err != nil {
		return nil, err
	}
	return &StateDir{dir: dir, store: s}, nil
}

// DaemonStatus reads daemon.json.
func (s *StateDir) DaemonStatus() (*state.DaemonStatus, error) {
	st, err := s.store.ReadDaemonStatus()
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, state.ErrNotFound) {
		return nil, nil
	}
	return st, err
}

// LockFile is the daemon's flock in the state directory (docs/design.md).
const LockFile = "routeletd.lock"

// DaemonRunning probes the daemon's flock with a brief shared lock, as the
// plugin's STATUS does.
func (s *StateDir) DaemonRunning() (bool, error) {
	fd, err := unix.Open(filepath.Join(s.dir, LockFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", LockFile, err)
	}
	defer unix.Close(fd)
	err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", LockFile, err)
	}
	unix.Flock(fd, unix.LOCK_UN)
	return false, nil
}

// Workloads reads workloads/ as the daemon does.
func (s *StateDir) Workloads() (map[string]*state.Workload, map[string]string, error) {
	return workloads.New(s.store, slog.New(slog.DiscardHandler)).All()
}

// Nodes reads nodes/.
func (s *StateDir) Nodes() ([]peers.Record, []error, error) {
	if _, err := os.Lstat(s.store.NodesDir()); err != nil {
		return nil, nil, fmt.Errorf("node records: %w", err)
	}
	good, bad := s.store.ListNodes()
	out := make([]peers.Record, 0, len(good))
	for _, n := range good {
		out = append(out, peers.FromState(n))
	}
	return out, bad, nil
}

// Ledger reads the peer claim ledger.
func (s *StateDir) Ledger() (map[peers.Claim]peers.Sighting, error) {
	return peers.ReadLedger(s.dir)
}
