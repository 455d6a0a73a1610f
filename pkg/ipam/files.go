package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/pkg/state"
)

const (
	addrsSubdir       = "addrs"
	attachmentsSubdir = "attachments"
	blocksSubdir      = "blocks"
	attachmentExt     = ".json"
	tempPrefix        = ".tmp-"
)

// attachmentRecord is <dir>/attachments/<containerID>_<ifname>.json: the
// addresses an attachment holds or is about to claim. It is written before the
// claims (an intent), so it may list an address the attachment does not own;
// ownership is always decided by the claim file.
type attachmentRecord struct {
	Version     int              `json:"version"`
	ContainerID string           `json:"containerID"`
	IfName      string           `json:"ifName"`
	Allocations []allocationJSON `json:"allocations"`
}

type allocationJSON struct {
	Addr  netip.Addr   `json:"addr"`
	Block netip.Prefix `json:"block"`
}

// sub returns the path of a subdirectory of the IPAM directory.
func (a *Allocator) sub(name string) string { return filepath.Join(a.dir, name) }

// attachmentFile is the record file name of att (shared naming with pkg/state).
func attachmentFile(att Attachment) string {
	return state.AttachmentName(att.ContainerID, att.IfName) + attachmentExt
}

// readAttachment loads att's record; nil, nil when there is none.
func (a *Allocator) readAttachment(att Attachment) (*attachmentRecord, error) {
	return a.loadAttachment(attachmentFile(att), &att)
}

// loadAttachment parses the record in file name; want, when given, is the
// attachment the file must describe.
func (a *Allocator) loadAttachment(name string, want *Attachment) (*attachmentRecord, error) {
	dir := a.sub(attachmentsSubdir)
	data, err := state.ReadFileNoFollow(dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec := &attachmentRecord{}
	path := filepath.Join(dir, name)
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, fmt.Errorf("parse ipam record %s: %w", path, err)
	}
	if rec.Version != state.RecordVersion {
		return nil, fmt.Errorf("parse ipam record %s: unknown version %d", path, rec.Version)
	}
	got := Attachment{ContainerID: rec.ContainerID, IfName: rec.IfName}
	if err := validateAttachment(got); err != nil {
		return nil, fmt.Errorf("parse ipam record %s: %w", path, err)
	}
	for _, al := range rec.Allocations {
		if !al.Addr.IsValid() || al.Block.IsValid() && !al.Block.Contains(al.Addr) {
			return nil, fmt.Errorf("parse ipam record %s: bad allocation %s in %s", path, al.Addr, al.Block)
		}
	}
	if attachmentFile(got) != name || want != nil && got != *want {
		return nil, fmt.Errorf("parse ipam record %s: describes %s/%s", path, got.ContainerID, got.IfName)
	}
	return rec, nil
}

// writeAttachment atomically replaces att's record with allocs.
func (a *Allocator) writeAttachment(att Attachment, allocs []Allocation) error {
	rec := attachmentRecord{Version: state.RecordVersion, ContainerID: att.ContainerID, IfName: att.IfName}
	for _, al := range allocs {
		rec.Allocations = append(rec.Allocations, allocationJSON(al))
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode ipam record for %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	return writeFile(a.sub(attachmentsSubdir), attachmentFile(att), append(data, '\n'))
}

// RecordTime returns when att's allocation record was last written (by the
// Allocate that gave it addresses); found is false when att has none. GC uses
// it to tell an allocation orphaned by a killed ADD from one in progress. The
// time is the mtime of att's record file (lstat, never following a symlink).
func (a *Allocator) RecordTime(att Attachment) (t time.Time, found bool, err error) {
	if err := validateAttachment(att); err != nil {
		return time.Time{}, false, fmt.Errorf("ipam: record time: %w", err)
	}
	fi, err := os.Lstat(filepath.Join(a.sub(attachmentsSubdir), attachmentFile(att)))
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("ipam: record time of %s/%s: %w", att.ContainerID, att.IfName, err)
	}
	return fi.ModTime(), true, nil
}

// removeAttachment deletes att's record; a missing one is success. A record
// in att's file that describes another attachment (the names of ("a", "b_c")
// and ("a_b", "c") collide) is that attachment's and is left alone; an
// unreadable one is removed.
func (a *Allocator) removeAttachment(att Attachment) error {
	if rec, err := a.loadAttachment(attachmentFile(att), nil); err == nil && rec != nil &&
		(Attachment{ContainerID: rec.ContainerID, IfName: rec.IfName}) != att {
		return nil
	}
	return removeFile(a.sub(attachmentsSubdir), attachmentFile(att))
}

// claimName is the claim file name of addr ("10.244.1.5", "fd00::5").
func claimName(addr netip.Addr) string { return addr.String() }

// readOwner returns the attachment named in addr's claim file. found is
// false when there is no claim. A claim that cannot be read or parsed is
// reported as an error: the address is then treated as taken by an unknown
// owner, never as free.
func (a *Allocator) readOwner(addr netip.Addr) (owner Attachment, found bool, err error) {
	a.lookups.Add(1)
	data, err := state.ReadFileNoFollow(a.sub(addrsSubdir), claimName(addr))
	if errors.Is(err, fs.ErrNotExist) {
		return Attachment{}, false, nil
	}
	if err != nil {
		return Attachment{}, true, err
	}
	id, ifName, _ := strings.Cut(strings.TrimSuffix(string(data), "\n"), "\n")
	owner = Attachment{ContainerID: id, IfName: ifName}
	if err := validateAttachment(owner); err != nil {
		return Attachment{}, true, fmt.Errorf("claim %s: %w", filepath.Join(a.sub(addrsSubdir), claimName(addr)), err)
	}
	return owner, true, nil
}

// claimExists reports whether addr has a claim file (one lstat).
func (a *Allocator) claimExists(addr netip.Addr) (bool, error) {
	a.lookups.Add(1)
	_, err := os.Lstat(filepath.Join(a.sub(addrsSubdir), claimName(addr)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("check claim of %s: %w", addr, err)
	}
	return true, nil
}

// claim makes att the owner of addr. The claim file gets its full content
// before it appears under its name (write a temp file, then link(2) it into
// place; link fails if the name exists), so no reader or crash ever sees an
// empty or half-written claim and two claimers can never both succeed. When
// the address is already claimed, claim returns the existing owner and
// created=false.
func (a *Allocator) claim(addr netip.Addr, att Attachment) (created bool, owner Attachment, err error) {
	dir := a.sub(addrsSubdir)
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return false, Attachment{}, fmt.Errorf("claim %s: %w", addr, err)
	}
	// Locked until it is unlinked, as every writer's temp file, so the
	// daemon's collection of killed writers' temp files never takes it.
	_ = unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	defer func() {
		_ = os.Remove(tmp.Name())
		_ = tmp.Close()
	}()
	_, err = tmp.WriteString(att.ContainerID + "\n" + att.IfName + "\n")
	if err == nil && durable {
		err = tmp.Sync()
	}
	if err != nil {
		return false, Attachment{}, fmt.Errorf("claim %s: %w", addr, err)
	}
	err = os.Link(tmp.Name(), filepath.Join(dir, claimName(addr)))
	if errors.Is(err, fs.ErrExist) {
		owner, _, rerr := a.readOwner(addr)
		return false, owner, rerr
	}
	if err != nil {
		return false, Attachment{}, fmt.Errorf("claim %s: %w", addr, err)
	}
	if durable {
		if err := state.SyncDir(dir); err != nil {
			return true, att, err
		}
	}
	return true, att, nil
}

// unclaim removes addr's claim file; a missing one is success.
func (a *Allocator) unclaim(addr netip.Addr) error {
	return removeFile(a.sub(addrsSubdir), claimName(addr))
}

// writeFile is state.WriteFileAtomic, or its fsync-free twin when durable
// is off.
func writeFile(dir, name string, data []byte) error {
	if durable {
		return state.WriteFileAtomic(dir, name, data)
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	_ = unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB) // as state.WriteFileAtomic: held until the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// removeFile unlinks dir/name (never following a symlink); missing is success.
func removeFile(dir, name string) error {
	path := filepath.Join(dir, name)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	} else if err != nil {
		return nil
	}
	if durable {
		return state.SyncDir(dir)
	}
	return nil
}
