// Package datastore is routeletd's seam to the cluster's datastore: the
// one interface through which the daemon learns its own pod blocks,
// publishes its own node information and hears of its peers. Each
// datastore is a package implementing Datastore: file (the state
// directory's nodes/ plus --pod-cidr), etcd (keys under one prefix of an
// etcd cluster) and kubernetes (the cluster's Node objects); the daemon's
// loop and managers see only this interface. See docs/daemon.md.
package datastore

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/pkg/peers"
)

// Datastore is what routeletd needs of a cluster datastore.
type Datastore interface {
	// LocalBlocks returns this node's pod blocks (none is an answer: the
	// plugin's conflist then names them) once the datastore knows them.
	// Until then it blocks, calling waiting with why (the daemon is not
	// ready meanwhile and says so); it returns ctx's error when ctx ends.
	LocalBlocks(ctx context.Context, waiting func(reason string)) ([]netip.Prefix, error)
	// Publish makes this node's own information known to the peers. The
	// daemon builds it once (identity, blocks, the overlay's VTEP facts)
	// and calls Publish before Watch; the datastore keeps it published
	// (re-writes it when it is lost) and never hands it back as a peer.
	Publish(self peers.Record) error
	// Watch calls changed whenever the peers may have changed (a hint,
	// from any goroutine; lost events count as a change) until ctx is done.
	Watch(ctx context.Context, changed func()) error
	// Peers returns every peer's record as delivered (this node's left
	// out), and the records that could not be read, each an error naming
	// it. An error means the peers cannot be listed at all: the daemon
	// keeps the last known peers. The slice is the caller's to read until
	// the next call, which may reuse it; the caller never modifies it.
	Peers() ([]peers.Record, []error, error)
	// Health tells what the datastore knows of its own health (read at
	// any time, from any goroutine): whether its last request reached it,
	// its failed requests, the liveness it keeps, conflicting block
	// claims. A datastore that tells nothing returns the zero Health.
	Health() Health
}

// Health is a datastore's report on itself, beside the metrics it
// exports (which count the same events): the state endpoint shows it.
type Health struct {
	// Reachable says whether the last request reached the datastore
	// (etcd); nil when the datastore does not tell.
	Reachable *bool
	// RequestErrors counts the failed requests since the daemon started,
	// per operation (etcd: "list", "watch", …; kubernetes:
	// "list-watch", "patch", …); nil when the datastore does not count
	// them.
	RequestErrors map[string]int
	// Liveness is true when the datastore keeps liveness (etcd's
	// liveness keys); Live then names the live nodes, sorted. Liveness
	// is reported only; it never removes a peer.
	Liveness bool
	Live     []string
	// BlockConflicts are this node's blocks whose claim names another
	// holder (see ClaimReporter), sorted by block.
	BlockConflicts []BlockConflict
}

// Validator is the one check every peer record passes (*peers.Validator).
type Validator interface {
	Validate(records []peers.Record) []peers.NodeInfo
	// HostChanged makes the next Validate re-read the node's own
	// addresses (an event about them may have been lost).
	HostChanged()
	// Flush writes what the validator keeps across restarts (the peer
	// claim ledger) when the last Validate changed it.
	Flush()
}

var _ Validator = (*peers.Validator)(nil)

// Peers is the daemon's side of the seam: a Datastore's peers, validated
// where they enter the daemon, before any manager sees them.
type Peers struct {
	DS Datastore
	V  Validator
}

// Publish passes through to the datastore.
func (p Peers) Publish(self peers.Record) error { return p.DS.Publish(self) }

// Rescan asks the datastore to re-read every peer at the next Peers, when
// it can (the file datastore: all of nodes/); a datastore kept current by a
// watch has nothing to do. The validator (*peers.Validator) re-reads the
// node's own addresses then too, in case an event about them was lost.
func (p Peers) Rescan() {
	if r, ok := p.DS.(Rescanner); ok {
		r.Rescan()
	}
	p.V.HostChanged()
}

// Flush writes what the validator keeps across restarts (the peer claim
// ledger of *peers.Validator) when the last Peers changed it. The loop
// calls it after a pass's Apply, before the next pass.
func (p Peers) Flush() { p.V.Flush() }

// Health passes through to the datastore.
func (p Peers) Health() Health { return p.DS.Health() }

// Watch passes through to the datastore.
func (p Peers) Watch(ctx context.Context, changed func()) error { return p.DS.Watch(ctx, changed) }

// Peers returns the validated peers, how many records were seen (before
// validation), the unreadable records, and an error when the datastore
// cannot list its peers (then nothing else is meaningful).
func (p Peers) Peers() ([]peers.NodeInfo, int, []error, error) {
	recs, bad, err := p.DS.Peers()
	if err != nil {
		return nil, 0, bad, err
	}
	return p.V.Validate(recs), len(recs), bad, nil
}

// A Datastore's optional capabilities, each a named interface the daemon
// asks for by type: Rescanner (re-read at a full sync), ReadyReporter
// (told of readiness), Grower (claims more blocks), ClaimReporter (block
// conflicts, also in Health), NodeBGPPeers (this node's own BGP peers),
// Collector (its own metrics, registered on /metrics) and Closer
// (released when the daemon stops).

// Rescanner is optional for a Datastore that reads its peers from a
// source without a complete watch (the file datastore: nodes/): Rescan
// makes the next Peers re-read every record.
type Rescanner interface {
	Rescan()
}

// Collector is optional for a Datastore with metrics of its own; the
// daemon registers it on /metrics.
type Collector = prometheus.Collector

// Closer is optional for a Datastore holding connections or goroutines
// (etcd, kubernetes); the daemon closes it when it stops.
type Closer = io.Closer

// ReadyReporter is optional for a Datastore: one that implements it is
// told when the daemon's readiness changes (ready: the dataplane is up and
// in sync; else reason says why not), so it can tell the cluster (the
// Kubernetes datastore sets the Node's NetworkUnavailable condition). It
// is called from the daemon's loop and must not block.
type ReadyReporter interface {
	SetReady(ready bool, reason string)
}

// Grower is optional for a Datastore that hands out blocks from a pool:
// when every block of family (4 or 6) this node holds is full (full lists
// them), Grow claims one more free block of that family for this node, in
// the same race-safe way as the first, so that LocalBlocks returns it from
// then on (also after a restart), and returns it. A block of the family
// the node holds beyond full (claimed before a crash) is returned as is.
// The daemon then rebuilds its loop with the block added. When the
// node's blocks cannot grow (fixed by configuration) the error wraps
// ErrFixedBlocks; when the pool has no free block, ErrPoolFull.
type Grower interface {
	Grow(ctx context.Context, family int, full []netip.Prefix) (netip.Prefix, error)
}

// ErrFixedBlocks: the node's blocks are configured, not claimed from a pool.
var ErrFixedBlocks = errors.New("this node's blocks are fixed by configuration")

// ErrPoolFull: the pool has no free block.
var ErrPoolFull = errors.New("the pool has no free block")

// NodeBGPPeers is a Datastore keeping operator-set BGP peers for this
// node (its ToR routers). Specs are ParseBGPPeer strings.
//
// OwnBGPPeers returns them as stored (none is an answer), each for the
// daemon to parse with peers.ParseBGPPeer(spec, true): a datastore's
// spec never names a password file. A change of them calls Watch's
// changed. An error (the value cannot be read as specs, the datastore
// was not read yet) leaves the daemon with the peers it had. The
// Kubernetes datastore reads this node's Node annotation
// routelet.io/bgp-peers (';'-separated), the etcd datastore the key
// <prefix>/bgppeers/<node> (a JSON array); neither ever writes them. A
// Datastore without it (file) gives the daemon only the configuration's
// bgp-peer sessions.
type NodeBGPPeers interface {
	OwnBGPPeers() ([]string, error)
}

// ClaimReporter is optional for a Datastore in which another writer can
// change this node's block claims (etcd): BlockConflicts returns, sorted
// by block, the blocks this node serves whose claim in the datastore
// names someone else (or that another claim overlaps). The node keeps
// serving them (their pods, routes and blackhole stay); the conflict is
// reported until the claim is this node's again.
type ClaimReporter interface {
	BlockConflicts() []BlockConflict
}

// BlockConflict is one block this node serves whose claim in the
// datastore is not this node's.
type BlockConflict struct {
	Block netip.Prefix
	// Key is where the datastore holds the conflicting claim, Holder the
	// value found there (a node name, or whatever another writer put).
	Key    string
	Holder string
	// Since is when the node first saw the conflict.
	Since time.Time
}
