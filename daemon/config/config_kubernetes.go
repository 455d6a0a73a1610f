package config

import "errors"

// NodeNameEnv is the environment variable the Kubernetes downward API
// conventionally sets to the pod's node (fieldRef spec.nodeName); it
// names the node when neither --node-name nor ROUTELET_NODE_NAME does.
const NodeNameEnv = "NODE_NAME"

// SourceNodeNameEnv is the layer of NodeNameEnv: above the config file,
// below ROUTELET_NODE_NAME.
const SourceNodeNameEnv Source = "env " + NodeNameEnv

// kubernetesKeys are the Kubernetes datastore's keys.
func kubernetesKeys() []key {
	return []key{
		{name: "kubeconfig", help: "kubeconfig file for --datastore kubernetes (default: the in-cluster service account)", def: []string{""}, set: func(c *Config, v []string) error {
			if v[0] != "" && v[0][0] != '/' {
				return errors.New("must be an absolute path")
			}
			c.Kubeconfig = v[0]
			return nil
		}},
	}
}
