// Package testbins names the kube-apiserver, etcd and helm test binaries:
// their versions and where they are cached, for the builder (hack/testbins)
// and the tests (internal/k8stest, the chart's tests, hack/manifests). It imports nothing outside the standard
// library, so building the builder is quick.
package testbins

import (
	"os"
	"path/filepath"
)

// Versions of the test binaries. kube-apiserver is built from
// k8s.io/kubernetes at KubeVersion with every staging module replaced by the
// published k8s.io/<name> at StagingVersion; etcd from
// go.etcd.io/etcd/server/v3 at EtcdVersion; helm from helm.sh/helm/v4 at
// HelmVersion. client-go in go.mod follows StagingVersion.
const (
	KubeVersion    = "v1.37.2"
	StagingVersion = "v0.37.2"
	EtcdVersion    = "v3.7.3"
	HelmVersion    = "v4.3.2"
)

// DefaultCacheDir is where the test binaries are cached, outside the
// repository, unless ROUTELET_TEST_BINS names another directory.
const DefaultCacheDir = "/var/cache/routelet-bins"

// CacheDir returns the directory holding the cached test binaries.
func CacheDir() string {
	if d := os.Getenv("ROUTELET_TEST_BINS"); d != "" {
		return d
	}
	return DefaultCacheDir
}

// KubeAPIServerPath returns the cached kube-apiserver binary's path.
func KubeAPIServerPath() string {
	return filepath.Join(CacheDir(), "kube-apiserver-"+KubeVersion)
}

// EtcdPath returns the cached etcd binary's path.
func EtcdPath() string {
	return filepath.Join(CacheDir(), "etcd-"+EtcdVersion)
}

// HelmPath returns the cached helm binary's path.
func HelmPath() string {
	return filepath.Join(CacheDir(), "helm-"+HelmVersion)
}
