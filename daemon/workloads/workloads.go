// Package workloads is the typed source of the workload records the CNI
// plugin writes into the state directory's workloads/ (the plugin's
// contract): every record read and validated by pkg/state, keyed by an
// opaque key (the record's file name), with change hints from fsnotify.
// The agent sees records and keys, never a path.
package workloads

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/routelet/routelet/daemon/internal/dirwatch"
	"github.com/routelet/routelet/pkg/state"
)

// Dir is the workload source of one state directory.
type Dir struct {
	store *state.Store
	log   *slog.Logger
}

// New returns the workload source of store's workloads/.
func New(store *state.Store, log *slog.Logger) *Dir {
	if log == nil {
		log = slog.Default()
	}
	return &Dir{store: store, log: log}
}

// All reads every record: the records served by key, why each other record
// cannot be (by key), and an error when the records cannot be listed at
// all (then nothing is known: keep what was known).
func (d *Dir) All() (map[string]*state.Workload, map[string]string, error) {
	dir := d.store.WorkloadsDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", dir, err)
	}
	good, bad := map[string]*state.Workload{}, map[string]string{}
	for _, e := range entries {
		key := e.Name()
		if !dirwatch.IsRecord(key) {
			continue
		}
		w, err := d.Get(key)
		switch {
		case errors.Is(err, state.ErrNotFound):
		case err != nil:
			bad[key] = err.Error()
		default:
			good[key] = w
		}
	}
	return good, bad, nil
}

// Get reads the record under key through the Store, which validates it;
// the record must be the one that belongs under that key. The file is
// read once. A record that is gone is state.ErrNotFound (wrapped).
func (d *Dir) Get(key string) (*state.Workload, error) {
	return d.store.WorkloadFile(key)
}

// Delete removes w's record (leak collection); missing is success.
func (d *Dir) Delete(w *state.Workload) error {
	return d.store.DeleteWorkload(w.ContainerID, w.IfName)
}

// Repair writes last, the last good read of the record under key, back
// over that file (atomically, by rename) when the file still holds no JSON
// at all (state.ErrCorrupt: truncated, emptied, garbage), and reports
// whether it did. A file that is gone, readable again or unreadable for
// another reason (another version, another attachment's record, a
// symlink) is left as it is: a writer may have replaced it meanwhile.
func (d *Dir) Repair(key string, last *state.Workload) (bool, error) {
	if _, err := d.Get(key); !errors.Is(err, state.ErrCorrupt) {
		return false, nil
	}
	w := *last
	w.IPs = slices.Clone(last.IPs)
	if got := state.AttachmentName(w.ContainerID, w.IfName) + ".json"; got != key {
		return false, fmt.Errorf("repair %s: the last good record belongs in %s", key, got)
	}
	if err := d.store.PutWorkload(&w); err != nil {
		return false, fmt.Errorf("repair %s: %w", key, err)
	}
	return true, nil
}

// Watch calls changed with the key of every record created, changed or
// removed, and rescan when events may have been lost, until ctx is done.
func (d *Dir) Watch(ctx context.Context, changed func(key string), rescan func()) error {
	return dirwatch.Watch(ctx, d.store.WorkloadsDir(), changed, rescan, d.log)
}
