package cleanup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
	"github.com/routelet/routelet/pkg/wireguard"
)

// ErrNotStateDir marks a state directory cleanup refuses to touch: a
// symlink, not a directory, or a directory holding nothing routelet wrote.
var ErrNotStateDir = errors.New("not a routelet state directory")

// lockName is the daemon's lock in the state directory (daemon/instance).
const lockName = "routeletd.lock"

// maxRead bounds what cleanup reads of one file to recognise it; routelet's
// records are far smaller, so a larger file is not one of them.
const maxRead = 1 << 20

// entry is one thing in the state directory cleanup recognises as
// routelet's: dirfd and name locate it (removed with unlinkat, which never
// follows a link).
type entry struct {
	path string
	dir  int // the open directory holding it
	name string
	// sub: a directory of routelet's, removed after its contents (and only
	// when nothing else is left in it).
	sub bool
	// marker: only routelet writes this (a record, a lock, daemon.json),
	// so its presence makes the directory routelet's.
	marker bool
}

// plan is what cleanup found in a state directory: what it may remove, in
// removal order (contents before their directory), and what it leaves.
type plan struct {
	remove []entry
	leave  []string // paths, with why
	fds    []int
}

func (p *plan) close() {
	for _, fd := range p.fds {
		unix.Close(fd)
	}
	p.fds = nil
}

func (p *plan) marked() bool {
	for _, e := range p.remove {
		if e.marker {
			return true
		}
	}
	return false
}

// CheckStateDir makes sure dir is something cleanup may empty: a real
// directory (not a symlink) holding at least one thing only routelet
// writes — routeletd.lock, daemon.json or peer-claims.json in routelet's
// format, ipam/lock, or a workload or node record. A missing dir is fine
// (there is nothing to remove). Nothing is created or removed.
func CheckStateDir(dir string) error {
	p, err := scanStateDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	p.close()
	return nil
}

// scanStateDir opens dir without following a link and lists what in it
// is routelet's. The error wraps fs.ErrNotExist when dir does not exist and
// ErrNotStateDir when it is no routelet state directory.
func scanStateDir(dir string) (*plan, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("cleanup: state directory: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("cleanup: state directory %s is a symlink, refusing to follow it: %w", dir, ErrNotStateDir)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("cleanup: state directory %s is not a directory (mode %s): %w", dir, fi.Mode(), ErrNotStateDir)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("cleanup: state directory %s is no longer a directory: %w", dir, ErrNotStateDir)
		}
		return nil, fmt.Errorf("cleanup: open state directory %s: %w", dir, err)
	}
	p, err := scanAt(fd, dir)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	if !p.marked() {
		p.close()
		return nil, fmt.Errorf("cleanup: %s holds no routeletd.lock, daemon.json, peer-claims.json, ipam/lock or workload or node record, so routelet did not make it; refusing to remove anything from it: %w",
			dir, ErrNotStateDir)
	}
	return p, nil
}

// scanAt lists what is routelet's in the state directory open as rootfd
// (which stays the caller's).
func scanAt(rootfd int, dir string) (*plan, error) {
	fd, err := unix.Dup(rootfd)
	if err != nil {
		return nil, fmt.Errorf("cleanup: %s: %w", dir, err)
	}
	p := &plan{fds: []int{fd}}
	if err := p.scanRoot(fd, dir); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// root is the state directory's descriptor.
func (p *plan) root() int { return p.fds[0] }

// kind of a directory entry, read without following it.
func kind(dirfd int, name string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, err
	}
	return st.Mode & unix.S_IFMT, nil
}

// names lists the directory open as fd (the fd itself stays open, its
// offset untouched: the listing reads a new open of the same directory).
func names(fd int, path string) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cleanup: read %s: %w", path, err)
	}
	f := os.NewFile(uintptr(dup), path)
	defer f.Close()
	ns, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("cleanup: read %s: %w", path, err)
	}
	return ns, nil
}

// openSub opens the subdirectory name of dirfd, never through a link; ok
// false (and the entry left, with why) when it is not a real directory.
func (p *plan) openSub(dirfd int, dir, name string) (int, bool) {
	path := filepath.Join(dir, name)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		p.leave = append(p.leave, fmt.Sprintf("%s (not a directory routelet made: %v)", path, err))
		return -1, false
	}
	p.fds = append(p.fds, fd)
	return fd, true
}

// readRegular reads the regular file name of dirfd (never through a link,
// never blocking on a FIFO), at most maxRead bytes; ok false when it is
// not a regular file or larger.
func readRegular(dirfd int, name string) ([]byte, bool) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxRead {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRead+1))
	if err != nil || len(data) > maxRead {
		return nil, false
	}
	return data, true
}

// isTemp: a writer's temp file, ".tmp-" and digits (os.CreateTemp's
// pattern as pkg/state and pkg/ipam use it), a regular file.
func isTemp(dirfd int, name string) bool {
	digits, ok := strings.CutPrefix(name, ".tmp-")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	k, err := kind(dirfd, name)
	return err == nil && k == unix.S_IFREG
}

// hasFields reports whether data is one JSON object with a numeric
// "version" of at least 1 and a non-empty string in each of keys: the
// shape of every routelet record.
func hasFields(data []byte, keys ...string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return false
	}
	var v int
	if json.Unmarshal(m["version"], &v) != nil || v < 1 {
		return false
	}
	for _, k := range keys {
		var s string
		if json.Unmarshal(m[k], &s) != nil || s == "" {
			return false
		}
	}
	return true
}

// firstHasVersion: the file starts with a JSON object carrying "version"
// (peer-claims.json: a ledger, then appended lines).
func firstHasVersion(data []byte) bool {
	var first json.RawMessage
	if json.NewDecoder(bytes.NewReader(data)).Decode(&first) != nil {
		return false
	}
	return hasFields(first)
}

func (p *plan) add(dirfd int, dir, name string, marker bool) {
	p.remove = append(p.remove, entry{path: filepath.Join(dir, name), dir: dirfd, name: name, marker: marker})
}

func (p *plan) unknown(dir, name string) {
	p.leave = append(p.leave, filepath.Join(dir, name))
}

// scanRoot sorts the state directory's own entries.
func (p *plan) scanRoot(fd int, dir string) error {
	ns, err := names(fd, dir)
	if err != nil {
		return err
	}
	for _, n := range ns {
		switch {
		case n == "workloads":
			p.scanRecords(fd, dir, n, "containerID", "ifName")
		case n == "nodes":
			p.scanRecords(fd, dir, n, "name")
		case n == "ipam":
			p.scanIPAM(fd, dir)
		case n == wireguard.KeyDir:
			p.scanWireGuard(fd, dir)
		case n == "daemon.json":
			if data, ok := readRegular(fd, n); ok && hasFields(data) {
				p.add(fd, dir, n, true)
			} else {
				p.unknown(dir, n)
			}
		case n == peers.LedgerFile:
			if data, ok := readRegular(fd, n); ok && firstHasVersion(data) {
				p.add(fd, dir, n, true)
			} else {
				p.unknown(dir, n)
			}
		case n == lockName:
			if k, err := kind(fd, n); err == nil && k == unix.S_IFREG {
				p.add(fd, dir, n, true)
			} else {
				p.unknown(dir, n)
			}
		case n == statusapi.SocketName:
			if k, err := kind(fd, n); err == nil && k == unix.S_IFSOCK {
				p.add(fd, dir, n, false)
			} else {
				p.unknown(dir, n)
			}
		case isTemp(fd, n):
			p.add(fd, dir, n, false)
		default:
			p.unknown(dir, n)
		}
	}
	return nil
}

// scanRecords sorts a record directory (workloads/, nodes/): records in
// routelet's format (JSON with "version" and keys) and temp files go; a
// record is a marker.
func (p *plan) scanRecords(parent int, dir, name string, keys ...string) {
	p.scanFiles(parent, dir, name, true, func(n string, data []byte) bool {
		return strings.HasSuffix(n, ".json") && hasFields(data, keys...)
	})
}

// scanIPAM sorts ipam/ by its layout (pkg/ipam/doc.go): lock, addrs/
// (claims: an address, "containerID\nifname\n"), attachments/ (records),
// blocks/ (hints starting with the bitmap magic), veth-locks/ (the
// plugin's per-veth locks), and temp files in each.
func (p *plan) scanIPAM(parent int, dir string) {
	fd, ok := p.openSub(parent, dir, "ipam")
	if !ok {
		return
	}
	ipamDir := filepath.Join(dir, "ipam")
	ns, err := names(fd, ipamDir)
	if err != nil {
		p.leave = append(p.leave, fmt.Sprintf("%s (%v)", ipamDir, err))
		return
	}
	for _, n := range ns {
		switch n {
		case "lock":
			if k, err := kind(fd, n); err == nil && k == unix.S_IFREG {
				p.add(fd, ipamDir, n, true)
			} else {
				p.unknown(ipamDir, n)
			}
		case "addrs":
			p.scanFiles(fd, ipamDir, n, false, isClaim)
		case "attachments":
			p.scanFiles(fd, ipamDir, n, false, func(name string, data []byte) bool {
				return strings.HasSuffix(name, ".json") && hasFields(data, "containerID", "ifName")
			})
		case "blocks":
			p.scanFiles(fd, ipamDir, n, false, isBlockHint)
		case "veth-locks":
			p.scanFiles(fd, ipamDir, n, false, func(name string, _ []byte) bool { return state.ValidateIfName(name) == nil })
		default:
			if isTemp(fd, n) {
				p.add(fd, ipamDir, n, false)
			} else {
				p.unknown(ipamDir, n)
			}
		}
	}
	p.remove = append(p.remove, entry{path: ipamDir, dir: parent, name: "ipam", sub: true})
}

// scanFiles sorts one directory: regular files that ours accepts (given
// their name and content) and temp files go; marker says whether one of
// ours marks the directory as routelet's.
func (p *plan) scanFiles(parent int, dir, name string, marker bool, ours func(name string, data []byte) bool) {
	p.scanDir(parent, dir, name, marker, ours, nil)
}

// scanDir is scanFiles where, besides, a regular file whose name byName
// (when not nil) accepts is ours whatever it holds and however large.
func (p *plan) scanDir(parent int, dir, name string, marker bool, ours func(name string, data []byte) bool, byName func(name string) bool) {
	fd, ok := p.openSub(parent, dir, name)
	if !ok {
		return
	}
	sub := filepath.Join(dir, name)
	ns, err := names(fd, sub)
	if err != nil {
		p.leave = append(p.leave, fmt.Sprintf("%s (%v)", sub, err))
		return
	}
	for _, n := range ns {
		if isTemp(fd, n) {
			p.add(fd, sub, n, false)
			continue
		}
		if byName != nil && byName(n) {
			if k, err := kind(fd, n); err == nil && k == unix.S_IFREG {
				p.add(fd, sub, n, marker)
				continue
			}
		}
		if data, ok := readRegular(fd, n); ok && ours(n, data) {
			p.add(fd, sub, n, marker)
			continue
		}
		p.unknown(sub, n)
	}
	p.remove = append(p.remove, entry{path: sub, dir: parent, name: name, sub: true})
}

// isClaim: addrs/<address> holding "containerID\nifname\n".
func isClaim(name string, data []byte) bool {
	if _, err := netip.ParseAddr(name); err != nil {
		return false
	}
	lines := strings.Split(string(data), "\n")
	return len(lines) == 3 && lines[2] == "" &&
		state.ValidateContainerID(lines[0]) == nil && state.ValidateIfName(lines[1]) == nil
}

// bitmapMagic starts every block hint file (pkg/ipam/bitmap.go).
var bitmapMagic = []byte("rlipam1\n")

// isBlockHint: blocks/<block with '/' as '_'> starting with the magic.
func isBlockHint(name string, data []byte) bool {
	if _, err := netip.ParsePrefix(strings.Replace(name, "_", "/", 1)); err != nil {
		return false
	}
	return bytes.HasPrefix(data, bitmapMagic)
}

// removeState removes what p found routelet's, each through its
// directory's descriptor without following a link, then the directories
// it emptied; what it leaves (foreign files, and so the directories that
// hold them) is logged by the caller. When it leaves anything it keeps
// routeletd.lock too, so the directory stays recognisably routelet's and
// a second cleanup does not refuse it.
func (p *plan) removeState(rep *Report) (left []string, err error) {
	var errs []error
	for _, e := range p.remove {
		if len(p.leave) > 0 && e.dir == p.root() && e.name == lockName {
			continue
		}
		flags := 0
		if e.sub {
			flags = unix.AT_REMOVEDIR
		}
		switch err := unix.Unlinkat(e.dir, e.name, flags); {
		case err == nil:
			rep.Paths = append(rep.Paths, e.path)
		case errors.Is(err, unix.ENOENT):
		case e.sub && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)):
			// holds something cleanup left: already reported
		default:
			errs = append(errs, fmt.Errorf("cleanup: remove %s: %w", e.path, err))
		}
	}
	return p.leave, errors.Join(errs...)
}
