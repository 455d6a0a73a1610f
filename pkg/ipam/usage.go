package ipam

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
)

// BlockUsage is how one block of an Allocator is used by automatic
// allocation: the addresses it can hand out (the tracked ones, less the
// reserved) and how many of those are claimed.
type BlockUsage struct {
	Block  netip.Prefix
	Usable uint64
	Used   uint64
}

// Free is how many more addresses automatic allocation can hand out of the
// block.
func (u BlockUsage) Free() uint64 { return u.Usable - u.Used }

// Usage returns the use of every block, in the Allocator's order. It reads
// the claim directory's names without the lock: a claim appears and
// vanishes atomically, so the answer is a snapshot as of the read, and a
// plugin's allocation is never delayed by it. An address a plugin with
// other Options.Reserved would hand out counts as this Allocator sees it.
func (a *Allocator) Usage() ([]BlockUsage, error) {
	dir := a.sub(addrsSubdir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ipam: usage: %w", err)
	}
	out := make([]BlockUsage, len(a.blocks))
	maps := make([]*blockMap, len(a.blocks))
	for i, b := range a.blocks {
		m := &blockMap{block: b, size: trackedSize(b)}
		a.markReserved(m)
		maps[i] = m
		out[i] = BlockUsage{Block: b, Usable: m.size - m.reservedCount()}
	}
	for _, e := range entries {
		addr, err := netip.ParseAddr(e.Name())
		if err != nil {
			continue // temp files
		}
		for i, m := range maps {
			if off, ok := m.offset(addr); ok && !m.reserved(off) {
				out[i].Used++
				break
			}
		}
	}
	return out, nil
}

// reservedCount is how many of m's tracked offsets are reserved.
func (m *blockMap) reservedCount() uint64 {
	offs := map[uint64]bool{0: true, m.size - 1: m.reserved(m.size - 1)}
	for off := range m.extra {
		offs[off] = true
	}
	n := uint64(0)
	for _, r := range offs {
		if r {
			n++
		}
	}
	return n
}

// ClaimedAddrs returns the addresses claimed in the IPAM directory dir
// (whatever its blocks), sorted, read without the lock as Usage is; a
// directory not created yet holds none. The daemon reads it at start to
// know which blocks its pods use before the datastore names its blocks.
func ClaimedAddrs(dir string) ([]netip.Addr, error) {
	entries, err := os.ReadDir(filepath.Join(dir, addrsSubdir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ipam: claimed addresses: %w", err)
	}
	var out []netip.Addr
	for _, e := range entries {
		if a, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}
