// Package blockgrow grows this node's blocks: it watches how full the
// built-in IPAM's blocks are and, when every block of a family is full,
// claims another from a datastore that hands blocks out from a pool
// (datastore.Grower). The apply loop is then built again with the block
// added (Grew).
package blockgrow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/internal/dirwatch"
	"github.com/routelet/routelet/pkg/ipam"
)

// Grew is the error the apply loop stops with when this node claimed
// Block; the loop is built again with the block added.
type Grew struct{ Block netip.Prefix }

// Error names the block.
func (g *Grew) Error() string { return "this node claimed block " + g.Block.String() }

// WithBlock returns blocks with b after the last block of its family,
// IPv4 before IPv6: the order the datastore returns them in after a
// restart.
func WithBlock(blocks []netip.Prefix, b netip.Prefix) []netip.Prefix {
	i := len(blocks)
	if b.Addr().Is4() {
		i = 0
		for i < len(blocks) && blocks[i].Addr().Is4() {
			i++
		}
	}
	out := make([]netip.Prefix, 0, len(blocks)+1)
	out = append(append(out, blocks[:i]...), b)
	return append(out, blocks[i:]...)
}

// Grower watches how full this node's blocks are (the built-in IPAM's
// claims, which the plugin makes) and, when every block of a family is
// full, claims another from a datastore that hands out blocks from a pool
// (datastore.Grower). It outlives the loop's rebuilds.
type Grower struct {
	ds   datastore.Grower // nil: the datastore's blocks do not grow
	free *prometheus.GaugeVec
	log  *slog.Logger
	said string // the last reason logged for not claiming
}

// New registers routelet_ipam_block_free_addresses (with every
// datastore) and returns the grower.
func New(ds datastore.Datastore, metrics *health.Metrics, log *slog.Logger) (*Grower, error) {
	g := &Grower{log: log, free: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "routelet_ipam_block_free_addresses",
		Help: "Addresses the built-in IPAM can still hand out, per block of this node; 0 in every block of a family makes an etcd node claim another.",
	}, []string{"block"})}
	g.ds, _ = ds.(datastore.Grower)
	if err := metrics.Registry.Register(g.free); err != nil {
		return nil, fmt.Errorf("block metrics: %w", err)
	}
	return g, nil
}

// UsageReader is what the grower needs of the IPAM (*ipam.Allocator).
type UsageReader interface {
	Usage() ([]ipam.BlockUsage, error)
}

// fullFamilies returns, per IP family (4, 6), the blocks of every family
// that has blocks and no free address left in any of them. A family with
// one free address anywhere is not full.
func fullFamilies(use []ipam.BlockUsage) map[int][]netip.Prefix {
	out := map[int][]netip.Prefix{}
	open := map[int]bool{}
	for _, u := range use {
		f := 6
		if u.Block.Addr().Is4() {
			f = 4
		}
		if u.Free() > 0 {
			open[f] = true
		}
		out[f] = append(out[f], u.Block)
	}
	for f := range open {
		delete(out, f)
	}
	return out
}

// growSettle is the least time between two checks that workload record
// changes ask for: a burst of ADDs makes one check at its start and one
// after it, not one each (a check lists every allocation).
const growSettle = 100 * time.Millisecond

// Start checks the blocks now, at workload record changes (the plugin
// writes one after each ADD; at most one check per growSettle, the last
// change always followed by one) and every period, until ctx is done. When it
// claimed a block it calls stop (the loop ends). The returned function
// waits for it to finish, after ctx is done, and returns the block it
// claimed, if any.
func (g *Grower) Start(ctx context.Context, use UsageReader, workloadsDir string, period time.Duration, stop func()) (grew func() (netip.Prefix, bool)) {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if err := dirwatch.Watch(ctx, workloadsDir, func(string) { poke() }, poke, g.log); err != nil {
		g.log.Warn("cannot watch workload records; checking the blocks every period only", "dir", workloadsDir, "period", period, "err", err)
	}
	var claimed netip.Prefix // written before done is closed
	done := make(chan struct{})
	go func() {
		defer close(done)
		retry := time.Second
		t := time.NewTimer(0)
		defer t.Stop()
		var last time.Time // of the last check
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
				if wait := growSettle - time.Since(last); wait > 0 {
					t.Stop()
					t.Reset(wait) // the check after the burst
					continue
				}
			case <-t.C:
			}
			last = time.Now()
			b, again := g.check(ctx, use)
			if b.IsValid() {
				claimed = b
				stop()
				return
			}
			next := period
			if again {
				next, retry = min(retry, period), min(2*retry, 30*time.Second)
			} else {
				retry = time.Second
			}
			t.Stop()
			t.Reset(next)
		}
	}()
	return func() (netip.Prefix, bool) { <-done; return claimed, claimed.IsValid() }
}

// check reads the blocks' use, exports it, and when every block of a
// family is full claims another and returns it. again: a claim failed and
// is worth retrying soon (etcd unreachable, the pool full).
func (g *Grower) check(ctx context.Context, use UsageReader) (claimed netip.Prefix, again bool) {
	u, err := use.Usage()
	if err != nil {
		g.note("cannot read the blocks' use", err)
		return netip.Prefix{}, true
	}
	g.free.Reset()
	for _, b := range u {
		g.free.WithLabelValues(b.Block.String()).Set(float64(b.Free()))
	}
	full := fullFamilies(u)
	if g.ds == nil || len(full) == 0 {
		g.said = ""
		return netip.Prefix{}, false
	}
	for _, f := range []int{4, 6} {
		blocks := full[f]
		if len(blocks) == 0 {
			continue
		}
		b, err := g.ds.Grow(ctx, f, blocks)
		if err == nil {
			g.log.Info("every block of the family is full: claimed another", "family", f, "full", blocks, "block", b)
			return b, false
		}
		if ctx.Err() != nil {
			return netip.Prefix{}, false
		}
		if errors.Is(err, datastore.ErrFixedBlocks) {
			g.note(fmt.Sprintf("every IPv%d block of this node is full (%v); not claiming another", f, blocks), err)
			continue
		}
		g.note(fmt.Sprintf("every IPv%d block of this node is full (%v) and no other block could be claimed; retrying", f, blocks), err)
		again = true
	}
	return netip.Prefix{}, again
}

// note logs why no block was claimed, once per distinct reason.
func (g *Grower) note(what string, err error) {
	if s := what + ": " + err.Error(); s != g.said {
		g.said = s
		g.log.Warn(what, "err", err)
	}
}
