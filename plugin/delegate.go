package main

import (
	"context"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
)

// delegated runs the configured IPAM plugin (ipam.type) the way the CNI
// library's delegation does: found in CNI_PATH, the network config on its
// stdin, the command's environment with CNI_COMMAND set. (The plugins
// module's pkg/ipam does the same, but linking it brings in its iptables
// and nftables packages, whose initialisation every command would pay.)
var delegated delegation

type delegation struct{}

func (delegation) ExecAdd(plugin string, netconf []byte) (types.Result, error) {
	return invoke.DelegateAdd(context.Background(), plugin, netconf, nil)
}

func (delegation) ExecCheck(plugin string, netconf []byte) error {
	return invoke.DelegateCheck(context.Background(), plugin, netconf, nil)
}

func (delegation) ExecDel(plugin string, netconf []byte) error {
	return invoke.DelegateDel(context.Background(), plugin, netconf, nil)
}

func (delegation) ExecStatus(plugin string, netconf []byte) error {
	return invoke.DelegateStatus(context.Background(), plugin, netconf, nil)
}
