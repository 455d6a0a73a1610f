package agent

import (
	"errors"
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
// subdirectories, those older than any ADD (ipam.StaleTempAge). Only
// unlocked regular files named like a writer's temp file go, and no
// symlink is followed.
type StateDirTemps struct {
	Store   *state.Store
	IPAMDir string // <stateDir>/ipam
}

var _ TempCollector = StateDirTemps{}

// RemoveStaleTemps implements TempCollector: both sweeps run; their
// errors are joined.
func (c StateDirTemps) RemoveStaleTemps() ([]string, error) {
	removed, err := c.Store.RemoveStaleTemps(staleTempAge)
	r, ierr := ipam.RemoveStaleTemps(c.IPAMDir, ipam.StaleTempAge)
	return append(removed, r...), errors.Join(err, ierr)
}
