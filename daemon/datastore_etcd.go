package main

import (
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"

	"github.com/routelet/routelet/daemon/cli"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/datastore/etcd"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

// openEtcd opens the etcd datastore (config key datastore: etcd). The
// blocks holding the addresses this node's pods use are served whatever
// etcd's claims say (docs/etcd.md, *Blocks*).
func openEtcd(_ context.Context, cfg *config.Config, store *state.Store, log *slog.Logger) (datastore.Datastore, error) {
	return cli.NewEtcd(cfg, log, func(o *etcd.Options) { o.InUse = func() ([]netip.Addr, error) { return podAddrs(cfg, store, log) } })
}

// podAddrs are the addresses this node's pods use, as the state directory
// says: the built-in IPAM's claims and the workload records' addresses
// (a record that cannot be read is logged and names none).
func podAddrs(cfg *config.Config, store *state.Store, log *slog.Logger) ([]netip.Addr, error) {
	out, err := ipam.ClaimedAddrs(filepath.Join(cfg.StateDir, "ipam"))
	if err != nil {
		return nil, err
	}
	good, bad := store.ListWorkloads()
	for _, e := range bad {
		log.Warn("workload record unreadable: its addresses do not count as used when the blocks are chosen", "err", e)
	}
	for _, w := range good {
		for _, ip := range w.IPs {
			if p, err := netip.ParsePrefix(ip); err == nil {
				out = append(out, p.Addr())
			}
		}
	}
	return out, nil
}
