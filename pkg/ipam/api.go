package ipam

// API CONTRACT (written by the lead; the implementer replaces the bodies and
// may split this file, but must keep every exported name and signature).

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultLockTimeout bounds how long Allocate/Release wait for the IPAM lock.
const DefaultLockTimeout = 10 * time.Second

// ErrExhausted: no free address left in any block of the needed family.
var ErrExhausted = errors.New("no free address")

// ErrInUse: a specifically requested address is held by another attachment.
var ErrInUse = errors.New("address already allocated")

// LockTimeoutError is returned when the lock could not be taken in time.
// Holder describes the last known holder (pid, containerID, since), or "" when
// unknown. The plugin maps it to CNI code 11 (try again later).
type LockTimeoutError struct {
	Path   string
	Waited time.Duration
	Holder string
}

// Error says which lock was busy, for how long, and who held it if known.
func (e *LockTimeoutError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("ipam lock %s busy after %s", e.Path, e.Waited)
	}
	return fmt.Sprintf("ipam lock %s busy after %s (held by %s)", e.Path, e.Waited, e.Holder)
}

// Attachment identifies one CNI attachment: the allocation key.
type Attachment struct {
	ContainerID string
	IfName      string
}

// Allocation is one address handed to an attachment, with the block it came from.
type Allocation struct {
	Addr  netip.Addr
	Block netip.Prefix
}

// ExhaustedError is returned when no block of a family has a free address.
// errors.Is(err, ErrExhausted) holds for it.
type ExhaustedError struct {
	Family int            // 4 or 6
	Blocks []netip.Prefix // the blocks of that family that were searched
}

// Error names the full block or blocks.
func (e *ExhaustedError) Error() string {
	if len(e.Blocks) == 1 {
		return fmt.Sprintf("no addresses left in block %s", e.Blocks[0])
	}
	s := make([]string, len(e.Blocks))
	for i, b := range e.Blocks {
		s[i] = b.String()
	}
	return fmt.Sprintf("no addresses left in IPv%d blocks %s", e.Family, strings.Join(s, ", "))
}

// Is makes errors.Is(err, ErrExhausted) true.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// Options tune an Allocator.
type Options struct {
	LockTimeout time.Duration // 0 = DefaultLockTimeout
	// Reserved are addresses never handed out and refused when requested,
	// in addition to each block's own reserved ones: e.g. the node's tunnel
	// address and the reserved addresses of the daemon's blocks when the
	// configured blocks are wider than those.
	Reserved []netip.Addr
}

// Allocator is node-local block IPAM over a directory (normally
// <stateDir>/ipam). Several processes may use the same directory at once: every
// operation takes an exclusive flock on <dir>/lock.
type Allocator struct {
	dir      string
	blocks   []netip.Prefix
	opts     Options
	reserved map[netip.Addr]bool // opts.Reserved

	// testHook, when set, is called after each step of Allocate and
	// Release (see step); tests use it to stop at a chosen point.
	testHook func(step string)
	// lookups counts claim lookups (lstat or read of addrs/<addr>), so
	// tests can check that allocation cost does not grow with the fill.
	lookups atomic.Int64
}

// New returns an Allocator for blocks (at most one IPv4 and/or IPv6 block is
// used per family at a time, but several blocks per family may be given; they
// are tried in order). It creates dir (0700) when missing. Blocks must be
// valid, masked prefixes: the error names the bad one. An IPv4 block must have
// room for at least one usable address after the reserved ones.
func New(dir string, blocks []netip.Prefix, opts Options) (*Allocator, error) {
	return newAllocator(dir, blocks, opts)
}

// Allocate gives att one address per family that has a block (v4 and/or v6).
// requested, when non-empty, are specific addresses to use (the CNI "ips"
// capability); each must be inside a block and not reserved, else an error
// naming it; one held by another attachment yields ErrInUse (wrapped, naming
// it). Allocate is idempotent: if att already holds addresses they are returned
// unchanged. The block's first address (the node's tunnel address) and, for
// IPv4, its last (broadcast) are never handed out. Cost does not grow with the
// number of allocations already made (no directory scan per call).
func (a *Allocator) Allocate(ctx context.Context, att Attachment, requested []netip.Addr) ([]Allocation, error) {
	return a.allocate(ctx, att, requested)
}

// Release frees every address held by att. Releasing an attachment that holds
// nothing is success.
func (a *Allocator) Release(ctx context.Context, att Attachment) error { return a.release(ctx, att) }

// Get returns att's current addresses (empty, nil error when none).
func (a *Allocator) Get(ctx context.Context, att Attachment) ([]Allocation, error) {
	return a.get(ctx, att)
}

// List returns every attachment holding addresses (used by GC and leak collection).
func (a *Allocator) List(ctx context.Context) (map[Attachment][]Allocation, error) {
	return a.list(ctx)
}

// RecordTime returns when att's allocation record was last written (by the
// Allocate that gave it addresses); found is false when att has none. GC uses
// it to tell an allocation orphaned by a killed ADD from one in progress.
func (a *Allocator) RecordTime(att Attachment) (t time.Time, found bool, err error) {
	return a.recordTime(att)
}
