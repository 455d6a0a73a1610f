package etcd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/state"
)

// poolVersion is the pool configuration's format version.
const poolVersion = 1

// Default block sizes (prefix lengths) of the blocks carved from a pool.
const (
	DefaultBlockSize   = 26
	DefaultBlockSizeV6 = 122
)

// Pool is one address pool: the CIDR blocks are carved from and their size.
type Pool struct {
	CIDR      netip.Prefix
	BlockSize int
}

// poolJSON is the stored form of a Pool.
type poolJSON struct {
	CIDR      string `json:"cidr"`
	BlockSize int    `json:"blockSize"`
}

// poolsJSON is the value of <prefix>/config.
type poolsJSON struct {
	Version int        `json:"version"`
	Pools   []poolJSON `json:"pools"`
}

// CheckPools refuses pools that cannot work: an invalid or special CIDR, a
// block size outside the pool or too small for a pod, two pools that
// overlap or two of one family.
func CheckPools(pools []Pool) error {
	if len(pools) == 0 {
		return errors.New("no pool given")
	}
	for i, p := range pools {
		if err := nodespace.CheckBlock(p.CIDR); err != nil {
			return fmt.Errorf("pool %s: %w", p.CIDR, err)
		}
		probe := netip.PrefixFrom(p.CIDR.Addr(), p.BlockSize)
		if p.BlockSize < p.CIDR.Bits() || !probe.IsValid() {
			return fmt.Errorf("pool %s: block size /%d is not inside the pool", p.CIDR, p.BlockSize)
		}
		if err := nodespace.CheckBlock(probe.Masked()); err != nil {
			return fmt.Errorf("pool %s: block size /%d: %w", p.CIDR, p.BlockSize, err)
		}
		for _, q := range pools[:i] {
			if q.CIDR.Addr().Is4() == p.CIDR.Addr().Is4() {
				return fmt.Errorf("pools %s and %s: at most one pool per IP family", q.CIDR, p.CIDR)
			}
		}
	}
	return nil
}

// encodePools is the stored form of pools (checked first).
func encodePools(pools []Pool) ([]byte, error) {
	if err := CheckPools(pools); err != nil {
		return nil, err
	}
	w := poolsJSON{Version: poolVersion}
	for _, p := range pools {
		w.Pools = append(w.Pools, poolJSON{CIDR: p.CIDR.String(), BlockSize: p.BlockSize})
	}
	return json.Marshal(w)
}

// decodePools parses and checks a stored pool configuration.
func decodePools(data []byte) ([]Pool, error) {
	var w poolsJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("parse pool configuration: %w", err)
	}
	if w.Version != poolVersion {
		return nil, fmt.Errorf("pool configuration: unknown version %d (want %d)", w.Version, poolVersion)
	}
	var out []Pool
	for _, p := range w.Pools {
		c, err := netip.ParsePrefix(p.CIDR)
		if err != nil {
			return nil, fmt.Errorf("pool configuration: %w", err)
		}
		out = append(out, Pool{CIDR: c, BlockSize: p.BlockSize})
	}
	if err := CheckPools(out); err != nil {
		return nil, fmt.Errorf("pool configuration: %w", err)
	}
	return out, nil
}

// blockKey is the key claiming block b: <prefix>/blocks/<addr>-<bits>.
func (d *Datastore) blockKey(b netip.Prefix) string {
	return d.blocksPrefix() + b.Addr().String() + "-" + fmt.Sprint(b.Bits())
}

// parseBlockKey is blockKey's inverse.
func (d *Datastore) parseBlockKey(key string) (netip.Prefix, error) {
	s := strings.TrimPrefix(key, d.blocksPrefix())
	i := strings.LastIndexByte(s, '-')
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("block key %q is not <addr>-<bits>", key)
	}
	p, err := netip.ParsePrefix(s[:i] + "/" + s[i+1:])
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("block key %q: %w", key, err)
	}
	if err := nodespace.CheckBlock(p); err != nil {
		return netip.Prefix{}, fmt.Errorf("block key %q: %w", key, err)
	}
	return p, nil
}

// claim is one block claimed in etcd.
type claim struct {
	block   netip.Prefix
	node    string
	created int64 // the key's create revision: claims in the order made
}

// listClaims reads every block claim. Keys that do not parse are logged
// and left out (they claim nothing). A value that is no node name is
// logged and kept: the block is taken (by nobody that can serve it), not
// free, and not this node's.
func (d *Datastore) listClaims(ctx context.Context) ([]claim, int64, error) {
	resp, err := d.cli.Get(ctx, d.blocksPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	var out []claim
	for _, kv := range resp.Kvs {
		b, err := d.parseBlockKey(string(kv.Key))
		if err != nil {
			d.log.Warn("skipping bad block claim in etcd", "key", string(kv.Key), "err", err)
			continue
		}
		if err := state.ValidateNodeName(string(kv.Value)); err != nil {
			d.log.Warn("block claim in etcd holds no node name: the block is taken by nobody", "key", string(kv.Key), "err", err)
		}
		out = append(out, claim{block: b, node: string(kv.Value), created: kv.CreateRevision})
	}
	return out, resp.Header.Revision, nil
}

// readPools returns the pool configuration and its key's modification
// revision; no configuration is nil pools and revision 0.
func (d *Datastore) readPools(ctx context.Context) ([]Pool, int64, error) {
	resp, err := d.cli.Get(ctx, d.configKey())
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	pools, err := decodePools(resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, fmt.Errorf("key %s: %w", d.configKey(), err)
	}
	return pools, resp.Kvs[0].ModRevision, nil
}

// ErrPoolsInUse: the pools cannot change while blocks are claimed.
var ErrPoolsInUse = errors.New("pools have claimed blocks")

// Init writes the pool configuration. Writing the same pools again is a
// no-op; different pools are refused (ErrPoolsInUse, saying how many)
// while any block is claimed (the first configuration is not a change:
// blocks registered by --pod-cidr before it stay). The check and the write are one
// transaction, so a node claiming a block at the same moment either
// claims from the old pools before the change is refused or from the new.
func (d *Datastore) Init(ctx context.Context, pools []Pool) (changed bool, err error) {
	data, err := encodePools(pools)
	if err != nil {
		return false, err
	}
	for {
		resp, err := d.cli.Get(ctx, d.configKey())
		if err != nil {
			return false, fmt.Errorf("read %s: %w", d.configKey(), err)
		}
		rev := int64(0)
		if len(resp.Kvs) > 0 {
			rev = resp.Kvs[0].ModRevision
			if cur, err := decodePools(resp.Kvs[0].Value); err == nil && slices.Equal(cur, pools) {
				return false, nil
			}
		}
		// A first configuration may join blocks registered by --pod-cidr;
		// a change needs no key in the blocks range: nothing claimed.
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(d.configKey()), "=", rev)}
		if rev != 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(d.blocksPrefix()).WithPrefix(), "=", 0))
		}
		txn, err := d.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(d.configKey(), string(data))).Commit()
		if err != nil {
			return false, fmt.Errorf("write %s: %w", d.configKey(), err)
		}
		if txn.Succeeded {
			return true, nil
		}
		claims, _, err := d.listClaims(ctx)
		if err != nil {
			return false, fmt.Errorf("list claimed blocks: %w", err)
		}
		if len(claims) > 0 {
			return false, fmt.Errorf("%w: %d blocks are claimed (first %s by node %q); nodes must leave before the pools change",
				ErrPoolsInUse, len(claims), claims[0].block, claims[0].node)
		}
		// The configuration changed under us; read it again.
	}
}

// nthBlock returns the n-th block of size bits in pool.
func nthBlock(pool netip.Prefix, bits int, n uint64) netip.Prefix {
	a := pool.Addr().AsSlice()
	v := new(big.Int).SetBytes(a)
	off := new(big.Int).Lsh(new(big.Int).SetUint64(n), uint(len(a)*8-bits))
	v.Add(v, off)
	buf := make([]byte, len(a))
	v.FillBytes(buf)
	addr, _ := netip.AddrFromSlice(buf)
	return netip.PrefixFrom(addr, bits)
}

// maxCandidates bounds the blocks one claim attempt looks at: the first
// free block is found after at most as many steps as there are claims.
const maxCandidates = 1 << 20

// freeBlock returns the first block of pool that overlaps no claim.
func freeBlock(pool Pool, claims []claim) (netip.Prefix, bool) {
	count := uint64(maxCandidates)
	if d := pool.BlockSize - pool.CIDR.Bits(); d < 20 {
		count = 1 << d
	}
	for n := uint64(0); n < count; n++ {
		b := nthBlock(pool.CIDR, pool.BlockSize, n)
		if !slices.ContainsFunc(claims, func(c claim) bool { return c.block.Overlaps(b) }) {
			return b, true
		}
	}
	return netip.Prefix{}, false
}

// holderOf returns the claim overlapping b held by another node.
func holderOf(b netip.Prefix, node string, claims []claim) (claim, bool) {
	for _, c := range claims {
		if c.node != node && c.block.Overlaps(b) {
			return c, true
		}
	}
	return claim{}, false
}

// ErrBlockHeld: a --pod-cidr block is claimed by another node.
var ErrBlockHeld = errors.New("block is held by another node")

// register claims the --pod-cidr blocks for this node, refusing any
// another node holds (naming it), unless this node's pods use it: then
// the block is served anyway and the claim is a conflict (claims.go).
func (d *Datastore) register(ctx context.Context, blocks []netip.Prefix, used []netip.Addr) error {
	claims, _, err := d.listClaims(ctx)
	if err != nil {
		return err
	}
	for _, b := range blocks {
		if c, ok := holderOf(b, d.o.NodeName, claims); ok {
			if slices.ContainsFunc(used, b.Contains) {
				d.keepUsed([]netip.Prefix{b}, claims)
				continue
			}
			return fmt.Errorf("pod-cidr %s: %w: node %q holds %s (key %s)", b, ErrBlockHeld, c.node, c.block, d.blockKey(c.block))
		}
		key := d.blockKey(b)
		txn, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, d.o.NodeName)).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return err
		}
		if txn.Succeeded {
			d.log.Info("registered pod-cidr block in etcd", "block", b, "key", key)
			continue
		}
		kvs := txn.Responses[0].GetResponseRange().Kvs
		if len(kvs) > 0 && string(kvs[0].Value) != d.o.NodeName {
			if slices.ContainsFunc(used, b.Contains) {
				d.keepUsed([]netip.Prefix{b}, []claim{{block: b, node: string(kvs[0].Value), created: kvs[0].CreateRevision}})
				continue
			}
			return fmt.Errorf("pod-cidr %s: %w: node %q holds it (key %s)", b, ErrBlockHeld, kvs[0].Value, key)
		}
	}
	return nil
}

// claimBlocks returns this node's claimed blocks, claiming one free block
// of each pool it holds none of. The blocks holding addresses this node's
// pods use (used) are served whatever the claims say: one nobody claims
// is claimed again, one another claim names someone else for is kept (a
// conflict) and counts as held. A pool with no free block is a reason to
// wait (returned as reason, no error).
func (d *Datastore) claimBlocks(ctx context.Context, pools []Pool, rev int64, used []netip.Addr) (blocks []netip.Prefix, reason string, err error) {
	inUse := usedBlocks(pools, used)
	var claimed []netip.Prefix // claimed by this call: taken whoever publishes them
	for {
		claims, _, err := d.listClaims(ctx)
		if err != nil {
			return nil, "", err
		}
		kept, reclaim := d.keepUsed(inUse, claims)
		if reclaim.IsValid() {
			key := d.blockKey(reclaim)
			won, err := d.claimFree(ctx, key, rev)
			if err != nil {
				return nil, "", err
			}
			if won {
				d.m.claims.WithLabelValues("reclaimed").Inc()
				d.log.Info("claimed again a block this node's pods use: its claim was gone from etcd", "block", reclaim, "key", key)
			}
			continue
		}
		mine, err := d.notTaken(ctx, claims, append(slices.Clone(inUse), claimed...), nil)
		if err != nil {
			return nil, "", err
		}
		own := ownBlocks(append(kept, mine...), d.o.NodeName)
		var want *Pool
		var free netip.Prefix
		for _, p := range pools {
			if slices.ContainsFunc(own, func(b netip.Prefix) bool { return p.CIDR.Overlaps(b) }) {
				continue
			}
			b, ok := freeBlock(p, claims)
			if !ok {
				return nil, fmt.Sprintf("pool %s has no free /%d block", p.CIDR, p.BlockSize), nil
			}
			want, free = &p, b
			break
		}
		if want == nil {
			return own, "", nil
		}
		key := d.blockKey(free)
		if won, err := d.claimFree(ctx, key, rev); err != nil || !won {
			if err != nil {
				return nil, "", err
			}
			continue
		}
		claimed = append(claimed, free)
		d.m.claims.WithLabelValues("first").Inc()
		d.log.Info("claimed a block from the pool", "block", free, "pool", want.CIDR, "key", key)
	}
}

// claimFree claims the block under key for this node if it is still free
// and the pool configuration still at revision rev: one transaction. A
// block another node took meanwhile is a lost race (counted; not won, no
// error: the caller looks for the next free one); changed pools are
// errPoolsChanged.
func (d *Datastore) claimFree(ctx context.Context, key string, rev int64) (won bool, err error) {
	txn, err := d.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(d.configKey()), "=", rev),
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
	).Then(clientv3.OpPut(key, d.o.NodeName)).Commit()
	if err != nil {
		return false, err
	}
	if txn.Succeeded {
		return true, nil
	}
	d.m.claimRaces.Inc()
	if _, now, err := d.readPools(ctx); err != nil {
		return false, err
	} else if now != rev {
		return false, errPoolsChanged
	}
	return false, nil
}

// ownBlocks returns node's claimed blocks, IPv4 first, each family in the
// order claimed: a node's first block of a family stays first (its tunnel
// address is that block's first address) when it claims more.
func ownBlocks(claims []claim, node string) []netip.Prefix {
	var own []claim
	for _, c := range claims {
		if c.node == node {
			own = append(own, c)
		}
	}
	slices.SortFunc(own, func(a, b claim) int {
		if a.block.Addr().Is4() != b.block.Addr().Is4() {
			if a.block.Addr().Is4() {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.created, b.created), a.block.Addr().Compare(b.block.Addr()))
	})
	out := make([]netip.Prefix, 0, len(own))
	for _, c := range own {
		out = append(out, c.block)
	}
	return out
}

// errPoolsChanged: the pool configuration changed during a claim.
var errPoolsChanged = errors.New("the pool configuration changed while claiming")

// sortBlocks orders blocks IPv4 first, then by address.
func sortBlocks(bs []netip.Prefix) {
	slices.SortFunc(bs, func(a, b netip.Prefix) int {
		if a.Addr().Is4() != b.Addr().Is4() {
			if a.Addr().Is4() {
				return -1
			}
			return 1
		}
		return a.Addr().Compare(b.Addr())
	})
}
