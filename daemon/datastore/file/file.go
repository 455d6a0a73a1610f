// Package file is the file datastore: peers are the node records in the
// state directory's nodes/ (one JSON file per node, copied between hosts
// by the operator or a tool), this node's blocks are --pod-cidr, and this
// node's own record is nodes/<name>.json, re-written whenever it is lost or
// altered.
package file

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/internal/dirwatch"
	"github.com/routelet/routelet/internal/compact"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// Datastore is the file datastore of one state directory.
type Datastore struct {
	store  *state.Store
	blocks []netip.Prefix
	log    *slog.Logger
	now    func() time.Time

	mu    sync.Mutex
	self  *peers.Record
	nodes map[string]*state.Node // by file name: the last read
	dirty map[string]bool        // files to re-read; nil with all: everything
	all   bool
	out   []peers.Record // Peers' answer from nodes; nil once a read may have changed them
}

var _ datastore.Datastore = (*Datastore)(nil)

// New returns the file datastore over store with this node's blocks
// (--pod-cidr).
func New(store *state.Store, blocks []netip.Prefix, log *slog.Logger) *Datastore {
	if log == nil {
		log = slog.Default()
	}
	return &Datastore{store: store, blocks: slices.Clone(blocks), log: log, now: time.Now,
		nodes: map[string]*state.Node{}, dirty: map[string]bool{}, all: true}
}

// LocalBlocks returns --pod-cidr at once: the file datastore knows its
// blocks from the start.
func (d *Datastore) LocalBlocks(ctx context.Context, _ func(string)) ([]netip.Prefix, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return slices.Clone(d.blocks), nil
}

// Publish writes this node's record when it is missing or differs, and
// keeps it so from then on.
func (d *Datastore) Publish(self peers.Record) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.self, d.out = &self, nil
	return d.ensureSelf()
}

// Watch watches nodes/ until ctx is done: every changed file is re-read
// by the next Peers, and changed is called.
func (d *Datastore) Watch(ctx context.Context, changed func()) error {
	return dirwatch.Watch(ctx, d.store.NodesDir(), func(name string) {
		d.mu.Lock()
		d.dirty[name] = true
		d.mu.Unlock()
		changed()
	}, func() {
		d.mu.Lock()
		d.all = true
		d.mu.Unlock()
		changed()
	}, d.log)
}

// Health implements datastore.Datastore: the state directory has no
// reachability, request errors or liveness to tell.
func (d *Datastore) Health() datastore.Health { return datastore.Health{} }

// Rescan makes the next Peers re-read every record (the daemon's periodic
// resync).
func (d *Datastore) Rescan() {
	d.mu.Lock()
	d.all = true
	d.mu.Unlock()
}

// Peers returns every node record but this node's: after a rescan (and the
// first time) all of nodes/ is read, otherwise only the files that changed;
// the answer is built again only when a read changed something, and is
// shared between calls until then (it must not be modified).
// The unreadable records are returned as errors from a full read; a
// directory that cannot be listed is an error and the last read stays.
func (d *Datastore) Peers() ([]peers.Record, []error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var bad []error
	if d.all {
		ns, nbad := d.store.ListNodes()
		if err := dirError(nbad, d.store.NodesDir()); err != nil {
			return nil, nil, err
		}
		bad = nbad
		d.nodes = map[string]*state.Node{}
		for _, n := range ns {
			d.nodes[n.Name+".json"] = n
		}
		d.all = false
		d.dirty = compact.Clear(d.dirty)
		d.out = nil
	} else {
		if len(d.dirty) > 0 {
			d.out = nil
		}
		for name := range d.dirty {
			n, err := d.store.GetNode(strings.TrimSuffix(name, ".json"))
			switch {
			case errors.Is(err, state.ErrNotFound):
				delete(d.nodes, name)
			case err != nil:
				d.log.Warn("skipping bad node record", "file", name, "err", err)
				delete(d.nodes, name)
			default:
				d.nodes[name] = n
			}
		}
		d.dirty = compact.Clear(d.dirty) // the start's burst of events named every record
	}
	if err := d.ensureSelf(); err != nil {
		d.log.Error("cannot write own node record", "err", err)
	}
	if d.out == nil {
		names := make([]string, 0, len(d.nodes))
		for name := range d.nodes {
			names = append(names, name)
		}
		slices.Sort(names)
		d.out = []peers.Record{}
		for _, name := range names {
			if n := d.nodes[name]; d.self == nil || n.Name != d.self.Name {
				d.out = append(d.out, peers.FromState(n))
			}
		}
	}
	return d.out, bad, nil
}

// ensureSelf (re)writes this node's record when it is missing from the
// last read or differs from what is published. d.mu is held.
func (d *Datastore) ensureSelf() error {
	if d.self == nil {
		return nil
	}
	want := peers.ToState(*d.self)
	name := want.Name + ".json"
	if cur := d.nodes[name]; cur != nil && state.SameNode(cur, &want) {
		return nil
	}
	want.Updated = d.now().UTC()
	if err := d.store.PutNode(&want); err != nil {
		return err
	}
	d.log.Info("wrote own node record", "node", want.Name, "hostIPv4", want.HostIPv4, "hostIPv6", want.HostIPv6, "blocks", want.Blocks)
	d.nodes[name] = &want
	return nil
}

// dirError returns the error in bad that is about listing dir itself (not
// one of its files), or nil.
func dirError(bad []error, dir string) error {
	for _, err := range bad {
		var pe *fs.PathError
		if errors.As(err, &pe) && filepath.Clean(pe.Path) == filepath.Clean(dir) {
			return err
		}
	}
	return nil
}
