// Package cniconf renders the CNI network configuration list routeletd
// writes into the container runtime's CNI conf dir once it is ready, and
// writes it there.
//
// Until the file exists, kubelet reports the node's network as not ready
// and schedules no pods there, so the file appears only once routelet can
// serve ADD. It is written atomically (a reader sees the old list or the
// new one, never part of one) and so that every runtime's directory watcher
// notices; only routeletd's own file (and its hidden temp file) is ever
// created or changed in the directory, and an unchanged list is not
// rewritten. See Write.
package cniconf
