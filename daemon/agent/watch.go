package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/pkg/state"
)

// WatchFiles watches dirs (workloads/, nodes/) and forwards each event to a
// until ctx is done. A watcher error (e.g. queue overflow) asks for a full
// re-read, since events may have been lost. When a watched directory itself
// is removed or renamed away, it is re-created (0700, as the plugin would)
// and watched again, followed by a full re-read; until that works the
// periodic resync still reads it.
func WatchFiles(ctx context.Context, a *Agent, workloadsDir, nodesDir string, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file watcher: %w", err)
	}
	dirs := []string{filepath.Clean(workloadsDir), filepath.Clean(nodesDir)}
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	go func() {
		defer w.Close()
		lost := map[string]bool{} // watched dirs that went away
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
				if (path == dirs[0] || path == dirs[1]) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
					log.Warn("record directory went away, re-creating and watching it again", "dir", path)
					lost[path] = true
					retry = time.After(0)
					continue
				}
				dir, name := filepath.Split(path)
				a.NotifyFile(filepath.Clean(dir) == dirs[1], name)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("file watcher error, re-reading all records", "err", err)
				a.NotifyRescan()
			case <-retry:
				retry = nil
				for d := range lost {
					w.Remove(d) // the old watch may linger on a renamed directory
					if err := state.EnsureDir(d); err != nil {
						continue
					}
					if err := w.Add(d); err != nil {
						continue
					}
					delete(lost, d)
					log.Info("watching record directory again", "dir", d)
				}
				a.NotifyRescan()
				if len(lost) > 0 {
					retry = time.After(time.Second)
				}
			}
		}
	}()
	return nil
}

// Interest is what the agent owns in the netlink event stream: links and
// routes on workload interfaces (the interface prefix), routes without a
// device (the local blocks' blackholes), and neighbour deletions on
// workload interfaces (a static ARP entry removed). The keeper's link and
// neighbour hints ride on the same events.
func (a *Agent) Interest() netwatch.Interest {
	return netwatch.Interest{Prefixes: []string{a.opts.IfacePrefix}, NoInterface: true, NeighDeletesOnly: true}
}

// OnLink implements netwatch.Handler.
func (a *Agent) OnLink(ev netwatch.LinkEvent) { a.NotifyLink(ev.Name, ev.Kind, ev.Up, !ev.Deleted) }

// OnRoute implements netwatch.Handler.
func (a *Agent) OnRoute(ev netwatch.RouteEvent) { a.NotifyRoute(ev) }

// OnNeigh implements netwatch.Handler: only entries with an address
// (neighbours, not bare FDB entries) can be a static ARP entry.
func (a *Agent) OnNeigh(ev netwatch.NeighEvent) {
	if ev.IP.IsValid() {
		a.NotifyNeigh(ev)
	}
}

// Rescan implements netwatch.Handler: events were lost, re-read everything.
func (a *Agent) Rescan() { a.NotifyRescan() }

var _ netwatch.Handler = (*Agent)(nil)

// KernelHost is the real Host: netlink of the calling process's namespace
// and the filesystem for netns paths.
type KernelHost struct{}

// Links returns the name and netlink kind of every link in the namespace.
func (KernelHost) Links() (map[string]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make(map[string]string, len(links))
	for _, l := range links {
		out[l.Attrs().Name] = l.Type()
	}
	return out, nil
}

// NetnsGone reports whether path no longer exists or is no longer a network
// namespace (e.g. an unmounted bind-mount point left behind). Other errors
// (permissions) count as alive: never release on doubt.
func (KernelHost) NetnsGone(path string) bool {
	if path == "" {
		return true
	}
	err := ns.IsNSorErr(path)
	var notExist ns.NSPathNotExistErr
	var notNS ns.NSPathNotNSErr
	return errors.As(err, &notExist) || errors.As(err, &notNS)
}
