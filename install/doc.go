// Package install holds routelet's installer and Kubernetes manifests:
// install-cni.sh puts the CNI plugin binaries and the conflist into place
// (the DaemonSet initContainer's job, or a one-off step on a standalone
// host); kubernetes/ holds the manifests. The Go files here only test them.
package install
