package ipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxTracked bounds the bitmap: automatic allocation uses at most the first
// 65536 addresses of a block (a /16, or the start of a huge IPv6 block), which
// keeps the hint file at 8 KiB at most. Requested addresses may lie anywhere
// in the block.
const maxTracked = 1 << 16

// bitmapMagic starts every block hint file; a file with another header or
// size is rebuilt as "all free" (safe: see blockMap).
var bitmapMagic = [8]byte{'r', 'l', 'i', 'p', 'a', 'm', '1', '\n'}

const bitmapHeader = 16 // magic, then the cursor as a little-endian uint64

// blockMap is the per-block allocation hint in <dir>/blocks/<block>: one bit
// per tracked offset (set = believed allocated) and a cursor (the offset
// handed out last, so the search continues after it, like host-local, and a
// released address is not reused at once).
//
// The bitmap is a hint, never the truth; the claim files in addrs/ are. It
// keeps one invariant that makes it safe: a set bit always has a claim file
// (bits are set only after the claim exists and cleared before the claim is
// removed). So a clear bit may be stale (a crash between claim and bit
// update, or blocks that changed) and is repaired when the search trips over
// the existing claim, but a free address is never hidden behind a set bit
// except after a power loss on a disk-backed state dir, which the full
// re-check before reporting exhaustion repairs.
type blockMap struct {
	f      *os.File
	block  netip.Prefix
	size   uint64 // tracked offsets
	cursor uint64
	bits   []byte
	extra  map[uint64]bool // further reserved offsets (Options.Reserved)
}

// blockFileName maps a prefix to a file name: "10.244.1.0_26", "fd00::_122".
func blockFileName(p netip.Prefix) string {
	return strings.ReplaceAll(p.String(), "/", "_")
}

// trackedSize returns how many offsets of block the bitmap covers.
func trackedSize(block netip.Prefix) uint64 {
	hostBits := block.Addr().BitLen() - block.Bits()
	if hostBits >= 16 {
		return maxTracked
	}
	return 1 << hostBits
}

// openBlockMap opens (creating or rebuilding when needed) the hint file of block.
func openBlockMap(dir string, block netip.Prefix) (*blockMap, error) {
	path := filepath.Join(dir, blockFileName(block))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open block map %s: %w", path, err)
	}
	m := &blockMap{f: f, block: block, size: trackedSize(block)}
	buf := make([]byte, bitmapHeader+int(m.size+7)/8+1) // +1 detects a too-long file
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("read block map %s: %w", path, err)
	}
	if n != len(buf)-1 || [8]byte(buf[:8]) != bitmapMagic {
		// Missing, truncated or foreign: start from "all free"; the claim
		// files repair it as the search meets them.
		buf = buf[:len(buf)-1]
		clear(buf)
		copy(buf, bitmapMagic[:])
		if _, err := f.WriteAt(buf, 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("init block map %s: %w", path, err)
		}
		if err := f.Truncate(int64(len(buf))); err != nil {
			f.Close()
			return nil, fmt.Errorf("init block map %s: %w", path, err)
		}
	}
	m.cursor = binary.LittleEndian.Uint64(buf[8:16])
	if m.cursor >= m.size {
		m.cursor = 0
	}
	m.bits = buf[bitmapHeader : bitmapHeader+int(m.size+7)/8]
	return m, nil
}

// openBlockMapIfExists is openBlockMap without creating the file (Release
// must not create hints for blocks that are gone).
func openBlockMapIfExists(dir string, block netip.Prefix) (*blockMap, error) {
	if _, err := os.Lstat(filepath.Join(dir, blockFileName(block))); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return openBlockMap(dir, block)
}

// close closes the hint file.
func (m *blockMap) close() { _ = m.f.Close() }

// reserved reports whether offset off is never handed out: the first address
// (the node's tunnel address), for IPv4 the last (broadcast), and any
// address the Allocator reserves in addition.
func (m *blockMap) reserved(off uint64) bool {
	if off == 0 || m.extra[off] {
		return true
	}
	return m.block.Addr().Is4() && off == m.size-1 && trackedSize(m.block) == uint64(1)<<(32-m.block.Bits())
}

// isSet reports whether off is believed allocated.
func (m *blockMap) isSet(off uint64) bool { return m.bits[off/8]&(1<<(off%8)) != 0 }

// set updates one bit in memory and on disk (a one-byte pwrite, atomic with
// respect to a crash of this process).
func (m *blockMap) set(off uint64, v bool) error {
	if off >= m.size {
		return nil
	}
	b := m.bits[off/8]
	if v {
		b |= 1 << (off % 8)
	} else {
		b &^= 1 << (off % 8)
	}
	if b == m.bits[off/8] {
		return nil
	}
	m.bits[off/8] = b
	if _, err := m.f.WriteAt([]byte{b}, int64(bitmapHeader+off/8)); err != nil {
		return fmt.Errorf("update block map %s: %w", m.f.Name(), err)
	}
	return nil
}

// setCursor records the offset handed out last.
func (m *blockMap) setCursor(off uint64) error {
	m.cursor = off
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], off)
	if _, err := m.f.WriteAt(b[:], 8); err != nil {
		return fmt.Errorf("update block map %s: %w", m.f.Name(), err)
	}
	return nil
}

// nextClear returns the first offset after from (wrapping around, from
// itself included last) whose bit is clear and that is not reserved. Full
// bytes are skipped eight offsets at a time, so even a /16 is a few
// microseconds of memory scanning; ok is false when every bit is set.
func (m *blockMap) nextClear(from uint64) (off uint64, ok bool) {
	for i := uint64(1); i <= m.size; {
		off = (from + i) % m.size
		if off%8 == 0 && m.bits[off/8] == 0xff && i+8 <= m.size {
			i += 8
			continue
		}
		if !m.isSet(off) && !m.reserved(off) {
			return off, true
		}
		i++
	}
	return 0, false
}

// offset returns addr's offset in the block and whether the bitmap tracks it.
func (m *blockMap) offset(addr netip.Addr) (uint64, bool) {
	return offsetIn(m.block, addr, m.size)
}

// addr returns the address at offset off.
func (m *blockMap) addr(off uint64) netip.Addr { return addrAt(m.block, off) }

// offsetIn returns addr's offset from the start of block when it is below limit.
func offsetIn(block netip.Prefix, addr netip.Addr, limit uint64) (uint64, bool) {
	if !block.Contains(addr) {
		return 0, false
	}
	a, b := addr.As16(), block.Addr().As16()
	for i := 0; i < 8; i++ {
		if a[i] != b[i] {
			return 0, false
		}
	}
	off := binary.BigEndian.Uint64(a[8:]) - binary.BigEndian.Uint64(b[8:])
	return off, off < limit
}

// addrAt returns the address off places after the start of block. The block
// start is masked, so adding an in-block offset never carries past its host
// bits.
func addrAt(block netip.Prefix, off uint64) netip.Addr {
	b := block.Addr().As16()
	binary.BigEndian.PutUint64(b[8:], binary.BigEndian.Uint64(b[8:])+off)
	a := netip.AddrFrom16(b)
	if block.Addr().Is4() {
		return a.Unmap()
	}
	return a
}
