package main

import (
	"context"
	"log/slog"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/datastore/kubernetes"
	"github.com/routelet/routelet/internal/buildinfo"
	"github.com/routelet/routelet/pkg/state"
)

// newKubernetes opens the Kubernetes datastore: --kubeconfig, else the
// in-cluster config; this node is the Node named --node-name.
func newKubernetes(_ context.Context, cfg *config.Config, _ *state.Store, log *slog.Logger) (datastore.Datastore, error) {
	if len(cfg.PodCIDRs) > 0 {
		log.Warn("pod-cidr is ignored with the kubernetes datastore: the blocks are the Node's spec.podCIDRs", "podCIDRs", cfg.PodCIDRs)
	}
	rc, err := kubernetes.ClientConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, cfg.KeyError("kubeconfig", cfg.Kubeconfig, err)
	}
	rc.UserAgent = "routeletd/" + buildinfo.Version()
	client, err := kubernetes.NewNodeClient(rc)
	if err != nil {
		return nil, cfg.KeyError("kubeconfig", cfg.Kubeconfig, err)
	}
	return kubernetes.New(kubernetes.Options{Client: client, NodeName: cfg.NodeName, Logger: log})
}
