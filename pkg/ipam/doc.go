// Package ipam is routelet's node-local block IPAM, used in-process by the CNI
// plugin. Addresses come from the node's blocks (daemon.json or the conflist's
// ipam.blocks); allocations are keyed by (containerID, ifname) and survive a
// crash of the plugin at any point without ever handing one address to two
// attachments.
//
// # On disk
//
// Everything lives under one directory, normally <stateDir>/ipam (0700 dirs,
// 0600 files, symlinks never followed):
//
//	lock                                flock target; holds the holder's description
//	addrs/<address>                     claim: "containerID\nifname\n"
//	attachments/<containerID>_<ifname>.json  the attachment's addresses and blocks
//	blocks/<block>                      hint: cursor + one bit per address
//	veth-locks/<host veth>              not the allocator's: the plugin's lock per host veth name
//
// The claim file is the single source of truth: an address is taken exactly
// when addrs/<address> exists, and its owner is whoever the file names.
// Claims are made with link(2) from a fully written temp file, so a claim
// appears atomically with its content and two claimers can never both win.
// The attachment record makes Get, Release and a repeated ADD O(1) (no scan),
// and the block hint makes finding a free address O(1) on disk: the search
// walks the hint bitmap in memory from the cursor (the address handed out
// last, so released addresses are not reused at once) and lstats only the
// candidate. Every operation holds an exclusive flock on lock, waiting (in a
// blocking flock, so the kernel hands the lock straight to the next waiter) at
// most Options.LockTimeout; the kernel drops a dead holder's flock, so a
// crashed plugin never wedges IPAM, and a waiter that gives up reports the
// holder line the current holder wrote into the lock file.
//
// # Crash safety
//
// Allocate for attachment A, under the lock:
//
//  1. choose the addresses (requested ones, or free ones found via the hint),
//     writing nothing but hint repairs;
//  2. write A's record listing what A will hold (atomic rename): the intent;
//  3. claim each chosen address (link);
//  4. set the hint bits and the cursor.
//
// Release for A: for each address in A's record that A's claim names, clear
// the hint bit, then remove the claim; finally remove A's record.
//
// Invariants that hold after a crash at any point (the page cache outlives the
// process, and each step is a single atomic rename, link, unlink or one-byte
// pwrite):
//
//   - Every claim is listed in its owner's record, because the record is
//     written before the claim. So a retried Allocate or Release of A finds
//     A's claims by reading one file: a retried Allocate reuses them, a
//     retried Release removes them. Nothing leaks, nothing needs a scan.
//   - A record may list an address A does not own (crash between 2 and 3, or
//     between unclaim and record removal). Ownership is always re-checked
//     against the claim, so such an entry is ignored by Get and List, skipped
//     by Release, replaced by a retried Allocate, and never stops another
//     attachment from claiming that free address.
//   - No address has two owners: a claim is only ever created by link, which
//     fails when the name exists, and only removed by its owner's Release.
//   - A set hint bit always has a claim (bits are set after the claim and
//     cleared before it is removed). A clear bit over an existing claim is a
//     stale hint that the search repairs when it meets it, and before
//     reporting ErrExhausted every set bit is re-checked, so a free address
//     is never lost for good.
//
// Temp files (".tmp-*") a killed writer leaves behind are never taken for
// state. Every writer holds an flock on its temp file from its creation
// until its rename or unlink. List, the GC path, removes them and records
// that own no address (under the lock nothing is in flight, so both can
// only be a dead writer's); RemoveStaleTemps, run by routeletd at start and
// on every leak check, removes them without the IPAM lock when they are
// unlocked and older than StaleTempAge. A record that cannot be parsed
// makes Get and Allocate fail naming the file; Release then finds that
// attachment's claims with the only scan of addrs/ in the package, frees
// them and drops the record, so DEL always converges.
//
// Writes are fsynced (file, then directory) like the rest of the state
// directory, although only power loss, not a plugin crash, needs that. On the
// tmpfs the state directory normally lives on, fsync costs nothing; on a
// disk-backed directory it dominates the cost of an allocation.
package ipam
