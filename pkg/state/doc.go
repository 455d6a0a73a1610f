// Package state owns routelet's shared state directory (default /run/routelet):
// the workload records written by the CNI plugin, the node records read by the
// daemon, and the daemon's status file read by the plugin.
//
// Layout:
//
//	<root>/workloads/<containerID>_<ifname>.json
//	<root>/nodes/<nodeName>.json
//	<root>/ipam/                 (owned by pkg/ipam)
//	<root>/daemon.json
//
// Invariants: every write is atomic (temp file in the same directory, fsync,
// rename, fsync of the directory); directories are 0700 and files 0600;
// symlinks are never followed (O_NOFOLLOW, and Lstat checks on directories);
// every name is validated before it touches the filesystem. Records carry
// "version": 1. Readers skip a record they cannot parse or whose version they
// do not know and report it, so one bad file never hides the others.
package state
