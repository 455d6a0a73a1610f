package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore/etcd"
	"github.com/routelet/routelet/pkg/state"
)

// NewEtcd checks the etcd keys and connects: the daemon's datastore (mod
// adds what only the daemon sets) and the etcd subcommands' client.
func NewEtcd(cfg *config.Config, log *slog.Logger, mod ...func(*etcd.Options)) (*etcd.Datastore, error) {
	if err := cfg.CheckEtcd(); err != nil {
		return nil, err
	}
	o := etcd.Options{Etcd: etcd.Conn(cfg.Etcd), NodeName: cfg.NodeName, PodCIDRs: cfg.PodCIDRs, Logger: log}
	for _, m := range mod {
		m(&o)
	}
	return etcd.New(o)
}

// etcdCommandTimeout bounds the etcd subcommands' requests.
const etcdCommandTimeout = 30 * time.Second

// Etcd is `routeletd etcd init --pool CIDR [--pool CIDR6] [--block-size
// N] [--block-size-v6 N] [flags]`: it writes the pools nodes without
// --pod-cidr claim their blocks from. The other flags are the daemon's
// (etcd-endpoints, etcd-*-file, etcd-prefix).
func Etcd(args []string) int {
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintln(os.Stderr, "usage: routeletd etcd init --pool CIDR [--pool CIDR6] [--block-size 26] [--block-size-v6 122] [--etcd-endpoints URL ...]")
		return ExitConfig
	}
	pools, rest, err := parsePools(args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd etcd init: %s\n", esc(err.Error()))
		return ExitConfig
	}
	cfg, log, code := LoadConfig(rest)
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
	ds, err := NewEtcd(cfg, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd %s: %s\n", what, esc(err.Error()))
		return ExitConfig
	}
	defer ds.Close()
	ctx, cancel := context.WithTimeout(context.Background(), etcdCommandTimeout)
	defer cancel()
	if err := run(ctx, ds); err != nil {
		log.Error(what+" failed", "err", err)
		fmt.Fprintf(os.Stderr, "routeletd %s: %s\n", what, esc(err.Error()))
		return ExitFail
	}
	return ExitOK
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

// Leave is `routeletd leave [flags]`: with the daemon stopped and no
// pod left on this node, it removes the node's record, liveness key and
// block claims from etcd; the peers then remove their routes to it.
func Leave(args []string) int {
	cfg, log, release, code := loadStopped(args, "leave")
	if cfg == nil {
		return code
	}
	defer release()
	if cfg.Datastore != config.DatastoreEtcd {
		fmt.Fprintf(os.Stderr, "routeletd leave: datastore is %q; leave is for datastore etcd\n", cfg.Datastore)
		return ExitConfig
	}
	if _, err := os.Lstat(cfg.StateDir); err == nil {
		store, err := state.Open(cfg.StateDir)
		if err != nil {
			log.Error("leave refused", "err", err)
			return ExitFail
		}
		good, bad := store.ListWorkloads()
		if n := len(good) + len(bad); n > 0 {
			log.Error("leave refused: pods are still on this node; remove them first", "pods", n, "stateDir", cfg.StateDir)
			fmt.Fprintf(os.Stderr, "routeletd leave: refused: %s still on this node\n", plural(n, "pod"))
			return ExitFail
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
