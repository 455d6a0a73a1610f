package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/birdtest"
	"github.com/routelet/routelet/internal/netnstest"
)

// birdDirPrefix starts the names of StartBird's directories, followed by
// the PID of the process that made them (netnstest.OwnedPrefix), so
// RemoveStale finds those of crashed runs.
const birdDirPrefix = "routelet-bird-"

// StartBird runs BIRD with cfg inside n, one of the cluster's namespaces
// (the router, a node's, a host's: AddHost), and returns it once it
// answers birdc. Close stops it; its files are in a directory of their
// own under the system's temporary directory (a short path: BIRD's
// control socket must fit a unix socket name), removed at Close, or by
// RemoveStale once this process is gone.
func (c *Cluster) StartBird(ctx context.Context, n ns.NetNS, cfg birdtest.Config) (*birdtest.Bird, error) {
	dir, err := os.MkdirTemp("", netnstest.OwnedPrefix(birdDirPrefix))
	if err != nil {
		return nil, err
	}
	c.birdDirs = append(c.birdDirs, dir)
	b, err := birdtest.Start(ctx, n, dir, cfg)
	if err != nil {
		return nil, err
	}
	c.birds = append(c.birds, b)
	return b, nil
}

// StartRouterBird is StartBird in the router namespace: the fabric's BGP
// router, a top-of-rack or route reflector the nodes peer with.
func (c *Cluster) StartRouterBird(ctx context.Context, cfg birdtest.Config) (*birdtest.Bird, error) {
	return c.StartBird(ctx, c.Router, cfg)
}

// stopBirds stops every BIRD StartBird started and removes their files.
func (c *Cluster) stopBirds() error {
	var errs []error
	for _, b := range c.birds {
		if err := b.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop bird in %s: %w", b.NS.Path(), err))
		}
	}
	c.birds = nil
	for _, d := range c.birdDirs {
		errs = append(errs, os.RemoveAll(d))
	}
	c.birdDirs = nil
	return errors.Join(errs...)
}

// removeStaleBirdDirs removes the directories StartBird made in processes
// that no longer exist.
func removeStaleBirdDirs() error {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return nil // nothing readable there: nothing of ours to remove
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() && netnstest.StaleOwner(birdDirPrefix, e.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(os.TempDir(), e.Name())))
		}
	}
	return errors.Join(errs...)
}
