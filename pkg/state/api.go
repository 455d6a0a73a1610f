package state

// API CONTRACT (written by the lead; the implementer replaces the bodies and
// may split this file, but must keep every exported name and signature).

import (
	"errors"
	"time"
)

// DefaultDir is the state directory used when none is configured.
const DefaultDir = "/run/routelet"

// RecordVersion is the only record format version this package reads and writes.
const RecordVersion = 1

// ErrNotFound is returned by the Get/Read functions when the record does not exist.
var ErrNotFound = errors.New("record not found")

// Store is a handle on a state directory. It is safe for concurrent use by
// several goroutines and several processes (each write is an atomic rename).
type Store struct {
	root string
}

// Open returns a Store rooted at dir, creating dir, workloads/ and nodes/
// (0700) when missing. It refuses a root or subdirectory that is a symlink or
// not a directory, naming the path in the error.
func Open(dir string) (*Store, error) { return open(dir) }

// Root returns the state directory path.
func (s *Store) Root() string { return s.root }

// Workload is the record the plugin writes for each attachment.
type Workload struct {
	Version      int       `json:"version"`
	ContainerID  string    `json:"containerID"`
	IfName       string    `json:"ifName"`
	HostIface    string    `json:"hostIface"`
	Netns        string    `json:"netns"`
	IPs          []string  `json:"ips"` // CIDRs, e.g. "10.244.1.5/32", "fd00::5/128"
	ContainerMAC string    `json:"containerMAC"`
	PodNamespace string    `json:"podNamespace,omitempty"`
	PodName      string    `json:"podName,omitempty"`
	Network      string    `json:"network,omitempty"` // CNI network name
	Created      time.Time `json:"created"`
}

// PutWorkload validates w (container ID, ifname, IPs as CIDRs, host iface
// name) and writes it atomically, setting Version. It replaces an existing
// record for the same (containerID, ifName).
func (s *Store) PutWorkload(w *Workload) error { return s.putWorkload(w) }

// GetWorkload reads one record; ErrNotFound (wrapped) when absent.
func (s *Store) GetWorkload(containerID, ifName string) (*Workload, error) {
	return s.getWorkload(containerID, ifName)
}

// DeleteWorkload removes the record; a missing record is success.
func (s *Store) DeleteWorkload(containerID, ifName string) error {
	return s.deleteWorkload(containerID, ifName)
}

// ListWorkloads returns every readable record, sorted by file name. Records
// that cannot be read, parsed, validated or whose version is unknown are
// skipped and reported in bad (one error per file, naming the file); bad
// never stops the listing.
func (s *Store) ListWorkloads() (good []*Workload, bad []error) { return s.listWorkloads() }

// WorkloadsDir returns the directory holding workload records (for watchers).
func (s *Store) WorkloadsDir() string { return s.dir(workloadsSubdir) }

// Node is one node's record: what peers need to reach its pods.
type Node struct {
	Version    int       `json:"version"`
	Name       string    `json:"name"`
	HostIPv4   string    `json:"hostIPv4,omitempty"`
	HostIPv6   string    `json:"hostIPv6,omitempty"`
	Blocks     []string  `json:"blocks"`               // pod CIDRs owned by the node
	VTEPMAC    string    `json:"vtepMAC,omitempty"`    // VXLAN device MAC
	VTEPMACv6  string    `json:"vtepMACv6,omitempty"`  // vxlan-v6 device MAC
	TunnelIPv4 string    `json:"tunnelIPv4,omitempty"` // VXLAN/IPIP device address
	TunnelIPv6 string    `json:"tunnelIPv6,omitempty"` // vxlan-v6 device address
	Updated    time.Time `json:"updated"`
}

// PutNode validates and atomically writes a node record.
func (s *Store) PutNode(n *Node) error { return s.putNode(n) }

// GetNode reads one node record; ErrNotFound (wrapped) when absent.
func (s *Store) GetNode(name string) (*Node, error) { return s.getNode(name) }

// DeleteNode removes a node record; missing is success.
func (s *Store) DeleteNode(name string) error { return s.deleteNode(name) }

// ListNodes is ListWorkloads for node records.
func (s *Store) ListNodes() (good []*Node, bad []error) { return s.listNodes() }

// NodesDir returns the directory holding node records (for watchers).
func (s *Store) NodesDir() string { return s.dir(nodesSubdir) }

// DaemonStatus is <root>/daemon.json, written by routeletd and read by the
// plugin (MTU, blocks, route protocol, STATUS).
//
// RouteProtocol was added without a version bump: a file from an older
// daemon has none (0), which readers take as the default, 80.
type DaemonStatus struct {
	Version       int       `json:"version"`
	Ready         bool      `json:"ready"`
	Reason        string    `json:"reason,omitempty"` // why not ready
	PodMTU        int       `json:"podMTU,omitempty"`
	Blocks        []string  `json:"blocks,omitempty"`        // local blocks (CIDRs) for the built-in IPAM
	RouteProtocol int       `json:"routeProtocol,omitempty"` // protocol the daemon stamps on (and owns) routes; 0 = default 80
	DaemonVersion string    `json:"daemonVersion,omitempty"`
	LastSyncError string    `json:"lastSyncError,omitempty"`
	Updated       time.Time `json:"updated"`
}

// WriteDaemonStatus atomically writes daemon.json.
func (s *Store) WriteDaemonStatus(st *DaemonStatus) error { return s.writeDaemonStatus(st) }

// ReadDaemonStatus reads daemon.json; ErrNotFound (wrapped) when absent, a
// descriptive error when unreadable or of an unknown version.
func (s *Store) ReadDaemonStatus() (*DaemonStatus, error) { return s.readDaemonStatus() }

// ValidateContainerID checks id against the CNI spec's charset:
// ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$ and a sane length (≤ 256). The error names id.
func ValidateContainerID(id string) error { return validateContainerID(id) }

// ValidateIfName checks a Linux interface name: 1..15 bytes, not "." or "..",
// no '/', ':', whitespace or NUL. The error names the value.
func ValidateIfName(name string) error { return validateIfName(name) }

// ValidateNodeName checks a node name usable as a file name (DNS-1123-ish,
// ≤ 253 bytes, no '/', "..", NUL).
func ValidateNodeName(name string) error { return validateNodeName(name) }

// WriteFileAtomic writes data to dir/name through a temp file in dir, fsync,
// rename and directory fsync, with mode 0600. name must be a plain file name
// (no '/', not "." or ".."); an existing symlink at dir/name is replaced, never
// followed.
func WriteFileAtomic(dir, name string, data []byte) error { return writeFileAtomic(dir, name, data) }

// ReadFileNoFollow reads dir/name refusing symlinks (O_NOFOLLOW).
func ReadFileNoFollow(dir, name string) ([]byte, error) { return readFileNoFollow(dir, name) }
