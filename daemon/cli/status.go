package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/allowmgr"
	"github.com/routelet/routelet/daemon/allowsetup"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/diagnose"
	"github.com/routelet/routelet/daemon/hostread"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/overlaymgr"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/daemon/workloads"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// statusTimeout bounds the question to the running daemon.
const statusTimeout = 10 * time.Second

// Status prints this node's routelet status: from the running daemon's
// state endpoint, or, when none answers, from the state directory and the
// kernel (saying so first). The running daemon's configuration is used
// (runningConfig); with no daemon running, the daemon's flags (state-dir,
// node-name, encapsulation, …) say what it ran with. Its own flag is
// --output text|json.
func Status(args []string) int {
	_, output, cfg, code := subcommandConfig("status", args, nil)
	if cfg == nil {
		return code
	}
	cfg = runningConfig("status", cfg, os.Stderr)
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	st, err := collectStatus(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "routeletd status: %s\n", esc(err.Error()))
		return ExitFail
	}
	if err := writeStatus(os.Stdout, st, output, time.Now()); err != nil {
		fmt.Fprintf(os.Stderr, "routeletd status: %s\n", esc(err.Error()))
		return ExitFail
	}
	return ExitOK
}

// writeStatus renders st as text (one screen) or JSON.
func writeStatus(w io.Writer, st *statusapi.State, output string, now time.Time) error {
	if output == "json" {
		return writeJSON(w, st)
	}
	_, err := io.WriteString(w, renderStatus(st, now))
	return err
}

// collectStatus asks the running daemon; when none answers it builds the
// state from the state directory and the kernel.
func collectStatus(ctx context.Context, cfg *config.Config) (*statusapi.State, error) {
	st, why := askDaemon(ctx, cfg.StateDir)
	if st != nil {
		return st, nil
	}
	if _, err := os.Lstat(cfg.StateDir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s and state directory %s does not exist (config key state-dir)", why, cfg.StateDir)
	}
	nl, err := inspect.NewNetlink()
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	onl, err := overlay.NewKernel()
	if err != nil {
		return nil, err
	}
	host, err := nodespace.ReadHost(nil, cfg.RouteProtocol, hostread.OwnLink(cfg))
	if err != nil {
		return nil, err
	}
	return OfflineStatus(cfg, why, nl, onl, host, time.Now())
}

// OfflineStatus derives the desired state from the state directory the
// way the daemon would, reads the kernel through r and compares. onl is
// what the overlay's parent and MTU are worked out from (closed here);
// host is the node's address space (workload records are checked
// against it).
func OfflineStatus(cfg *config.Config, why string, r inspect.Reader, onl overlay.Netlink, host nodespace.Host, now time.Time) (*statusapi.State, error) {
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	d := &inspect.Desired{IfacePrefix: cfg.IfacePrefix, Workloads: map[string]*state.Workload{}, Peers: []inspect.Peer{}}
	inspect.FillNode(&d.Node, cfg)
	d.Readiness = statusapi.Readiness{Reason: why}
	blocks := cfg.PodCIDRs
	if ds, err := store.ReadDaemonStatus(); err == nil {
		d.Node.Version, d.Node.PodMTU, d.Readiness.Updated = ds.DaemonVersion, ds.PodMTU, ds.Updated
		if ds.RouteProtocol != 0 {
			d.Node.RouteProtocol = ds.RouteProtocol
		}
		said := "ready"
		if !ds.Ready {
			said = "not ready: " + ds.Reason
		}
		d.Readiness.Reason = fmt.Sprintf("%s; daemon.json last said %s", why, said)
		if len(ds.Blocks) > 0 {
			blocks = nil
			for _, b := range ds.Blocks {
				if p, err := netip.ParsePrefix(b); err == nil {
					blocks = append(blocks, p)
				}
			}
		}
		if ds.LastSyncError != "" {
			d.Errors = append(d.Errors, statusapi.ObjectError{Object: "apply", Error: ds.LastSyncError, Since: ds.Updated})
		}
	} else {
		d.Readiness.Reason = fmt.Sprintf("%s; no daemon.json: %v", why, err)
	}
	for _, b := range blocks {
		d.Node.LocalBlocks = append(d.Node.LocalBlocks, b.String())
	}
	d.Blocks, _ = inspect.BlockUse(filepath.Join(cfg.StateDir, "ipam"), blocks)

	links, err := r.Links()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	prefixLinks := map[string]string{}
	for _, l := range links {
		if strings.HasPrefix(l.Name, cfg.IfacePrefix) {
			prefixLinks[l.Name] = l.Kind
		}
	}
	ws, bad, err := workloads.New(store, slog.New(slog.DiscardHandler)).All()
	if err != nil {
		d.Errors = append(d.Errors, statusapi.ObjectError{Object: "workloads", Error: err.Error(), Since: now})
	}
	if ws != nil {
		d.Workloads = ws
	}
	for key, msg := range bad {
		d.Errors = append(d.Errors, statusapi.ObjectError{Object: "workload/" + key, Error: msg})
	}
	dr := agent.DesiredRoutes(agent.RouteInput{Workloads: d.Workloads, Links: prefixLinks, LocalBlocks: blocks, NodeSpace: host,
		IfacePrefix: cfg.IfacePrefix, StaticARP: true})
	d.WorkloadRoutes, d.Refused = dr.Routes, dr.Refused

	d.Allowlist = allowmgr.PeerSet(allowsetup.Rules(cfg))
	unknown := ""
	if cfg.Datastore == config.DatastoreFile {
		self := offlinePeers(cfg, store, d, now)
		err = offlineOverlay(cfg, self, blocks, onl, d)
	} else {
		unknown = diagnose.PeersUnknown(cfg.Datastore)
		d.Datastore = statusapi.DatastoreHealth{Error: unknown}
		if c, ok := onl.(overlay.Closer); ok {
			c.Close()
		}
		err = fmt.Errorf("unknown: this node's own record (host IPs, VTEP) is in the %s datastore, which only the running daemon reads", cfg.Datastore)
	}
	if err != nil {
		d.Errors = append(d.Errors, statusapi.ObjectError{Object: "overlay", Error: err.Error(), Since: now})
	}
	k, err := inspect.Read(r, d)
	if err != nil {
		return nil, err
	}
	st := inspect.Compare(d, k, now)
	st.Source, st.PeersUnknown = statusapi.SourceOffline, unknown
	return st, nil
}

// offlinePeers reads nodes/ into d's peers and datastore health (each
// record checked on its own with peers.Parse; the daemon's cross-record
// checks need its first-seen ledger, which status does not write). It
// returns this node's own record, parsed.
func offlinePeers(cfg *config.Config, store *state.Store, d *inspect.Desired, now time.Time) peers.NodeInfo {
	var self peers.NodeInfo
	ns, bad := store.ListNodes()
	d.Datastore = statusapi.DatastoreHealth{OK: true, LastRead: now.UTC(), Records: len(ns)}
	for _, err := range bad {
		d.Datastore.Unreadable = append(d.Datastore.Unreadable, err.Error())
		if dirError(err, store.NodesDir()) {
			d.Datastore.OK, d.Datastore.Error = false, err.Error()
		}
	}
	for _, n := range ns {
		info, refused := peers.Parse(peers.FromState(n))
		var why []string
		for _, rf := range refused {
			d.Datastore.Refused = append(d.Datastore.Refused, rf.Error())
			why = append(why, rf.Field+" "+rf.Value+" refused: "+rf.Reason)
		}
		switch {
		case n.Name == cfg.NodeName:
			self = info
			d.Datastore.Records--
			if info.IPv4.HostIP.IsValid() {
				d.Node.HostIPv4 = info.IPv4.HostIP.String()
			}
			if info.IPv6.HostIP.IsValid() {
				d.Node.HostIPv6 = info.IPv6.HostIP.String()
			}
		case info.Name == "":
			// refused whole: no peer
		default:
			d.Peers = append(d.Peers, inspect.Peer{NodeInfo: info, LastChange: n.Updated, Problem: strings.Join(why, "; ")})
		}
	}
	d.Datastore.Valid = len(d.Peers)
	return self
}

// dirError reports whether err is about listing dir itself.
func dirError(err error, dir string) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && filepath.Clean(pe.Path) == filepath.Clean(dir)
}

// offlineOverlay works out the overlay as the daemon would (parents, MTU,
// devices) for this node's published host IPs and adds it to d.
func offlineOverlay(cfg *config.Config, self peers.NodeInfo, blocks []netip.Prefix, onl overlay.Netlink, d *inspect.Desired) error {
	mode, err := overlay.ParseMode(cfg.Encapsulation, cfg.CrossSubnet)
	if err != nil {
		return err
	}
	if !self.IPv4.HostIP.IsValid() && !self.IPv6.HostIP.IsValid() {
		if c, ok := onl.(overlay.Closer); ok {
			c.Close()
		}
		return fmt.Errorf("no own node record %s.json with a host IP: the daemon never published one", cfg.NodeName)
	}
	m, err := overlaymgr.New(onl, overlaymgr.Config{
		NodeName: cfg.NodeName, Mode: mode, HostIPv4: self.IPv4.HostIP, HostIPv6: self.IPv6.HostIP, LocalBlocks: blocks,
		VXLANDevice: cfg.VXLANDevice, VNI: cfg.VXLANVNI, Port: cfg.VXLANPort, MTU: cfg.MTU,
		Logger: slog.New(slog.DiscardHandler), RouteProtocol: cfg.RouteProtocol,
	}, func(int, []string) (overlaymgr.RouteTable, error) { return noTable{}, nil })
	if err != nil {
		return err
	}
	defer m.Close()
	m.Snapshot(d)
	if d.Node.PodMTU == 0 {
		d.Node.PodMTU = m.PodMTU()
	}
	return nil
}

// noTable is the route table of an overlay that is only inspected.
type noTable struct{}

// SetRoutes implements overlaymgr.RouteTable.
func (noTable) SetRoutes(string, []routes.Target) {}

// RouteUpdate implements overlaymgr.RouteTable.
func (noTable) RouteUpdate(string, routes.Target) {}

// RouteRemove implements overlaymgr.RouteTable.
func (noTable) RouteRemove(string, netip.Prefix) {}

// MarkDirty implements overlaymgr.RouteTable.
func (noTable) MarkDirty(string) {}

// Apply implements overlaymgr.RouteTable.
func (noTable) Apply() error { return nil }
