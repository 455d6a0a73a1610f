package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	workloadsSubdir = "workloads"
	nodesSubdir     = "nodes"
	daemonFile      = "daemon.json"
	recordExt       = ".json"
)

// Open returns a Store rooted at dir, creating dir, workloads/ and nodes/
// (0700) when missing. It refuses a root or subdirectory that is a symlink or
// not a directory, naming the path in the error.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open state directory: empty path")
	}
	root := filepath.Clean(dir)
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return nil, fmt.Errorf("create state directory %s: %w", root, err)
		}
	}
	if err := checkDir(root); err != nil {
		return nil, fmt.Errorf("open state directory: %w", err)
	}
	s := &Store{root: root}
	for _, sub := range []string{workloadsSubdir, nodesSubdir} {
		if err := EnsureDir(s.dir(sub)); err != nil {
			return nil, fmt.Errorf("open state directory: %w", err)
		}
	}
	return s, nil
}

// dir returns the path of a subdirectory of the root.
func (s *Store) dir(sub string) string { return filepath.Join(s.root, sub) }

// marshal encodes a record the way every record file looks on disk.
func marshal(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// readRecord reads and decodes dir/name into v, checking the version field.
// A missing file yields an error wrapping ErrNotFound.
func readRecord(dir, name string, v any, version func() int) error {
	data, err := ReadFileNoFollow(dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", filepath.Join(dir, name), ErrNotFound)
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		if !json.Valid(data) {
			return fmt.Errorf("parse %s: %w (%d bytes): %w", filepath.Join(dir, name), ErrCorrupt, len(data), err)
		}
		return fmt.Errorf("parse %s: %w", filepath.Join(dir, name), err)
	}
	if got := version(); got != RecordVersion {
		return fmt.Errorf("parse %s: %w %d (want %d)", filepath.Join(dir, name), ErrUnknownVersion, got, RecordVersion)
	}
	return nil
}

// listRecords reads every record file in dir in name order. Dotfiles (temp
// files of writers, possibly crashed) and names without the record extension
// are not records and are ignored silently; everything else that fails to
// load is reported in bad and skipped.
func listRecords[T any](dir string, load func(name string) (*T, error)) (good []*T, bad []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{fmt.Errorf("list %s: %w", dir, err)}
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, recordExt) {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rec, err := load(n)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		good = append(good, rec)
	}
	return good, bad
}

// workloadFile is the record file name of an attachment.
func workloadFile(containerID, ifName string) string {
	return AttachmentName(containerID, ifName) + recordExt
}

// PutWorkload validates w (container ID, ifname, IPs as CIDRs, host iface
// name) and writes it atomically, setting Version. It replaces an existing
// record for the same (containerID, ifName).
func (s *Store) PutWorkload(w *Workload) error {
	if w == nil {
		return errors.New("put workload: nil record")
	}
	if err := w.validate(); err != nil {
		return fmt.Errorf("put workload: %w", err)
	}
	if other := s.otherOwner(w.ContainerID, w.IfName); other != nil {
		return fmt.Errorf("put workload %s/%s: %s already holds the record of %s/%s (file names collide)",
			w.ContainerID, w.IfName, filepath.Join(s.dir(workloadsSubdir), workloadFile(w.ContainerID, w.IfName)), other.ContainerID, other.IfName)
	}
	w.Version = RecordVersion
	data, err := marshal(w)
	if err != nil {
		return fmt.Errorf("put workload %s/%s: %w", w.ContainerID, w.IfName, err)
	}
	return WriteFileAtomic(s.dir(workloadsSubdir), workloadFile(w.ContainerID, w.IfName), data)
}

// otherOwner returns the record in the file of (containerID, ifName) when
// it describes a different attachment. File names are
// "<containerID>_<ifName>" and both parts may contain '_', so ("a", "b_c")
// and ("a_b", "c") share one file; each must leave the other's alone.
func (s *Store) otherOwner(containerID, ifName string) *Workload {
	w, err := s.loadWorkload(workloadFile(containerID, ifName))
	if err != nil || (w.ContainerID == containerID && w.IfName == ifName) {
		return nil
	}
	return w
}

// loadWorkload reads the record in file name and checks that it is valid and
// really belongs under that name.
func (s *Store) loadWorkload(name string) (*Workload, error) {
	dir := s.dir(workloadsSubdir)
	w := &Workload{}
	if err := readRecord(dir, name, w, func() int { return w.Version }); err != nil {
		return nil, err
	}
	return checkWorkload(dir, name, w)
}

// decodeWorkload is loadWorkload for a file already read into data.
func (s *Store) decodeWorkload(dir, name string, data []byte) (*Workload, error) {
	w := &Workload{}
	if err := json.Unmarshal(data, w); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, name), err)
	}
	if w.Version != RecordVersion {
		return nil, fmt.Errorf("parse %s: %w %d (want %d)", filepath.Join(dir, name), ErrUnknownVersion, w.Version, RecordVersion)
	}
	return checkWorkload(dir, name, w)
}

// checkWorkload validates w, read from file name of dir, and checks that it
// belongs under that name.
func checkWorkload(dir, name string, w *Workload) (*Workload, error) {
	if err := w.validate(); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, name), err)
	}
	if want := workloadFile(w.ContainerID, w.IfName); want != name {
		return nil, fmt.Errorf("parse %s: record for %s/%s belongs in %s", filepath.Join(dir, name), w.ContainerID, w.IfName, want)
	}
	return w, nil
}

// WorkloadFile reads the record in file name of workloads/ (one read):
// validated, and it must belong under that name. ErrNotFound (wrapped)
// when absent.
func (s *Store) WorkloadFile(name string) (*Workload, error) {
	if err := validateFileName(name); err != nil {
		return nil, fmt.Errorf("get workload: %w", err)
	}
	return s.loadWorkload(name)
}

// GetWorkload reads one record; ErrNotFound (wrapped) when absent. The names
// are validated before any path is built.
func (s *Store) GetWorkload(containerID, ifName string) (*Workload, error) {
	if err := ValidateContainerID(containerID); err != nil {
		return nil, fmt.Errorf("get workload: %w", err)
	}
	if err := ValidateIfName(ifName); err != nil {
		return nil, fmt.Errorf("get workload: %w", err)
	}
	w, err := s.loadWorkload(workloadFile(containerID, ifName))
	if err != nil {
		return nil, err
	}
	if w.ContainerID != containerID || w.IfName != ifName {
		return nil, fmt.Errorf("%s holds the record of %s/%s: %w", filepath.Join(s.dir(workloadsSubdir), workloadFile(containerID, ifName)), w.ContainerID, w.IfName, ErrNotFound)
	}
	return w, nil
}

// DeleteWorkload removes the record; a missing record is success.
func (s *Store) DeleteWorkload(containerID, ifName string) error {
	if err := ValidateContainerID(containerID); err != nil {
		return fmt.Errorf("delete workload: %w", err)
	}
	if err := ValidateIfName(ifName); err != nil {
		return fmt.Errorf("delete workload: %w", err)
	}
	if s.otherOwner(containerID, ifName) != nil {
		return nil // the file is another attachment's; ours is gone
	}
	return removeFile(s.dir(workloadsSubdir), workloadFile(containerID, ifName))
}

// ListWorkloads returns every readable record, sorted by file name. Records
// that cannot be read, parsed, validated or whose version is unknown are
// skipped and reported in bad (one error per file, naming the file); bad
// never stops the listing.
func (s *Store) ListWorkloads() (good []*Workload, bad []error) {
	return listRecords(s.dir(workloadsSubdir), s.loadWorkload)
}

// WorkloadsWithHostIface returns the valid records whose HostIface is name,
// in file name order: what ListWorkloads would give, filtered, but only the
// files whose bytes hold name as a JSON string are decoded (each file read
// with one openat, fstat and read: see dirScan). Records are
// written with encoding/json, which writes the characters of a valid
// interface name as they are, so a record naming it always holds that
// string. Files that cannot be read or decoded are skipped.
func (s *Store) WorkloadsWithHostIface(name string) []*Workload {
	if name == "" {
		return nil
	}
	dir := s.dir(workloadsSubdir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	scan, err := openDirScan(dir)
	if err != nil {
		return nil
	}
	defer scan.Close()
	needle := []byte(`"` + name + `"`)
	var out []*Workload
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, recordExt) {
			continue
		}
		data, err := scan.read(n)
		if err != nil || !bytes.Contains(data, needle) {
			continue
		}
		w, err := s.decodeWorkload(dir, n, data)
		if err == nil && w.HostIface == name {
			out = append(out, w)
		}
	}
	return out
}

// PutNode validates and atomically writes a node record.
func (s *Store) PutNode(n *Node) error {
	if n == nil {
		return errors.New("put node: nil record")
	}
	if err := n.validate(); err != nil {
		return fmt.Errorf("put node: %w", err)
	}
	n.Version = RecordVersion
	data, err := marshal(n)
	if err != nil {
		return fmt.Errorf("put node %s: %w", n.Name, err)
	}
	return WriteFileAtomic(s.dir(nodesSubdir), n.Name+recordExt, data)
}

// loadNode reads the node record in file name and checks it belongs there.
func (s *Store) loadNode(name string) (*Node, error) {
	dir := s.dir(nodesSubdir)
	n := &Node{}
	if err := readRecord(dir, name, n, func() int { return n.Version }); err != nil {
		return nil, err
	}
	if err := n.validate(); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, name), err)
	}
	if want := n.Name + recordExt; want != name {
		return nil, fmt.Errorf("parse %s: record for node %s belongs in %s", filepath.Join(dir, name), n.Name, want)
	}
	return n, nil
}

// GetNode reads one node record; ErrNotFound (wrapped) when absent.
func (s *Store) GetNode(name string) (*Node, error) {
	if err := ValidateNodeName(name); err != nil {
		return nil, fmt.Errorf("get node: %w", err)
	}
	return s.loadNode(name + recordExt)
}

// DeleteNode removes a node record; missing is success.
func (s *Store) DeleteNode(name string) error {
	if err := ValidateNodeName(name); err != nil {
		return fmt.Errorf("delete node: %w", err)
	}
	return removeFile(s.dir(nodesSubdir), name+recordExt)
}

// ListNodes is ListWorkloads for node records.
func (s *Store) ListNodes() (good []*Node, bad []error) {
	return listRecords(s.dir(nodesSubdir), s.loadNode)
}

// WriteDaemonStatus atomically writes daemon.json.
func (s *Store) WriteDaemonStatus(st *DaemonStatus) error {
	if st == nil {
		return errors.New("write daemon status: nil record")
	}
	if err := st.validate(); err != nil {
		return fmt.Errorf("write daemon status: %w", err)
	}
	st.Version = RecordVersion
	data, err := marshal(st)
	if err != nil {
		return fmt.Errorf("write daemon status: %w", err)
	}
	return WriteFileAtomic(s.root, daemonFile, data)
}

// ReadDaemonStatus reads daemon.json; ErrNotFound (wrapped) when absent, a
// descriptive error when unreadable or of an unknown version.
func (s *Store) ReadDaemonStatus() (*DaemonStatus, error) {
	st := &DaemonStatus{}
	if err := readRecord(s.root, daemonFile, st, func() int { return st.Version }); err != nil {
		return nil, err
	}
	if err := st.validate(); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(s.root, daemonFile), err)
	}
	return st, nil
}
