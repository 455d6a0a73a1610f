package ipam

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/state"
)

// durable makes every IPAM write fsync its file and directory, as the state
// directory's contract asks. Crash safety against a dying plugin does not
// depend on it (the page cache outlives the process; the ordering of link,
// rename and unlink is what protects), only resilience to power loss does.
const durable = true

// New returns an Allocator for blocks (at most one IPv4 and/or IPv6 block is
// used per family at a time, but several blocks per family may be given; they
// are tried in order). It creates dir (0700) when missing. Blocks must be
// valid, masked prefixes: the error names the bad one. An IPv4 block must have
// room for at least one usable address after the reserved ones.
func New(dir string, blocks []netip.Prefix, opts Options) (*Allocator, error) {
	if dir == "" {
		return nil, errors.New("ipam: empty directory")
	}
	if opts.LockTimeout < 0 {
		return nil, fmt.Errorf("ipam: negative lock timeout %s", opts.LockTimeout)
	}
	if err := validateBlocks(blocks); err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("ipam: create %s: %w", filepath.Dir(dir), err)
	}
	for _, d := range []string{dir, filepath.Join(dir, addrsSubdir), filepath.Join(dir, attachmentsSubdir), filepath.Join(dir, blocksSubdir)} {
		if err := state.EnsureDir(d); err != nil {
			return nil, fmt.Errorf("ipam: %w", err)
		}
	}
	a := &Allocator{dir: dir, blocks: slices.Clone(blocks), opts: opts, reserved: map[netip.Addr]bool{}}
	for _, r := range opts.Reserved {
		if !r.IsValid() {
			return nil, fmt.Errorf("ipam: invalid reserved address %q", r.String())
		}
		a.reserved[r.Unmap()] = true
	}
	return a, nil
}

// validateBlocks checks that every block is a valid, masked, plain IPv4 or
// IPv6 prefix with at least one usable address, and that no two overlap.
func validateBlocks(blocks []netip.Prefix) error {
	for i, b := range blocks {
		switch {
		case !b.IsValid():
			return fmt.Errorf("ipam: invalid block %q", b.String())
		case b.Addr().Is4In6() || b.Addr().Zone() != "":
			return fmt.Errorf("ipam: invalid block %s: use a plain IPv4 or IPv6 prefix", b)
		case b != b.Masked():
			return fmt.Errorf("ipam: invalid block %s: host bits set (did you mean %s?)", b, b.Masked())
		case b.Addr().Is4() && b.Bits() > 30:
			return fmt.Errorf("ipam: block %s too small: its first and last addresses are reserved, need /30 or larger", b)
		case b.Addr().Is6() && b.Bits() > 127:
			return fmt.Errorf("ipam: block %s too small: its first address is reserved, need /127 or larger", b)
		}
		for _, o := range blocks[:i] {
			if o.Overlaps(b) {
				return fmt.Errorf("ipam: blocks %s and %s overlap", o, b)
			}
		}
	}
	return nil
}

// validateAttachment checks both halves of the key before they become file names.
func validateAttachment(att Attachment) error {
	if err := state.ValidateContainerID(att.ContainerID); err != nil {
		return err
	}
	return state.ValidateIfName(att.IfName)
}

// family returns 4 or 6.
func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// blockOf returns the configured block containing addr.
func (a *Allocator) blockOf(addr netip.Addr) (netip.Prefix, bool) {
	for _, b := range a.blocks {
		if b.Contains(addr) {
			return b, true
		}
	}
	return netip.Prefix{}, false
}

// checkRequested validates requested addresses before anything is locked or
// written: each inside a block, not reserved, at most one per family.
func (a *Allocator) checkRequested(requested []netip.Addr) (map[int]Allocation, error) {
	byFamily := map[int]Allocation{}
	for _, r := range requested {
		if !r.IsValid() || r.Zone() != "" {
			return nil, fmt.Errorf("ipam: invalid requested address %q", r.String())
		}
		r = r.Unmap()
		b, ok := a.blockOf(r)
		if !ok {
			return nil, fmt.Errorf("ipam: requested address %s is not in any block (%s)", r, a.blocksString(family(r)))
		}
		if nodespace.Reserved(b, r) {
			return nil, fmt.Errorf("ipam: requested address %s is reserved in block %s (first and, for IPv4, last address)", r, b)
		}
		if a.reserved[r] {
			return nil, fmt.Errorf("ipam: requested address %s is reserved on this node (a tunnel address or a reserved address of the node's blocks)", r)
		}
		if prev, dup := byFamily[family(r)]; dup && prev.Addr != r {
			return nil, fmt.Errorf("ipam: requested addresses %s and %s: only one IPv%d address per attachment", prev.Addr, r, family(r))
		}
		byFamily[family(r)] = Allocation{Addr: r, Block: b}
	}
	return byFamily, nil
}

// hasFamily reports whether a block of family fam is configured.
func (a *Allocator) hasFamily(fam int) bool {
	return slices.ContainsFunc(a.blocks, func(b netip.Prefix) bool { return family(b.Addr()) == fam })
}

// blocksString lists the configured blocks of one family (0 = all).
func (a *Allocator) blocksString(fam int) string {
	var s []string
	for _, b := range a.blocks {
		if fam == 0 || family(b.Addr()) == fam {
			s = append(s, b.String())
		}
	}
	if len(s) == 0 {
		return "no IPv" + fmt.Sprint(fam) + " block"
	}
	return strings.Join(s, ", ")
}

// owned returns the allocations of rec that att really owns (its claim file
// names att), in record order.
func (a *Allocator) owned(att Attachment, rec *attachmentRecord) []Allocation {
	if rec == nil {
		return nil
	}
	var out []Allocation
	for _, al := range rec.Allocations {
		owner, found, err := a.readOwner(al.Addr)
		if err != nil {
			slog.Warn("ipam: unreadable claim, treating the address as taken", "addr", al.Addr, "err", err)
			continue
		}
		if found && owner == att {
			out = append(out, Allocation(al))
		}
	}
	return out
}

// sortAllocations orders IPv4 before IPv6, then by address.
func sortAllocations(allocs []Allocation) {
	slices.SortFunc(allocs, func(x, y Allocation) int {
		return cmp.Or(cmp.Compare(family(x.Addr), family(y.Addr)), x.Addr.Compare(y.Addr))
	})
}

// step is called after each durable step of Allocate and Release with the
// step's name; tests use it to simulate a crash there.
func (a *Allocator) step(name string) {
	if a.testHook != nil {
		a.testHook(name)
	}
}

// pick is an address chosen for an attachment, not yet claimed.
type pick struct {
	Allocation
	m   *blockMap // hint of the block, nil for an untracked address
	off uint64    // offset in m
	req bool      // requested by the caller: the cursor is not moved for it
}

// Allocate gives att one address per family that has a block (v4 and/or v6).
// requested, when non-empty, are specific addresses to use (the CNI "ips"
// capability); each must be inside a block and not reserved, else an error
// naming it; one held by another attachment yields ErrInUse (wrapped, naming
// it). Allocate is idempotent: if att already holds addresses they are returned
// unchanged. The block's first address (the node's tunnel address) and, for
// IPv4, its last (broadcast) are never handed out. Cost does not grow with the
// number of allocations already made (no directory scan per call). The steps
// and why they are safe are in doc.go.
func (a *Allocator) Allocate(ctx context.Context, att Attachment, requested []netip.Addr) ([]Allocation, error) {
	if err := validateAttachment(att); err != nil {
		return nil, fmt.Errorf("ipam: allocate: %w", err)
	}
	if len(a.blocks) == 0 {
		return nil, fmt.Errorf("ipam: allocate for %s/%s: no blocks configured", att.ContainerID, att.IfName)
	}
	want, err := a.checkRequested(requested)
	if err != nil {
		return nil, err
	}
	l, err := a.lock(ctx, "allocate", &att)
	if err != nil {
		return nil, err
	}
	defer l.unlock()

	rec, err := a.readAttachment(att)
	if err != nil {
		return nil, fmt.Errorf("ipam: allocate for %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	held := a.owned(att, rec)
	heldFam := map[int]Allocation{}
	for _, h := range held {
		if _, dup := heldFam[family(h.Addr)]; !dup {
			heldFam[family(h.Addr)] = h
		}
	}
	for fam, r := range want {
		if h, ok := heldFam[fam]; ok && h.Addr != r.Addr {
			return nil, fmt.Errorf("ipam: allocate %s for %s/%s: the attachment already holds %s", r.Addr, att.ContainerID, att.IfName, h.Addr)
		}
	}

	var picks []pick
	defer func() {
		for _, p := range picks {
			if p.m != nil {
				p.m.close()
			}
		}
	}()
	for _, fam := range []int{4, 6} {
		if _, ok := heldFam[fam]; ok {
			continue
		}
		if r, ok := want[fam]; ok {
			p, err := a.pickRequested(att, r)
			if err != nil {
				return nil, err
			}
			picks = append(picks, p)
			continue
		}
		if !a.hasFamily(fam) {
			continue
		}
		p, err := a.pickFree(fam)
		if err != nil {
			return nil, fmt.Errorf("ipam: allocate for %s/%s: %w", att.ContainerID, att.IfName, err)
		}
		picks = append(picks, p)
	}

	result := slices.Clone(held)
	for _, p := range picks {
		result = append(result, p.Allocation)
	}
	sortAllocations(result)
	if len(picks) == 0 {
		return result, nil
	}

	// Step 1: record the intent. From here on every claim of att is listed
	// in att's record, so Release and a retried Allocate can find it without
	// a scan.
	if err := a.writeAttachment(att, result); err != nil {
		return nil, fmt.Errorf("ipam: allocate for %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	a.step("intent")

	// Step 2: claim. The claim file is what makes an address taken.
	var claimed []pick
	for _, p := range picks {
		created, owner, err := a.claim(p.Addr, att)
		if err == nil && !created && owner != att {
			err = fmt.Errorf("allocate %s: %w by %s/%s", p.Addr, ErrInUse, owner.ContainerID, owner.IfName)
		}
		if err != nil {
			a.rollback(att, held, claimed)
			return nil, fmt.Errorf("ipam: allocate for %s/%s: %w", att.ContainerID, att.IfName, err)
		}
		claimed = append(claimed, p)
		a.step("claim")
		// Step 3: hints. Only after the claim exists (see blockMap).
		if p.m != nil {
			if err := p.m.set(p.off, true); err != nil {
				slog.Warn("ipam: block hint not updated", "addr", p.Addr, "err", err)
			}
			if !p.req {
				if err := p.m.setCursor(p.off); err != nil {
					slog.Warn("ipam: block cursor not updated", "block", p.Block, "err", err)
				}
			}
		}
		a.step("hint")
		slog.Debug("ipam: allocated", "addr", p.Addr, "block", p.Block, "containerID", att.ContainerID, "ifname", att.IfName)
	}
	return result, nil
}

// rollback undoes a failed Allocate: remove the claims made by this call
// (hint bit first) and restore att's record to what att held before.
func (a *Allocator) rollback(att Attachment, held []Allocation, claimed []pick) {
	for _, p := range claimed {
		if p.m != nil {
			_ = p.m.set(p.off, false)
		}
		if err := a.unclaim(p.Addr); err != nil {
			slog.Warn("ipam: rollback: claim not removed", "addr", p.Addr, "err", err)
		}
	}
	var err error
	if len(held) == 0 {
		err = a.removeAttachment(att)
	} else {
		err = a.writeAttachment(att, held)
	}
	if err != nil {
		slog.Warn("ipam: rollback: record not restored", "containerID", att.ContainerID, "ifname", att.IfName, "err", err)
	}
}

// pickRequested checks that a requested address is free (or already att's)
// and returns it as a pick.
func (a *Allocator) pickRequested(att Attachment, r Allocation) (pick, error) {
	owner, found, err := a.readOwner(r.Addr)
	if err != nil {
		return pick{}, fmt.Errorf("ipam: allocate %s for %s/%s: %w by an unknown owner (%v)", r.Addr, att.ContainerID, att.IfName, ErrInUse, err)
	}
	if found && owner != att {
		return pick{}, fmt.Errorf("ipam: allocate %s for %s/%s: %w by %s/%s", r.Addr, att.ContainerID, att.IfName, ErrInUse, owner.ContainerID, owner.IfName)
	}
	p := pick{Allocation: r, req: true}
	m, err := openBlockMap(a.sub(blocksSubdir), r.Block)
	if err != nil {
		return pick{}, fmt.Errorf("ipam: allocate %s for %s/%s: %w", r.Addr, att.ContainerID, att.IfName, err)
	}
	if off, ok := m.offset(r.Addr); ok {
		p.m, p.off = m, off
	} else {
		m.close()
	}
	return p, nil
}

// pickFree finds a free address in the first block of family fam that has
// one. The search starts after the block's cursor and walks the hint bitmap
// in memory; each candidate costs one lstat of its claim path. A candidate
// that turns out to be claimed (a stale hint) gets its bit set and the search
// goes on, so repairs are paid once. Only when the bitmap looks full is every
// set bit checked against its claim, before ErrExhausted is returned.
func (a *Allocator) pickFree(fam int) (pick, error) {
	for _, b := range a.blocks {
		if family(b.Addr()) != fam {
			continue
		}
		m, err := openBlockMap(a.sub(blocksSubdir), b)
		if err != nil {
			return pick{}, err
		}
		a.markReserved(m)
		off, ok, err := a.searchBlock(m)
		if err != nil {
			m.close()
			return pick{}, err
		}
		if ok {
			return pick{Allocation: Allocation{Addr: m.addr(off), Block: b}, m: m, off: off}, nil
		}
		m.close()
	}
	e := &ExhaustedError{Family: fam}
	for _, b := range a.blocks {
		if family(b.Addr()) == fam {
			e.Blocks = append(e.Blocks, b)
		}
	}
	return pick{}, e
}

// markReserved tells m which of its offsets hold Options.Reserved addresses.
func (a *Allocator) markReserved(m *blockMap) {
	for r := range a.reserved {
		if off, ok := m.offset(r); ok {
			if m.extra == nil {
				m.extra = map[uint64]bool{}
			}
			m.extra[off] = true
		}
	}
}

// searchBlock returns a free offset of m's block, repairing stale hints.
func (a *Allocator) searchBlock(m *blockMap) (uint64, bool, error) {
	from := m.cursor
	for {
		off, ok := m.nextClear(from)
		if !ok {
			break
		}
		taken, err := a.claimExists(m.addr(off))
		if err != nil {
			return 0, false, err
		}
		if !taken {
			return off, true, nil
		}
		if err := m.set(off, true); err != nil {
			return 0, false, err
		}
		from = off
	}
	// Looks full: re-check every set bit against its claim. This is the only
	// walk over the whole block, and it happens only at exhaustion.
	var free []uint64
	for off := uint64(0); off < m.size; off++ {
		if !m.isSet(off) || m.reserved(off) {
			continue
		}
		taken, err := a.claimExists(m.addr(off))
		if err != nil {
			return 0, false, err
		}
		if !taken {
			free = append(free, off)
		}
	}
	for _, off := range free {
		if err := m.set(off, false); err != nil {
			return 0, false, err
		}
	}
	if len(free) == 0 {
		return 0, false, nil
	}
	slog.Warn("ipam: block hint repaired", "block", m.block, "freed", len(free))
	return free[0], true, nil
}

// Release frees every address held by att. Releasing an attachment that holds
// nothing is success. The order of steps is in doc.go.
func (a *Allocator) Release(ctx context.Context, att Attachment) error {
	if err := validateAttachment(att); err != nil {
		return fmt.Errorf("ipam: release: %w", err)
	}
	l, err := a.lock(ctx, "release", &att)
	if err != nil {
		return err
	}
	defer l.unlock()

	rec, err := a.readAttachment(att)
	if err != nil {
		// A corrupt record cannot tell us which claims are att's. This
		// should never happen, so pay for one scan of the claims to find
		// them, then drop the record so DEL converges.
		slog.Warn("ipam: unreadable record, scanning claims to release", "containerID", att.ContainerID, "ifname", att.IfName, "err", err)
		rec, err = a.recordFromClaims(att)
		if err != nil {
			return fmt.Errorf("ipam: release %s/%s: %w", att.ContainerID, att.IfName, err)
		}
	}
	if rec == nil {
		return nil
	}
	var errs []error
	for _, al := range rec.Allocations {
		owner, found, err := a.readOwner(al.Addr)
		if err != nil {
			// Whose it is cannot be told: leave it taken (safe) rather
			// than fail every retry of this release.
			slog.Warn("ipam: unreadable claim left in place", "addr", al.Addr, "err", err)
			continue
		}
		if !found || owner != att {
			continue // never claimed (crashed Allocate) or someone else's now
		}
		// Hint bit first, claim second: a set bit must always have a claim.
		a.clearHint(Allocation(al))
		a.step("unhint")
		if err := a.unclaim(al.Addr); err != nil {
			errs = append(errs, err)
			continue
		}
		a.step("unclaim")
		slog.Debug("ipam: released", "addr", al.Addr, "containerID", att.ContainerID, "ifname", att.IfName)
	}
	if len(errs) > 0 {
		// Keep the record: it is how a retry finds the remaining claims.
		return fmt.Errorf("ipam: release %s/%s: %w", att.ContainerID, att.IfName, errors.Join(errs...))
	}
	if err := a.removeAttachment(att); err != nil {
		return fmt.Errorf("ipam: release %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	return nil
}

// clearHint clears al's bit in its block's hint, when there is one. A hint
// that cannot be updated is only logged: the bit then wrongly says "taken",
// which the re-check before ErrExhausted repairs, and the release goes on.
func (a *Allocator) clearHint(al Allocation) {
	if !al.Block.IsValid() {
		return // record rebuilt from claims for an address outside the blocks
	}
	m, err := openBlockMapIfExists(a.sub(blocksSubdir), al.Block)
	if err == nil && m != nil {
		if off, ok := m.offset(al.Addr); ok {
			err = m.set(off, false)
		}
		m.close()
	}
	if err != nil {
		slog.Warn("ipam: block hint not updated", "addr", al.Addr, "err", err)
	}
}

// Get returns att's current addresses (empty, nil error when none): the
// addresses of its record that its claims confirm.
func (a *Allocator) Get(ctx context.Context, att Attachment) ([]Allocation, error) {
	if err := validateAttachment(att); err != nil {
		return nil, fmt.Errorf("ipam: get: %w", err)
	}
	l, err := a.lock(ctx, "get", &att)
	if err != nil {
		return nil, err
	}
	defer l.unlock()
	rec, err := a.readAttachment(att)
	if err != nil {
		return nil, fmt.Errorf("ipam: get %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	held := a.owned(att, rec)
	sortAllocations(held)
	return held, nil
}

// List returns every attachment holding addresses (used by GC and leak
// collection) by reading every record (the GC path may scan). On the way it
// removes what dead writers left: temp files, and records that own no address.
func (a *Allocator) List(ctx context.Context) (map[Attachment][]Allocation, error) {
	l, err := a.lock(ctx, "list", nil)
	if err != nil {
		return nil, err
	}
	defer l.unlock()
	// List is the GC path, where a scan is expected: tidy up after crashed
	// writers on the way.
	a.sweepTemps(addrsSubdir)
	a.sweepTemps(attachmentsSubdir)
	dir := a.sub(attachmentsSubdir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ipam: list %s: %w", dir, err)
	}
	out := map[Attachment][]Allocation{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, attachmentExt) {
			continue
		}
		rec, err := a.loadAttachment(name, nil)
		if err != nil || rec == nil {
			if err != nil {
				slog.Warn("ipam: skipping unreadable record", "file", filepath.Join(dir, name), "err", err)
			}
			continue
		}
		att := Attachment{ContainerID: rec.ContainerID, IfName: rec.IfName}
		held := a.owned(att, rec)
		if len(held) == 0 {
			// The intent of an Allocate that died before claiming: under
			// the lock nothing is in flight, so it owns nothing and never
			// will. Dropping it keeps every invariant.
			if err := removeFile(dir, name); err != nil {
				slog.Warn("ipam: stale record not removed", "file", filepath.Join(dir, name), "err", err)
			}
			continue
		}
		sortAllocations(held)
		out[att] = held
	}
	return out, nil
}

// recordFromClaims rebuilds att's record from the claims that name att. It
// reads every claim: only for the rare repair of a corrupt record.
func (a *Allocator) recordFromClaims(att Attachment) (*attachmentRecord, error) {
	dir := a.sub(addrsSubdir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	rec := &attachmentRecord{Version: 1, ContainerID: att.ContainerID, IfName: att.IfName}
	for _, e := range entries {
		addr, err := netip.ParseAddr(e.Name())
		if err != nil {
			continue // temp files
		}
		if owner, found, err := a.readOwner(addr); err == nil && found && owner == att {
			b, _ := a.blockOf(addr)
			rec.Allocations = append(rec.Allocations, allocationJSON{Addr: addr, Block: b})
		}
	}
	return rec, nil
}

// sweepTemps removes the temp files a killed writer left in sub. It must run
// under the lock: every writer holds the lock while its temp file exists, so
// any temp file seen by the lock holder belongs to a dead process.
func (a *Allocator) sweepTemps(sub string) {
	dir := a.sub(sub)
	entries, err := os.ReadDir(dir)
	if err != nil {
		slog.Warn("ipam: cannot list for temp files", "dir", dir, "err", err)
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			if err := removeFile(dir, e.Name()); err != nil {
				slog.Warn("ipam: stale temp file not removed", "file", filepath.Join(dir, e.Name()), "err", err)
			}
		}
	}
}
