// Package etcd is the etcd datastore: the cluster's pools, block claims,
// node records and liveness keys live under one key prefix of an etcd
// cluster. A node without --pod-cidr claims a free block of each pool
// (a create-if-absent transaction keyed by the block, holding the node's
// name); --pod-cidr registers its blocks the same way. Each daemon writes
// its own node record (the file datastore's JSON) when it differs, keeps a
// liveness key on a lease, lists the prefix once and watches it from that
// revision. While etcd is unreachable the last known peers are kept, so
// the dataplane is left as it is. See docs/etcd.md.
package etcd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/internal/readlimit"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// DefaultPrefix is the key prefix when a Conn names none (routeletd's
// etcd-prefix default).
const DefaultPrefix = "/routelet"

// Conn is the etcd cluster's connection: where etcd is, how to
// authenticate and the key prefix everything is under. It has the fields
// of routeletd's etcd-* keys (daemon/config.Etcd), which convert to it.
type Conn struct {
	Endpoints []string // client URLs (http:// or https://)
	CAFile    string   // CA verifying etcd's serving certificate
	CertFile  string   // client certificate
	KeyFile   string   // client certificate's key
	Prefix    string   // every key routelet reads and writes is under it; "": DefaultPrefix
}

// tls reports whether any TLS file is set.
func (c Conn) tls() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// Options configure a Datastore.
type Options struct {
	// Etcd is where etcd is and how to authenticate (routeletd's etcd-*
	// keys).
	Etcd Conn
	// NodeName is this node's name: its claims, record and liveness key.
	NodeName string
	// PodCIDRs are --pod-cidr: registered as this node's claims. None:
	// claim a block of each pool.
	PodCIDRs []netip.Prefix
	// LeaseTTL is the liveness lease's TTL (default 30 s).
	LeaseTTL time.Duration
	// ProbePeriod is how often etcd's health and this node's liveness key
	// and record are checked (default 5 s).
	ProbePeriod time.Duration
	// RequestTimeout bounds each request (default 5 s).
	RequestTimeout time.Duration
	// InUse returns the addresses this node's pods use (the built-in
	// IPAM's claims and the workload records in the state directory): the
	// blocks holding them are served at start whatever etcd's claims say
	// (see claims.go). Nil: none.
	InUse  func() ([]netip.Addr, error)
	Logger *slog.Logger
}

// Datastore is the etcd datastore of one node.
type Datastore struct {
	cli *clientv3.Client
	o   Options
	log *slog.Logger
	m   *metrics

	kick   chan struct{} // wakes the keeper (own record lost)
	selfMu sync.Mutex    // one ensureSelf at a time: one write per change

	// lease is the liveness lease, kept across Watch calls (the daemon
	// rebuilds its loop when its blocks grow) and revoked by Close.
	leaseMu sync.Mutex
	lease   leaseState
	closed  bool // Close ran: no lease is granted again

	mu        sync.Mutex
	self      *state.Node             // this node's record as published
	selfDirty bool                    // the stored record may differ from self
	recs      map[string]peers.Record // peers by name
	sorted    []peers.Record          // recs by name, built by Peers; nil after a relist
	shared    bool                    // sorted was handed out by Peers since it last changed
	bad       map[string]error        // skipped keys: why
	live      map[string]bool         // nodes with a liveness key
	ownPeers  []string                // this node's BGP peer specs (bgppeers/<node>)
	ownPeersE error                   // why that key's value is unusable, nil when it is
	listed    bool                    // the prefix was listed once
	up        bool                    // the last request reached etcd
	reachable bool                    // as up, but false until a request reached etcd (routelet_datastore_up)
	reqErrors map[string]int          // failed requests per operation (routelet_datastore_errors_total)
	downSince time.Time
	changed   func()

	served         []netip.Prefix                           // the blocks this node serves
	blockKVs       map[string]blockKV                       // the blocks range by key
	conflicts      map[netip.Prefix]datastore.BlockConflict // served blocks claimed by another
	missing        []netip.Prefix                           // served blocks with no claim: claimed again
	notTakenLogged map[netip.Prefix]bool                    // claims naming this node of blocks another publishes, logged
}

var (
	_ datastore.Datastore    = (*Datastore)(nil)
	_ datastore.NodeBGPPeers = (*Datastore)(nil)
)

// New connects (lazily: an unreachable etcd is not an error here) to the
// etcd cluster named by opts.Etcd.
func New(opts Options) (*Datastore, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 30 * time.Second
	}
	if opts.ProbePeriod == 0 {
		opts.ProbePeriod = 5 * time.Second
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.Etcd.Prefix == "" {
		opts.Etcd.Prefix = DefaultPrefix
	}
	if err := state.ValidateNodeName(opts.NodeName); err != nil {
		return nil, fmt.Errorf("etcd datastore: %w", err)
	}
	tlsCfg, err := clientTLS(opts.Etcd)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            opts.Etcd.Endpoints,
		DialTimeout:          opts.RequestTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: opts.RequestTimeout,
		TLS:                  tlsCfg,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", opts.Etcd.Endpoints, err)
	}
	return &Datastore{cli: cli, o: opts, log: opts.Logger, m: newMetrics(), kick: make(chan struct{}, 1),
		recs: map[string]peers.Record{}, bad: map[string]error{}, live: map[string]bool{}, up: true,
		blockKVs: map[string]blockKV{}, conflicts: map[netip.Prefix]datastore.BlockConflict{}, notTakenLogged: map[netip.Prefix]bool{}}, nil
}

// maxTLSFile bounds each TLS file: a CA bundle of a few hundred
// certificates is well below.
const maxTLSFile = 1 << 20

// clientTLS is the client's TLS configuration: nil without TLS files and
// https endpoints.
func clientTLS(e Conn) (*tls.Config, error) {
	https := slices.ContainsFunc(e.Endpoints, func(u string) bool { return strings.HasPrefix(u, "https://") })
	if !e.tls() && !https {
		return nil, nil
	}
	// The TLS package reads each file whole: bound them first.
	for _, f := range []struct{ key, path string }{{"etcd-ca-file", e.CAFile}, {"etcd-cert-file", e.CertFile}, {"etcd-key-file", e.KeyFile}} {
		if f.path == "" {
			continue
		}
		if err := readlimit.CheckFile(f.path, maxTLSFile); err != nil {
			return nil, fmt.Errorf("%s %s: %w", f.key, f.path, err)
		}
	}
	info := transport.TLSInfo{TrustedCAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile}
	if e.CertFile == "" && e.CAFile == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	if e.CertFile == "" {
		c, err := transport.TLSInfo{TrustedCAFile: e.CAFile}.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd-ca-file %s: %w", e.CAFile, err)
		}
		return c, nil
	}
	c, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS files (ca %q, cert %q, key %q): %w", e.CAFile, e.CertFile, e.KeyFile, err)
	}
	return c, nil
}

// Close revokes the liveness lease (its key goes at once, not at the
// TTL) and closes the client.
func (d *Datastore) Close() error {
	d.leaseMu.Lock()
	if d.lease.id != 0 {
		ctx, cancel := d.req(context.Background())
		_, _ = d.cli.Revoke(ctx, d.lease.id)
		cancel()
		d.lease = leaseState{}
	}
	d.closed = true
	d.leaseMu.Unlock()
	return d.cli.Close()
}

// Client is the underlying etcd client.
func (d *Datastore) Client() *clientv3.Client { return d.cli }

// Key layout under the prefix.
func (d *Datastore) configKey() string      { return d.o.Etcd.Prefix + "/config" }
func (d *Datastore) blocksPrefix() string   { return d.o.Etcd.Prefix + "/blocks/" }
func (d *Datastore) nodesPrefix() string    { return d.o.Etcd.Prefix + "/nodes/" }
func (d *Datastore) livenessPrefix() string { return d.o.Etcd.Prefix + "/liveness/" }
func (d *Datastore) bgpPeersPrefix() string { return d.o.Etcd.Prefix + "/bgppeers/" }
func (d *Datastore) nodeKey(n string) string {
	return d.nodesPrefix() + n
}

// req returns a context bounded by the request timeout.
func (d *Datastore) req(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.o.RequestTimeout)
}

// LocalBlocks returns --pod-cidr once registered, or the blocks this node
// holds, claiming one of each pool it holds none of. While etcd cannot be
// reached, no pool is configured or a pool is full, it waits (with that
// reason) and retries with backoff. A --pod-cidr another node holds is an
// error naming the holder.
func (d *Datastore) LocalBlocks(ctx context.Context, waiting func(string)) ([]netip.Prefix, error) {
	b := newBackoff()
	for {
		blocks, reason, err := d.localBlocks(ctx)
		if errors.Is(err, ErrBlockHeld) {
			return nil, err
		}
		if err == nil && reason == "" {
			d.serve(blocks...)
			return blocks, nil
		}
		if err != nil {
			d.failed("blocks", err)
			reason = fmt.Sprintf("etcd %v: %v", d.o.Etcd.Endpoints, err)
		}
		waiting(reason)
		if err := b.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// localBlocks is one LocalBlocks attempt.
func (d *Datastore) localBlocks(ctx context.Context) ([]netip.Prefix, string, error) {
	ctx, cancel := d.req(ctx)
	defer cancel()
	used, err := d.inUse()
	if err != nil {
		return nil, fmt.Sprintf("cannot read the addresses this node's pods use: %v", err), nil
	}
	if len(d.o.PodCIDRs) > 0 {
		if err := d.register(ctx, d.o.PodCIDRs, used); err != nil {
			return nil, "", err
		}
		d.reached()
		return slices.Clone(d.o.PodCIDRs), "", nil
	}
	pools, rev, err := d.readPools(ctx)
	if err != nil {
		return nil, "", err
	}
	d.reached()
	if len(pools) == 0 {
		return nil, fmt.Sprintf("no pool configured in etcd (key %s): run `routeletd etcd init --pool CIDR`", d.configKey()), nil
	}
	blocks, reason, err := d.claimBlocks(ctx, pools, rev, used)
	if errors.Is(err, errPoolsChanged) {
		return nil, "the pool configuration changed while claiming; retrying", nil
	}
	return blocks, reason, err
}

// Publish writes this node's record when it differs from what etcd holds
// and keeps it so: a record deleted or altered later is written again.
func (d *Datastore) Publish(self peers.Record) error {
	n := peers.ToState(self)
	if _, err := state.EncodeNode(&n); err != nil {
		return err
	}
	d.mu.Lock()
	d.self, d.selfDirty = &n, true
	d.mu.Unlock()
	ctx, cancel := d.req(context.Background())
	defer cancel()
	return d.ensureSelf(ctx)
}

// ensureSelf writes this node's record if it is missing or differs.
func (d *Datastore) ensureSelf(ctx context.Context) error {
	d.selfMu.Lock()
	defer d.selfMu.Unlock()
	d.mu.Lock()
	self, dirty := d.self, d.selfDirty
	d.mu.Unlock()
	if self == nil || !dirty {
		return nil
	}
	key := d.nodeKey(self.Name)
	resp, err := d.cli.Get(ctx, key)
	if err != nil {
		d.failed("publish", err)
		return fmt.Errorf("read own record %s: %w", key, err)
	}
	if len(resp.Kvs) > 0 {
		if cur, err := state.DecodeNode(resp.Kvs[0].Value); err == nil && state.SameNode(cur, self) {
			d.clean(self)
			return nil
		}
	}
	n := *self
	n.Updated = time.Now().UTC()
	data, err := state.EncodeNode(&n)
	if err != nil {
		return err
	}
	if _, err := d.cli.Put(ctx, key, string(data)); err != nil {
		d.failed("publish", err)
		return fmt.Errorf("write own record %s: %w", key, err)
	}
	d.clean(self)
	d.log.Info("wrote own node record", "key", key, "bytes", len(data), "hostIPv4", n.HostIPv4, "hostIPv6", n.HostIPv6, "blocks", n.Blocks)
	return nil
}

// clean marks the stored record current, unless self was replaced meanwhile.
func (d *Datastore) clean(self *state.Node) {
	d.mu.Lock()
	if d.self == self {
		d.selfDirty = false
	}
	d.mu.Unlock()
}

// Watch lists the prefix (waiting up to one request timeout for it, so
// the first sync has the peers), then keeps the peers current from a
// watch at the list's revision, re-listing after a compaction or an error,
// and keeps this node's liveness key and record, until ctx is done.
func (d *Datastore) Watch(ctx context.Context, changed func()) error {
	d.mu.Lock()
	d.changed = changed
	d.mu.Unlock()
	rev, err := d.relist(ctx, "start")
	if err != nil {
		d.failed("list", err)
	}
	go d.watchLoop(ctx, rev)
	go d.keepLoop(ctx)
	return nil
}

// watchLoop watches the prefix from rev (0: list first) until ctx is done.
func (d *Datastore) watchLoop(ctx context.Context, rev int64) {
	b := newBackoff()
	for ctx.Err() == nil {
		if rev == 0 {
			if b.wait(ctx) != nil {
				return
			}
			var err error
			if rev, err = d.relist(ctx, "error"); err != nil {
				d.failed("list", err)
				continue
			}
		}
		b.reset()
		rev = d.watchFrom(ctx, rev)
	}
}

// watchFrom applies the watch's events from rev until it must re-list
// (returns 0) or ctx is done.
func (d *Datastore) watchFrom(ctx context.Context, rev int64) int64 {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range d.cli.Watch(wctx, d.o.Etcd.Prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if resp.CompactRevision != 0 {
			d.log.Warn("etcd compacted the watched revisions; re-listing", "from", rev+1, "compacted", resp.CompactRevision)
			if r, err := d.relist(ctx, "compacted"); err == nil {
				return r
			} else {
				d.failed("list", err)
			}
			return 0
		}
		if err := resp.Err(); err != nil {
			d.failed("watch", err)
			return 0
		}
		if len(resp.Events) == 0 {
			continue
		}
		d.mu.Lock()
		claims := false
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			claims = claims || strings.HasPrefix(key, d.blocksPrefix())
			d.apply(key, ev.Kv.Value, ev.Kv.CreateRevision, ev.Type == clientv3.EventTypeDelete, true)
		}
		if claims {
			d.checkClaims()
		}
		d.publishCounts()
		changed := d.changed
		d.mu.Unlock()
		rev = resp.Header.Revision
		d.reached()
		if changed != nil {
			changed()
		}
	}
	return rev
}

// relist reads the whole prefix into memory and returns its revision; on
// an error the last known peers stay.
func (d *Datastore) relist(ctx context.Context, why string) (int64, error) {
	ctx, cancel := d.req(ctx)
	defer cancel()
	resp, err := d.cli.Get(ctx, d.o.Etcd.Prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	oldBad := d.bad
	d.recs, d.bad, d.live, d.blockKVs = map[string]peers.Record{}, map[string]error{}, map[string]bool{}, map[string]blockKV{}
	d.sorted = nil
	d.ownPeers, d.ownPeersE = nil, nil
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		_, known := oldBad[key]
		d.apply(key, kv.Value, kv.CreateRevision, false, !known)
	}
	d.listed = true
	d.checkClaims()
	d.publishCounts()
	changed := d.changed
	d.mu.Unlock()
	if why != "start" {
		d.m.relists.WithLabelValues(why).Inc()
	}
	d.log.Debug("listed etcd prefix", "prefix", d.o.Etcd.Prefix, "keys", len(resp.Kvs), "revision", resp.Header.Revision)
	d.reached()
	if changed != nil {
		changed()
	}
	return resp.Header.Revision, nil
}

// apply records one key's value (or deletion); created is the key's
// create revision. logBad: log a key that is skipped. d.mu is held.
func (d *Datastore) apply(key string, value []byte, created int64, deleted, logBad bool) {
	rest := strings.TrimPrefix(key, d.o.Etcd.Prefix+"/")
	delete(d.bad, key)
	skip := func(err error) {
		d.bad[key] = fmt.Errorf("etcd key %s: %w", key, err)
		if logBad {
			d.log.Warn("skipping bad key in etcd", "key", key, "bytes", len(value), "err", err)
		}
	}
	switch {
	case rest == "config":
		// Read by LocalBlocks, Grow and Init.
	case strings.HasPrefix(key, d.blocksPrefix()):
		// Claimed by LocalBlocks and Grow, released by Leave; the served
		// blocks' claims are checked after each batch (checkClaims).
		d.applyBlock(key, value, created, deleted)
	case strings.HasPrefix(key, d.livenessPrefix()):
		name := strings.TrimPrefix(key, d.livenessPrefix())
		if deleted {
			if d.live[name] && name != d.o.NodeName {
				d.log.Info("peer's liveness key is gone; its routes stay", "node", name)
			}
			delete(d.live, name)
		} else {
			d.live[name] = true
		}
	case strings.HasPrefix(key, d.bgpPeersPrefix()):
		// Written by an operator, read by the node it names.
		name := strings.TrimPrefix(key, d.bgpPeersPrefix())
		if err := state.ValidateNodeName(name); err != nil {
			skip(err)
			return
		}
		if name != d.o.NodeName {
			return
		}
		d.ownPeers, d.ownPeersE = nil, nil
		if deleted {
			return
		}
		specs, err := decodeBGPPeers(value)
		if err != nil {
			skip(err)
			d.ownPeersE = d.bad[key]
			return
		}
		d.ownPeers = specs
	case strings.HasPrefix(key, d.nodesPrefix()):
		name := strings.TrimPrefix(key, d.nodesPrefix())
		if name == d.o.NodeName {
			d.selfChanged(value, deleted)
			return
		}
		if err := state.ValidateNodeName(name); err != nil {
			skip(err)
			return
		}
		defer d.resort(name)
		delete(d.recs, name)
		if deleted {
			return
		}
		n, err := state.DecodeNode(value)
		if err != nil {
			skip(err)
			return
		}
		if n.Name != name {
			skip(fmt.Errorf("record of node %q under another node's key", n.Name))
			return
		}
		d.recs[name] = peers.FromState(n)
	default:
		if !deleted {
			skip(errors.New("not a key routelet writes"))
		}
	}
}

// decodeBGPPeers parses a bgppeers/<node> value: a JSON array of peer
// specs (strings; peers.ParseBGPPeer checks each, in the daemon).
func decodeBGPPeers(value []byte) ([]string, error) {
	var specs []string
	if err := json.Unmarshal(value, &specs); err != nil {
		return nil, fmt.Errorf(`not a JSON array of BGP peer specs (["192.0.2.254,as=65000", …]): %w`, err)
	}
	return specs, nil
}

// OwnBGPPeers implements datastore.NodeBGPPeers: the specs under
// <prefix>/bgppeers/<this node>, as last listed and watched (none when the
// key is absent). A value that is not a JSON array of strings is an error
// naming the key, and so is asking before the prefix was listed.
func (d *Datastore) OwnBGPPeers() ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.listed {
		return nil, fmt.Errorf("etcd %v: the prefix %s has not been listed yet", d.o.Etcd.Endpoints, d.o.Etcd.Prefix)
	}
	if d.ownPeersE != nil {
		return nil, d.ownPeersE
	}
	return slices.Clone(d.ownPeers), nil
}

// selfChanged notes an event on this node's own record: a deletion or a
// value other than the one published makes the keeper write it again.
// d.mu is held.
func (d *Datastore) selfChanged(value []byte, deleted bool) {
	if d.self == nil {
		return
	}
	if !deleted {
		if cur, err := state.DecodeNode(value); err == nil && state.SameNode(cur, d.self) {
			return
		}
	}
	d.selfDirty = true
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// publishCounts updates the gauges from memory. d.mu is held.
func (d *Datastore) publishCounts() {
	d.m.skipped.Set(float64(len(d.bad)))
	n := 0
	for name := range d.recs {
		if d.live[name] {
			n++
		}
	}
	d.m.live.Set(float64(n))
}

// resort brings d.sorted up to date with name's record (in d.recs, or
// gone): in a copy when the last Peers answer may still be being read,
// else in place, so a burst of changes between two Peers calls copies the
// list once. d.mu is held.
func (d *Datastore) resort(name string) {
	if d.sorted == nil {
		return
	}
	i, found := slices.BinarySearchFunc(d.sorted, name, func(r peers.Record, name string) int { return strings.Compare(r.Name, name) })
	r, ok := d.recs[name]
	if !ok && !found {
		return
	}
	if d.shared {
		d.sorted, d.shared = slices.Clone(d.sorted), false
	}
	switch {
	case ok && found:
		d.sorted[i] = r
	case ok:
		d.sorted = slices.Insert(d.sorted, i, r)
	default:
		d.sorted = slices.Delete(d.sorted, i, i+1)
	}
}

// Peers returns the peers' records as last listed and watched, and the
// keys that were skipped. Before the first list succeeded it is an error.
// The records are kept sorted as they change, not sorted at every call;
// the slice is shared between calls until the next change and must not be
// modified.
func (d *Datastore) Peers() ([]peers.Record, []error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.listed {
		return nil, nil, fmt.Errorf("etcd %v: the prefix %s has not been listed yet", d.o.Etcd.Endpoints, d.o.Etcd.Prefix)
	}
	if d.sorted == nil {
		d.sorted = make([]peers.Record, 0, len(d.recs))
		for _, r := range d.recs {
			d.sorted = append(d.sorted, r)
		}
		slices.SortFunc(d.sorted, func(a, b peers.Record) int { return strings.Compare(a.Name, b.Name) })
	}
	var bad []error
	if len(d.bad) > 0 {
		keys := make([]string, 0, len(d.bad))
		for k := range d.bad {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			bad = append(bad, d.bad[k])
		}
	}
	d.shared = true
	return d.sorted, bad, nil
}

// Live returns the nodes whose liveness key exists, sorted. Liveness is
// reported only; it never removes a peer.
func (d *Datastore) Live() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n := range d.live {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Health implements datastore.Datastore: whether the last request
// reached etcd, the failed requests per operation, the live nodes and
// the block conflicts.
func (d *Datastore) Health() datastore.Health {
	d.mu.Lock()
	reachable := d.reachable
	var errs map[string]int
	if d.reqErrors != nil {
		errs = maps.Clone(d.reqErrors)
	}
	d.mu.Unlock()
	return datastore.Health{Reachable: &reachable, RequestErrors: errs, Liveness: true, Live: d.Live(), BlockConflicts: d.BlockConflicts()}
}

// keepLoop keeps this node's liveness key on a lease and its record
// written, probing etcd every ProbePeriod (at once when the record was
// lost), until ctx is done. The lease outlives it: a later Watch's
// keepLoop goes on with it, and Close revokes it.
func (d *Datastore) keepLoop(ctx context.Context) {
	t := time.NewTicker(d.o.ProbePeriod)
	defer t.Stop()
	for {
		rctx, cancel := d.req(ctx)
		d.leaseMu.Lock()
		if d.closed {
			d.leaseMu.Unlock()
			cancel()
			return
		}
		var err error
		d.lease, err = d.keepLiveness(rctx, d.lease)
		d.leaseMu.Unlock()
		if err == nil {
			err = d.ensureSelf(rctx)
		}
		if err == nil {
			err = d.ensureClaims(rctx)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			d.failed("keepalive", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.kick:
		}
	}
}

// leaseState is the liveness lease being kept alive.
type leaseState struct {
	id   clientv3.LeaseID
	lost chan struct{} // closed when the client stopped renewing it
}

// alive reports whether the client still renews the lease.
func (l leaseState) alive() bool {
	if l.id == 0 {
		return false
	}
	select {
	case <-l.lost:
		return false
	default:
		return true
	}
}

// keepLiveness checks this node's liveness key and returns the lease it is
// on, granting a new lease and writing the key when the key is missing or
// the client gave up renewing the lease (it does after an outage longer
// than the TTL, even when etcd extended the lease on its restart).
func (d *Datastore) keepLiveness(ctx context.Context, lease leaseState) (leaseState, error) {
	key := d.livenessPrefix() + d.o.NodeName
	resp, err := d.cli.Get(ctx, key)
	if err != nil {
		return lease, err
	}
	d.reached()
	if lease.alive() && len(resp.Kvs) > 0 && clientv3.LeaseID(resp.Kvs[0].Lease) == lease.id {
		return lease, nil
	}
	g, err := d.cli.Grant(ctx, int64(d.o.LeaseTTL/time.Second))
	if err != nil {
		return lease, fmt.Errorf("grant liveness lease: %w", err)
	}
	if _, err := d.cli.Put(ctx, key, time.Now().UTC().Format(time.RFC3339), clientv3.WithLease(g.ID)); err != nil {
		return lease, fmt.Errorf("write liveness key %s: %w", key, err)
	}
	// KeepAlive renews the lease on its own until the daemon stops or it
	// gives up; its answers are not needed.
	ch, err := d.cli.KeepAlive(context.WithoutCancel(ctx), g.ID)
	if err != nil {
		lost := make(chan struct{})
		close(lost) // renewed by nobody: granted again at the next probe
		return leaseState{id: g.ID, lost: lost}, fmt.Errorf("keep liveness lease alive: %w", err)
	}
	next := leaseState{id: g.ID, lost: make(chan struct{})}
	go func() {
		for range ch {
		}
		close(next.lost)
	}()
	if lease.id != 0 {
		_, _ = d.cli.Revoke(ctx, lease.id)
	}
	d.log.Info("liveness key written", "key", key, "ttl", d.o.LeaseTTL)
	return next, nil
}

// reached records a request that reached etcd.
func (d *Datastore) reached() {
	d.mu.Lock()
	was, since := d.up, d.downSince
	d.up, d.reachable = true, true
	d.mu.Unlock()
	d.m.up.Set(1)
	if !was {
		d.log.Info("etcd reachable again; applying what changed meanwhile", "endpoints", d.o.Etcd.Endpoints, "down", time.Since(since).Round(time.Second))
	}
}

// failed records a request that failed: counted per operation, and the
// first failure of an outage is logged.
func (d *Datastore) failed(op string, err error) {
	d.m.errors.WithLabelValues(op).Inc()
	d.mu.Lock()
	if d.reqErrors == nil {
		d.reqErrors = map[string]int{}
	}
	d.reqErrors[op]++
	d.reachable = false
	was := d.up
	if was {
		d.up, d.downSince = false, time.Now()
	}
	d.mu.Unlock()
	d.m.up.Set(0)
	if was {
		d.log.Warn("etcd unreachable: keeping the last known peers and the dataplane, retrying", "endpoints", d.o.Etcd.Endpoints, "op", op, "err", err)
	} else {
		d.log.Debug("etcd request failed", "op", op, "err", err)
	}
}

// Describe and Collect make the datastore a prometheus.Collector of its
// metrics, which the daemon registers on /metrics.
func (d *Datastore) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range d.m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (d *Datastore) Collect(ch chan<- prometheus.Metric) {
	for _, c := range d.m.collectors() {
		c.Collect(ch)
	}
}

// metrics are the etcd datastore's metrics.
type metrics struct {
	up         prometheus.Gauge
	errors     *prometheus.CounterVec
	relists    *prometheus.CounterVec
	skipped    prometheus.Gauge
	live       prometheus.Gauge
	claimRaces prometheus.Counter
	claims     *prometheus.CounterVec
	conflicts  *prometheus.GaugeVec
}

// newMetrics creates the metrics (collected through the Datastore).
func newMetrics() *metrics {
	m := &metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "routelet_datastore_up",
			Help: "1 while the last datastore request reached etcd; 0 during an outage (peers and the dataplane are kept)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "routelet_datastore_errors_total",
			Help: "Datastore requests that failed, per operation."}, []string{"op"}),
		relists: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "routelet_datastore_relists_total",
			Help: "Full re-reads of the etcd prefix after the start, per reason (compacted, error)."}, []string{"reason"}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{Name: "routelet_datastore_skipped_keys",
			Help: "Keys under the etcd prefix skipped as foreign or unreadable."}),
		live: prometheus.NewGauge(prometheus.GaugeOpts{Name: "routelet_datastore_peers_live",
			Help: "Peers whose liveness key exists (liveness never removes routes)."}),
		claimRaces: prometheus.NewCounter(prometheus.CounterOpts{Name: "routelet_datastore_claim_races_total",
			Help: "Block claims lost to another node (the next free block is tried)."}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "routelet_datastore_block_claims_total",
			Help: "Blocks this node claimed from a pool, per reason: first (it held none of the pool), full (every block it held of the family was full), reclaimed (the claim of a block it serves was gone from etcd)."}, []string{"reason"}),
		conflicts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "routelet_datastore_block_claim_conflicts",
			Help: "Per block this node serves: 1 while its claim in etcd names another holder (or another claim overlaps it); the node keeps the block and its pods' routes."}, []string{"block"}),
	}
	for _, r := range []string{"first", "full", "reclaimed"} {
		m.claims.WithLabelValues(r)
	}
	return m
}

// collectors returns every metric.
func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.up, m.errors, m.relists, m.skipped, m.live, m.claimRaces, m.claims, m.conflicts}
}

// backoff doubles a wait from 250 ms up to 10 s.
type backoff struct{ next time.Duration }

// newBackoff starts at the shortest wait.
func newBackoff() *backoff { return &backoff{next: 250 * time.Millisecond} }

// reset goes back to the shortest wait.
func (b *backoff) reset() { b.next = 250 * time.Millisecond }

// wait sleeps the current wait (or until ctx is done) and doubles it.
func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, 10*time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
