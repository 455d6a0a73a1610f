package ipset

import (
	"errors"
	"net/netip"
)

// ErrNotExist is returned (wrapped) by a Kernel when the named set does not
// exist.
var ErrNotExist = errors.New("set does not exist")

// ErrTypeMismatch is returned (wrapped) by Kernel.Swap when the two sets
// differ in type or family, which the kernel refuses to swap.
var ErrTypeMismatch = errors.New("sets differ in type or family")

// ErrReferenced is returned (wrapped) by Kernel.Destroy and Kernel.Rename
// when an iptables rule still uses the set.
var ErrReferenced = errors.New("set is referenced by a rule")

// Info is what the kernel holds for one set.
type Info struct {
	Name    string
	Type    string // e.g. "hash:net"
	Family  Family
	Members []netip.Prefix
}

// Kernel is the narrow seam between Sets and the kernel's ipset subsystem.
// Every method is safe to repeat: Add of a present member and Del of an
// absent one succeed; Destroy of a missing set succeeds or returns
// ErrNotExist (older kernels), which callers treat as success.
type Kernel interface {
	// List returns the set called name with its members, or ErrNotExist.
	List(name string) (Info, error)
	// ListNames returns the names of every set in the namespace.
	ListNames() ([]string, error)
	// Create makes an empty hash:net set; it fails if name exists.
	Create(name string, family Family, maxElem uint32) error
	// Destroy removes the set called name.
	Destroy(name string) error
	// Add puts p into the set.
	Add(name string, p netip.Prefix) error
	// Del removes p from the set.
	Del(name string, p netip.Prefix) error
	// Swap exchanges the contents (and types) of two existing sets.
	Swap(a, b string) error
	// Rename gives set from the name to, which must not exist.
	Rename(from, to string) error
}
