package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/routelet/routelet/daemon/datastore"
)

var _ datastore.Grower = (*Datastore)(nil)

// Grow claims one more free block of the family's pool for this node, whose
// blocks of that family (full) are all full: the create-if-absent
// transaction of the first claim, keyed by the block and holding the
// node's name, so LocalBlocks returns it from now on, also after a restart.
// A block of the family this node already holds beyond full is returned
// without a claim. --pod-cidr blocks do not grow (datastore.ErrFixedBlocks);
// a pool without a free block is datastore.ErrPoolFull.
func (d *Datastore) Grow(ctx context.Context, family int, full []netip.Prefix) (netip.Prefix, error) {
	if len(d.o.PodCIDRs) > 0 {
		return netip.Prefix{}, fmt.Errorf("%w (pod-cidr %v)", datastore.ErrFixedBlocks, d.o.PodCIDRs)
	}
	ctx, cancel := d.req(ctx)
	defer cancel()
	return d.grow(ctx, family, full)
}

// grow is Grow's claim, within one request timeout. Only a failed request
// counts as etcd unreachable (failed); a full pool, a missing pool or a
// block taken away are answers.
func (d *Datastore) grow(ctx context.Context, family int, full []netip.Prefix) (netip.Prefix, error) {
	unreached := func(err error) (netip.Prefix, error) {
		if ctx.Err() == nil {
			d.failed("grow", err)
		}
		return netip.Prefix{}, err
	}
	pools, rev, err := d.readPools(ctx)
	if err != nil {
		return unreached(err)
	}
	d.reached()
	i := slices.IndexFunc(pools, func(p Pool) bool { return familyOf(p.CIDR) == family })
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("no IPv%d pool configured in etcd (key %s)", family, d.configKey())
	}
	pool := pools[i]
	for {
		claims, _, err := d.listClaims(ctx)
		if err != nil {
			return unreached(err)
		}
		// A claim naming this node for a block another node's record
		// publishes is not handed out (claims.go).
		d.mu.Lock()
		records, keep := maps.Clone(d.recs), append(slices.Clone(full), d.served...)
		d.mu.Unlock()
		mine, err := d.notTaken(ctx, claims, keep, records)
		if err != nil {
			return unreached(err)
		}
		own := ownBlocks(mine, d.o.NodeName)
		for _, b := range full {
			if !slices.Contains(own, b) && !d.inConflict(b) {
				return netip.Prefix{}, fmt.Errorf("block %s is no longer this node's in etcd (key %s)", b, d.blockKey(b))
			}
		}
		for _, b := range own {
			if familyOf(b) == family && !slices.Contains(full, b) {
				d.serve(b)
				return b, nil // claimed before, not yet in use
			}
		}
		free, ok := freeBlock(pool, claims)
		if !ok {
			return netip.Prefix{}, fmt.Errorf("%w: pool %s has no free /%d block", datastore.ErrPoolFull, pool.CIDR, pool.BlockSize)
		}
		key := d.blockKey(free)
		won, err := d.claimFree(ctx, key, rev)
		if errors.Is(err, errPoolsChanged) {
			return netip.Prefix{}, err
		}
		if err != nil {
			return unreached(err)
		}
		if won {
			d.serve(free)
			d.m.claims.WithLabelValues("full").Inc()
			d.log.Info("claimed another block from the pool: every block of its family is full",
				"block", free, "pool", pool.CIDR, "full", full, "key", key)
			return free, nil
		}
	}
}

// familyOf is 4 or 6.
func familyOf(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}
