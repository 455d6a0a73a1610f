// Package dirwatch watches one directory of the state directory with
// fsnotify: the record directories (workloads/, nodes/) for the daemon's
// record sources, the WireGuard key's directory for its manager.
package dirwatch

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/routelet/routelet/pkg/state"
)

// IsRecord reports whether a file name in a record directory can be a
// record: writers' temp files (dotfiles) and names without the record
// extension are not.
func IsRecord(name string) bool {
	return !strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".json")
}

// Watch watches dir and calls changed with the name of every record file
// (IsRecord) created, changed or removed, until ctx is done: WatchNames
// for the record directories.
func Watch(ctx context.Context, dir string, changed func(name string), rescan func(), log *slog.Logger) error {
	return WatchNames(ctx, dir, IsRecord, changed, rescan, log)
}

// WatchNames watches dir and calls changed with the name of every file
// match accepts that is created, changed or removed, until ctx is done. A
// watcher error (e.g. queue overflow) calls rescan, since events may have
// been lost. When dir itself is removed or renamed away, it is re-created
// (0700, as the plugin would) and watched again, followed by rescan; until
// that works the periodic resync still reads it. The callbacks run on
// WatchNames' goroutine and must only record hints.
func WatchNames(ctx context.Context, dir string, match func(name string) bool, changed func(name string), rescan func(), log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file watcher: %w", err)
	}
	dir = filepath.Clean(dir)
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	go func() {
		defer w.Close()
		lost := false // the directory went away
		var retry <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				path := filepath.Clean(ev.Name)
				if path == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					log.Warn("watched directory went away, re-creating and watching it again", "dir", path)
					lost = true
					retry = time.After(0)
					continue
				}
				if name := filepath.Base(path); filepath.Dir(path) == dir && match(name) {
					changed(name)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("file watcher error, reading the directory again", "dir", dir, "err", err)
				rescan()
			case <-retry:
				retry = nil
				if lost {
					w.Remove(dir) // the old watch may linger on a renamed directory
					if state.EnsureDir(dir) == nil && w.Add(dir) == nil {
						lost = false
						log.Info("watching the directory again", "dir", dir)
					}
				}
				rescan()
				if lost {
					retry = time.After(time.Second)
				}
			}
		}
	}()
	return nil
}
