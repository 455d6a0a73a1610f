package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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
	return newEtcd(cfg, log, func(o *etcd.Options) { o.InUse = func() ([]netip.Addr, error) { return podAddrs(cfg, store, log) } })
}

// newEtcd checks the etcd keys and connects.
func newEtcd(cfg *config.Config, log *slog.Logger, mod ...func(*etcd.Options)) (*etcd.Datastore, error) {
	if err := cfg.CheckEtcd(); err != nil {
		return nil, err
	}
	o := etcd.Options{Etcd: etcd.Conn(cfg.Etcd), NodeName: cfg.NodeName, PodCIDRs: cfg.PodCIDRs, Logger: log}
	for _, m := range mod {
		m(&o)
	}
	return etcd.New(o)
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

// etcdCommandTimeout bounds the etcd subcommands' requests.
const etcdCommandTimeout = 30 * time.Second

// runEtcd is `routeletd etcd init --pool CIDR [--pool CIDR6] [--block-size
// N] [--block-size-v6 N] [flags]`: it writes the pools nodes without
// --pod-cidr claim their blocks from. The other flags are the daemon's
// (etcd-endpoints, etcd-*-file, etcd-prefix).
func runEtcd(args []string) int {
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintln(os.Stderr, "usage: routeletd etcd init --pool CIDR [--pool CIDR6] [--block-size 26] [--block-size-v6 122] [--etcd-endpoints URL ...]")
		return exitConfig
	}
	pools, rest, err := parsePools(args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd etcd init: %s\n", esc(err.Error()))
		return exitConfig
	}
	cfg, log, code := loadConfig(rest)
	if cfg == nil {
		return code
	}
	return withEtcd(cfg, log, "etcd init", func(ctx context.Context, ds *etcd.Datastore) error {
		changed, err := ds.Init(ctx, pools)
		if err == nil {
			log.Info("etcd pools", "pools", pools, "changed", changed, "prefix", cfg.Etcd.Prefix)
		}
		return err
	})
}

// withEtcd runs one etcd subcommand (named what) on a fresh client,
// bounded by etcdCommandTimeout, and returns its exit code.
func withEtcd(cfg *config.Config, log *slog.Logger, what string, run func(context.Context, *etcd.Datastore) error) int {
	ds, err := newEtcd(cfg, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd %s: %s\n", what, esc(err.Error()))
		return exitConfig
	}
	defer ds.Close()
	ctx, cancel := context.WithTimeout(context.Background(), etcdCommandTimeout)
	defer cancel()
	if err := run(ctx, ds); err != nil {
		log.Error(what+" failed", "err", err)
		fmt.Fprintf(os.Stderr, "routeletd %s: %s\n", what, esc(err.Error()))
		return exitFail
	}
	return exitOK
}

// initFlags are etcd init's own flags; the rest go to the daemon's config.
var initFlags = []string{"pool", "block-size", "block-size-v6"}

// parsePools takes etcd init's own flags out of args and returns the
// pools they describe and the remaining arguments.
func parsePools(args []string) ([]etcd.Pool, []string, error) {
	own, rest := []string{}, []string{}
	for i := 0; i < len(args); i++ {
		name := strings.TrimLeft(args[i], "-")
		name, _, hasValue := strings.Cut(name, "=")
		if !strings.HasPrefix(args[i], "-") || !slices.Contains(initFlags, name) {
			rest = append(rest, args[i])
			continue
		}
		own = append(own, args[i])
		if !hasValue && i+1 < len(args) {
			i++
			own = append(own, args[i])
		}
	}
	fs := flag.NewFlagSet("routeletd etcd init", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var cidrs []netip.Prefix
	fs.Func("pool", "pool CIDR blocks are claimed from (at most one per IP family)", func(s string) error {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		if p != p.Masked() {
			return fmt.Errorf("pool %s has host bits set (did you mean %s?)", p, p.Masked())
		}
		cidrs = append(cidrs, p)
		return nil
	})
	size4 := fs.Int("block-size", etcd.DefaultBlockSize, "prefix length of the IPv4 blocks")
	size6 := fs.Int("block-size-v6", etcd.DefaultBlockSizeV6, "prefix length of the IPv6 blocks")
	if err := fs.Parse(own); err != nil {
		return nil, nil, err
	}
	if len(cidrs) == 0 {
		return nil, nil, errors.New("at least one --pool CIDR is needed")
	}
	var pools []etcd.Pool
	for _, c := range cidrs {
		size := *size4
		if c.Addr().Is6() {
			size = *size6
		}
		pools = append(pools, etcd.Pool{CIDR: c, BlockSize: size})
	}
	if err := etcd.CheckPools(pools); err != nil {
		return nil, nil, err
	}
	return pools, rest, nil
}

// runLeave is `routeletd leave [flags]`: with the daemon stopped and no
// pod left on this node, it removes the node's record, liveness key and
// block claims from etcd; the peers then remove their routes to it.
func runLeave(args []string) int {
	cfg, log, release, code := loadStopped(args, "leave")
	if cfg == nil {
		return code
	}
	defer release()
	if cfg.Datastore != config.DatastoreEtcd {
		fmt.Fprintf(os.Stderr, "routeletd leave: datastore is %q; leave is for datastore etcd\n", cfg.Datastore)
		return exitConfig
	}
	if _, err := os.Lstat(cfg.StateDir); err == nil {
		store, err := state.Open(cfg.StateDir)
		if err != nil {
			log.Error("leave refused", "err", err)
			return exitFail
		}
		good, bad := store.ListWorkloads()
		if n := len(good) + len(bad); n > 0 {
			log.Error("leave refused: pods are still on this node; remove them first", "pods", n, "stateDir", cfg.StateDir)
			fmt.Fprintf(os.Stderr, "routeletd leave: refused: %s still on this node\n", plural(n, "pod"))
			return exitFail
		}
	}
	return withEtcd(cfg, log, "leave", func(ctx context.Context, ds *etcd.Datastore) error {
		released, err := ds.Leave(ctx)
		if err == nil {
			log.Info("left the etcd datastore", "node", cfg.NodeName, "released", released)
		}
		return err
	})
}

// plural is "1 pod" or "n pods".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
