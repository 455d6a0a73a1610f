// Package install holds routelet's installer: install-cni.sh puts the CNI
// plugin binary and its conflist into place (the DaemonSet initContainer's
// job, or a one-off step on a standalone host). The Go files here only test
// the script.
package install
