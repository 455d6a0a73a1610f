package ipam

import (
	"errors"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/routelet/routelet/pkg/state"
)

// StaleTempAge is how old a temp file in the IPAM directory must be, besides
// unlocked, before RemoveStaleTemps takes it for a killed writer's: longer
// than any runtime lets an ADD run (the plugin's GC waits as long before it
// takes an allocation without a record for an orphan). Every writer locks
// its temp file from its creation until its rename or unlink; the age
// also covers a writer that does not (a plugin binary older than that
// rule, still running an ADD across an upgrade).
const StaleTempAge = 10 * time.Minute

// tempDirs are the IPAM directory and the subdirectories writers write
// in: the allocator's and the plugin's veth-locks/.
var tempDirs = []string{".", addrsSubdir, attachmentsSubdir, blocksSubdir, "veth-locks"}

// RemoveStaleTemps removes the temp files killed writers left in the IPAM
// directory dir and its subdirectories: regular files named ".tmp-" and
// digits, not locked by a live writer and at least minAge old
// (state.RemoveStaleTemps: no symlink is followed, neither a file nor a
// directory). Unlike the sweep of List it takes no IPAM lock, so it can
// run beside allocations, from another process (routeletd's leak
// collection). Directories that do not exist yet are skipped. It returns
// the paths removed; errors are joined and do not stop the scan.
func RemoveStaleTemps(dir string, minAge time.Duration) ([]string, error) {
	var removed []string
	var errs []error
	for _, sub := range tempDirs {
		r, err := state.RemoveStaleTemps(filepath.Join(dir, sub), minAge)
		removed = append(removed, r...)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}
