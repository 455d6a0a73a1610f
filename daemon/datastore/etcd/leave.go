package etcd

import (
	"context"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leave removes this node from etcd in one transaction: its record, its
// liveness key and every block claim it holds. It returns the released
// blocks. The caller checks first that no pod is left on the node.
func (d *Datastore) Leave(ctx context.Context) ([]netip.Prefix, error) {
	claims, _, err := d.listClaims(ctx)
	if err != nil {
		return nil, fmt.Errorf("list claimed blocks: %w", err)
	}
	ops := []clientv3.Op{clientv3.OpDelete(d.nodeKey(d.o.NodeName)), clientv3.OpDelete(d.livenessPrefix() + d.o.NodeName)}
	var cmps []clientv3.Cmp
	var released []netip.Prefix
	for _, c := range claims {
		if c.node != d.o.NodeName {
			continue
		}
		key := d.blockKey(c.block)
		// Only while the claim is still this node's.
		cmps = append(cmps, clientv3.Compare(clientv3.Value(key), "=", d.o.NodeName))
		ops = append(ops, clientv3.OpDelete(key))
		released = append(released, c.block)
	}
	txn, err := d.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("remove node %s from etcd: %w", d.o.NodeName, err)
	}
	if !txn.Succeeded {
		return nil, fmt.Errorf("remove node %s from etcd: its block claims changed meanwhile; run leave again", d.o.NodeName)
	}
	sortBlocks(released)
	return released, nil
}
