package main

import (
	"errors"
	"time"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

// staleTempAge: temp files in the state directory at least this old and not
// locked are a killed writer's (a live writer locks its file at once).
const staleTempAge = time.Second

// stateTemps collects the temp files killed writers left in the state
// directory, at start and then on every leak collection tick: in the
// Store's directories (the root, workloads/, nodes/), whose writers lock
// their temp file as they create it, those staleTempAge old; in the IPAM
// directory and its subdirectories, those older than any ADD
// (ipam.StaleTempAge). Only unlocked regular files named like a writer's
// temp file go, and no symlink is followed.
type stateTemps struct {
	store   *state.Store
	ipamDir string
}

// RemoveStaleTemps implements agent.TempCollector.
func (c stateTemps) RemoveStaleTemps() ([]string, error) {
	removed, err := c.store.RemoveStaleTemps(staleTempAge)
	r, ierr := ipam.RemoveStaleTemps(c.ipamDir, ipam.StaleTempAge)
	return append(removed, r...), errors.Join(err, ierr)
}
