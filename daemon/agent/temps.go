package agent

import (
	"errors"
	"io/fs"
	"time"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

// staleTempAge: temp files in the Store's directories at least this old
// and not locked are a killed writer's (a live writer locks its file at
// once).
const staleTempAge = time.Second

// StateDirTemps is routeletd's TempCollector: it collects the temp files
// killed writers left in the state directory. In the Store's directories
// (the root, workloads/, nodes/), whose writers lock their temp file as
// they create it, those staleTempAge old go; in the IPAM directory and its
// subdirectories, those older than any ADD (ipam.StaleTempAge); in the
// WireGuard directory (whose writers lock theirs too, state.WriteFileAtomic),
// those staleTempAge old, and none when it does not exist. Only unlocked
// regular files named like a writer's temp file go, and no symlink is
// followed.
type StateDirTemps struct {
	Store   *state.Store
	IPAMDir string // <stateDir>/ipam
	// WireGuardDir is <stateDir>/wireguard ("": not swept).
	WireGuardDir string
}

var _ TempCollector = StateDirTemps{}

// RemoveStaleTemps implements TempCollector: every sweep runs; their
// errors are joined.
func (c StateDirTemps) RemoveStaleTemps() ([]string, error) {
	removed, err := c.Store.RemoveStaleTemps(staleTempAge)
	r, ierr := ipam.RemoveStaleTemps(c.IPAMDir, ipam.StaleTempAge)
	removed = append(removed, r...)
	var werr error
	if c.WireGuardDir != "" {
		r, werr = state.RemoveStaleTemps(c.WireGuardDir, staleTempAge)
		if errors.Is(werr, fs.ErrNotExist) {
			werr = nil // no WireGuard key was ever made here
		}
		removed = append(removed, r...)
	}
	return removed, errors.Join(err, ierr, werr)
}
