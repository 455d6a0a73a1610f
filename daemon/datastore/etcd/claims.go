package etcd

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// A block claim in etcd is authoritative for which node takes a free
// block, but not over the pods a node already runs: a node never gives up
// a block its pods use because of a value in etcd. This file keeps the
// claims of the blocks this node serves in view:
//
//   - at start, the blocks holding the addresses this node's pods use
//     (Options.InUse: the built-in IPAM's claims and the workload records)
//     are served whatever etcd says; an unclaimed one is claimed again, one
//     claimed by another node (or overlapped by another claim) is kept and
//     reported as a conflict, and no new block replaces it;
//   - while running, the watch sees every change of those claims: one
//     rewritten to another holder is a conflict (reported, the block and
//     the dataplane stay), one deleted is claimed again with the same
//     create-if-absent transaction as a first claim. Another node's value
//     is never overwritten.
//
// A conflict is logged once (block, key, value found), exported in
// routelet_datastore_block_claim_conflicts{block} and returned by
// BlockConflicts (routeletd status and diagnose show it) until the claim
// is this node's again.

var _ datastore.ClaimReporter = (*Datastore)(nil)

// blockKV is one key of the blocks range as last listed or watched.
type blockKV struct {
	block   netip.Prefix // parsed from the key
	value   string
	created int64
}

// inUse returns the addresses this node's pods use (none without
// Options.InUse).
func (d *Datastore) inUse() ([]netip.Addr, error) {
	if d.o.InUse == nil {
		return nil, nil
	}
	return d.o.InUse()
}

// usedBlocks returns the blocks of pools holding the addresses in used,
// sorted. An address in no pool belongs to no block this function can
// name (a --pod-cidr block is named by the configuration).
func usedBlocks(pools []Pool, used []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range used {
		for _, p := range pools {
			if p.CIDR.Contains(a) {
				b := netip.PrefixFrom(a, p.BlockSize).Masked()
				if !slices.Contains(out, b) {
					out = append(out, b)
				}
				break
			}
		}
	}
	sortBlocks(out)
	return out
}

// foreignClaim returns the claim overlapping b whose value is not this
// node's name (the first by key), if any.
func (d *Datastore) foreignClaim(b netip.Prefix, claims []claim) (claim, bool) {
	var best claim
	found := false
	for _, c := range claims {
		if c.node == d.o.NodeName || !c.block.Overlaps(b) {
			continue
		}
		if !found || d.blockKey(c.block) < d.blockKey(best.block) {
			best, found = c, true
		}
	}
	return best, found
}

// keepUsed decides, at start, about the blocks this node's pods use
// (used, from usedBlocks or --pod-cidr): it returns those another claim
// names someone else for (kept: served anyway, each a conflict noted with
// the conflicting claim's create revision, so the node's blocks keep
// their order) and the first one nobody claims (reclaim), if any.
func (d *Datastore) keepUsed(used []netip.Prefix, claims []claim) (kept []claim, reclaim netip.Prefix) {
	for _, b := range used {
		if c, ok := d.foreignClaim(b, claims); ok {
			d.mu.Lock()
			d.noteConflict(b, d.blockKey(c.block), c.node, time.Now())
			d.mu.Unlock()
			if !slices.ContainsFunc(claims, func(o claim) bool { return o.node == d.o.NodeName && o.block == b }) {
				kept = append(kept, claim{block: b, node: d.o.NodeName, created: c.created})
			}
			continue
		}
		if !slices.ContainsFunc(claims, func(c claim) bool { return c.node == d.o.NodeName && c.block.Overlaps(b) }) && !reclaim.IsValid() {
			reclaim = b
		}
	}
	return kept, reclaim
}

// noteConflict records that block b, which this node serves, is claimed
// under key by holder; a new conflict (or a new value) is logged once.
// d.mu is held.
func (d *Datastore) noteConflict(b netip.Prefix, key, holder string, now time.Time) {
	old, ok := d.conflicts[b]
	if ok && old.Key == key && old.Holder == holder {
		return
	}
	c := datastore.BlockConflict{Block: b, Key: key, Holder: holder, Since: now}
	if ok {
		c.Since = old.Since
	}
	d.conflicts[b] = c
	d.m.conflicts.WithLabelValues(b.String()).Set(1)
	d.log.Warn("block claim conflict: etcd names another holder for a block this node serves; keeping the block, its pods and their routes (the claim is not overwritten)",
		"block", b, "key", key, "value", holder, "node", d.o.NodeName)
}

// clearConflict drops b's conflict, logging that it is resolved. d.mu is
// held.
func (d *Datastore) clearConflict(b netip.Prefix, why string) {
	c, ok := d.conflicts[b]
	if !ok {
		return
	}
	delete(d.conflicts, b)
	d.m.conflicts.WithLabelValues(b.String()).Set(0)
	d.log.Info("block claim conflict resolved: "+why, "block", b, "key", c.Key, "was", c.Holder, "node", d.o.NodeName)
}

// serve sets the blocks this node serves (LocalBlocks' answer, and each
// block Grow adds), whose claims the watch keeps in view.
func (d *Datastore) serve(blocks ...netip.Prefix) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range blocks {
		if !slices.Contains(d.served, b) {
			d.served = append(d.served, b)
			if _, ok := d.conflicts[b]; !ok {
				d.m.conflicts.WithLabelValues(b.String()).Set(0)
			}
		}
	}
	if d.listed {
		d.checkClaims()
	}
}

// inConflict reports whether b is served in spite of another claim.
func (d *Datastore) inConflict(b netip.Prefix) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.conflicts[b]
	return ok
}

// applyBlock records one key of the blocks range (or its deletion).
// d.mu is held.
func (d *Datastore) applyBlock(key string, value []byte, created int64, deleted bool) {
	delete(d.blockKVs, key)
	if deleted {
		return
	}
	b, err := d.parseBlockKey(key)
	if err != nil {
		return // logged where claims are listed; it claims nothing
	}
	d.blockKVs[key] = blockKV{block: b, value: string(value), created: created}
}

// checkClaims compares the claims of the served blocks with what etcd
// holds: a claim naming another holder (or another claim overlapping) is
// a conflict, a missing claim is claimed again by the keeper (kicked).
// d.mu is held.
func (d *Datastore) checkClaims() {
	now := time.Now()
	d.missing = d.missing[:0]
	for _, b := range d.served {
		key := d.blockKey(b)
		own := false
		var foreign string
		for k, kv := range d.blockKVs {
			if !kv.block.Overlaps(b) {
				continue
			}
			if kv.value == d.o.NodeName {
				own = own || k == key
				continue
			}
			if foreign == "" || k < foreign {
				foreign = k
			}
		}
		switch {
		case foreign != "":
			d.noteConflict(b, foreign, d.blockKVs[foreign].value, now)
		case own:
			d.clearConflict(b, "the claim is this node's again")
		default:
			d.clearConflict(b, "the conflicting claim is gone; claiming the block again")
			d.missing = append(d.missing, b)
		}
	}
	if len(d.missing) > 0 {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

// ensureClaims claims again, each only if its key is absent, the served
// blocks whose claim is gone from etcd. A key someone wrote meanwhile is
// left as it is (the watch reports it).
func (d *Datastore) ensureClaims(ctx context.Context) error {
	d.mu.Lock()
	missing := slices.Clone(d.missing)
	d.mu.Unlock()
	for _, b := range missing {
		key := d.blockKey(b)
		txn, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, d.o.NodeName)).Commit()
		if err != nil {
			return fmt.Errorf("claim block %s again (key %s): %w", b, key, err)
		}
		if txn.Succeeded {
			d.m.claims.WithLabelValues("reclaimed").Inc()
			d.log.Info("the claim of a block this node serves was gone from etcd: claimed it again", "block", b, "key", key)
		}
	}
	return nil
}

// BlockConflicts returns the served blocks whose claim in etcd is not
// this node's, sorted by block (datastore.ClaimReporter).
func (d *Datastore) BlockConflicts() []datastore.BlockConflict {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]datastore.BlockConflict, 0, len(d.conflicts))
	for _, c := range d.conflicts {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b datastore.BlockConflict) int {
		if c := strings.Compare(familyKey(a.Block), familyKey(b.Block)); c != 0 {
			return c
		}
		return a.Block.Addr().Compare(b.Block.Addr())
	})
	return out
}

// familyKey orders IPv4 before IPv6.
func familyKey(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "4"
	}
	return "6"
}

// publisher returns the other node whose record publishes a block
// overlapping b, if any (records: the node records by name).
func (d *Datastore) publisher(b netip.Prefix, records map[string]peers.Record) (string, bool) {
	var names []string
	for name, r := range records {
		if name == d.o.NodeName {
			continue
		}
		for _, s := range r.Blocks {
			if p, err := netip.ParsePrefix(s); err == nil && p.Masked().Overlaps(b) {
				names = append(names, name)
				break
			}
		}
	}
	if len(names) == 0 {
		return "", false
	}
	slices.Sort(names)
	return names[0], true
}

// notTaken drops from claims this node's claims of blocks that another
// node's record publishes, except those overlapping keep (the blocks its
// pods use, the ones it just claimed): a claim rewritten to name this
// node does not make it take a block another node serves. Each is logged
// once. records are the node records by name; nil reads them from etcd
// (only when there is such a claim to check).
func (d *Datastore) notTaken(ctx context.Context, claims []claim, keep []netip.Prefix, records map[string]peers.Record) ([]claim, error) {
	check := func(c claim) bool {
		return c.node == d.o.NodeName && !slices.ContainsFunc(keep, c.block.Overlaps)
	}
	if !slices.ContainsFunc(claims, check) {
		return claims, nil
	}
	if records == nil {
		resp, err := d.cli.Get(ctx, d.nodesPrefix(), clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		records = map[string]peers.Record{}
		for _, kv := range resp.Kvs {
			if n, err := state.DecodeNode(kv.Value); err == nil && d.nodeKey(n.Name) == string(kv.Key) {
				records[n.Name] = peers.FromState(n)
			}
		}
	}
	out := make([]claim, 0, len(claims))
	for _, c := range claims {
		if check(c) {
			if other, ok := d.publisher(c.block, records); ok {
				d.mu.Lock()
				if !d.notTakenLogged[c.block] {
					d.notTakenLogged[c.block] = true
					d.log.Warn("block claim conflict: etcd names this node as the holder of a block another node's record publishes and no pod here uses; not taking it",
						"block", c.block, "key", d.blockKey(c.block), "publishedBy", other, "node", d.o.NodeName)
				}
				d.mu.Unlock()
				continue
			}
		}
		out = append(out, c)
	}
	return out, nil
}
