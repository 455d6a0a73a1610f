package netnstest

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
)

// Node is a simulated host: a network namespace in which CNI plugins run,
// and the libcni handle that runs them.
type Node struct {
	NS  ns.NetNS
	CNI *libcni.CNIConfig
}

// NewNode creates the node namespace nsName, enables IPv4 and IPv6 forwarding
// in it (as on any Kubernetes node) and returns a Node whose libcni looks for
// plugins in pluginDirs and caches results in cacheDir.
func NewNode(nsName string, pluginDirs []string, cacheDir string) (*Node, error) {
	n, err := NewNamed(nsName)
	if err != nil {
		return nil, err
	}
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if _, err := Sysctl(n, key, "1"); err != nil {
			Remove(n)
			return nil, fmt.Errorf("node %s: %w", nsName, err)
		}
	}
	return &Node{NS: n, CNI: libcni.NewCNIConfigWithCacheDir(pluginDirs, cacheDir, nil)}, nil
}

// Close removes the node namespace and with it every host-side link in it.
func (n *Node) Close() error { return Remove(n.NS) }

// in runs f on a thread locked inside the node namespace: plugins that f
// executes inherit that namespace.
func (n *Node) in(f func() error) error {
	return n.NS.Do(func(ns.NetNS) error { return f() })
}

// Add runs CNI ADD for list in the node namespace.
func (n *Node) Add(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error) {
	var res types.Result
	err := n.in(func() error {
		var err error
		res, err = n.CNI.AddNetworkList(ctx, list, rt)
		return err
	})
	return res, err
}

// Del runs CNI DEL for list in the node namespace.
func (n *Node) Del(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.in(func() error { return n.CNI.DelNetworkList(ctx, list, rt) })
}

// Check runs CNI CHECK for list in the node namespace.
func (n *Node) Check(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.in(func() error { return n.CNI.CheckNetworkList(ctx, list, rt) })
}

// GC runs libcni's garbage collection for list in the node namespace: DEL for
// cached attachments not in valid, then CNI GC (spec 1.1.0 and later).
func (n *Node) GC(ctx context.Context, list *libcni.NetworkConfigList, valid []types.GCAttachment) error {
	return n.in(func() error {
		return n.CNI.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid})
	})
}

// Status runs CNI STATUS for list in the node namespace (spec 1.1.0 and later).
func (n *Node) Status(ctx context.Context, list *libcni.NetworkConfigList) error {
	return n.in(func() error { return n.CNI.GetStatusNetworkList(ctx, list) })
}
