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
// When "<containerID>_<ifname>" would be too long for a file name the stem is
// "h-" plus a SHA-256 of both parts instead (see AttachmentName); the record
// itself always carries the real names.
//
// Invariants: every write is atomic (a ".tmp-" file in the same directory,
// fsync, rename, fsync of the directory), so a reader sees the old record or
// the new one, never a mix; directories are 0700 and files 0600; symlinks are
// never followed (O_NOFOLLOW on reads, Lstat checks on directories, and a
// rename replaces a planted link instead of writing through it); every name is
// validated before it touches the filesystem. Records carry "version": 1.
// Listings ignore dotfiles, so temp files left by a crashed writer are never
// taken for records, and skip (reporting each) a record they cannot read,
// parse or validate, whose version they do not know, or that sits under a file
// name other than its own; one bad file never hides the others.
package state
