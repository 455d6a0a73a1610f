package ipam

import (
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
