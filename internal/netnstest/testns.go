package netnstest

import (
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestPrefix starts the names of the namespaces NewT creates; each name goes
// on with the test process's PID (see OwnedPrefix).
const TestPrefix = "routelet-t-"

// NS is a fresh network namespace owned by one test or benchmark, made by
// NewT. Everything in it is released in t.Cleanup.
type NS struct {
	NetNS  ns.NetNS        // the namespace: Path() for CNI_NETNS, Fd(), Do
	Name   string          // its name under RunDir, as `ip -n` takes it
	Handle *netlink.Handle // netlink sockets opened inside the namespace
}

// SkipUnlessRoot skips t unless the process runs as root; why says what the
// test needs the privilege for, e.g. "creates network namespaces". In a
// package whose TestMain is Privileged.Main it then fails t when the
// binaries Main built before the tests did not build.
func SkipUnlessRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + why)
	}
	if privilegedBuild.err != nil {
		t.Fatalf("build %v: %v", privilegedBuild.names, privilegedBuild.err)
	}
}

// CheckPing fails t (t.Errorf: the test goes on) unless one echo request
// from inside n to dst is answered within 3 s, naming n, dst and ping's
// output.
func CheckPing(t testing.TB, n ns.NetNS, dst string) {
	t.Helper()
	if _, err := ping(t.Context(), n, dst, 1, 3*time.Second, nil); err != nil {
		t.Error(err)
	}
}

var removeStaleOnce sync.Once

// NewT creates a network namespace for t with loopback up and a netlink
// handle bound to it, and skips t when not running as root. The handle is
// closed and the namespace unmounted and removed in t.Cleanup, also when the
// test fails; a failed removal is reported as a test error. The first call in
// a process removes namespaces that earlier, crashed test processes left
// behind (RemoveStale of TestPrefix).
func NewT(t testing.TB) *NS {
	t.Helper()
	SkipUnlessRoot(t, "creates network namespaces")
	removeStaleOnce.Do(func() {
		if removed, err := RemoveStale(TestPrefix); err != nil {
			t.Logf("remove stale test namespaces: %v", err)
		} else if len(removed) > 0 {
			t.Logf("removed stale test namespaces %v", removed)
		}
	})
	n := NewFor(t, OwnedPrefix(TestPrefix))
	return &NS{NetNS: n, Name: Name(n), Handle: HandleFor(t, n)}
}

// NewFor creates a namespace named prefix followed by random hex digits
// (New) for t and removes it in t.Cleanup. A failed creation fails t; a
// failed removal is a test error.
func NewFor(t testing.TB, prefix string) ns.NetNS {
	t.Helper()
	n, err := New(prefix)
	return forTest(t, n, err)
}

// NewNamedFor is NewFor with the whole name given (NewNamed).
func NewNamedFor(t testing.TB, name string) ns.NetNS {
	t.Helper()
	n, err := NewNamed(name)
	return forTest(t, n, err)
}

// forTest fails t when the namespace could not be made (err); otherwise it
// removes n when t ends, reporting a failed removal as a test error.
func forTest(t testing.TB, n ns.NetNS, err error) ns.NetNS {
	t.Helper()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() {
		if err := Remove(n); err != nil {
			t.Errorf("%v", err)
		}
	})
	return n
}

// HandleFor returns a netlink handle whose sockets are opened inside n,
// closed in t.Cleanup. n's descriptor is only needed to open them and stays
// owned by n.
func HandleFor(t testing.TB, n ns.NetNS) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(n.Fd()))
	if err != nil {
		t.Fatalf("netlink handle in netns %s: %v", Name(n), err)
	}
	t.Cleanup(h.Close)
	return h
}

// SkipUnlessInstalled skips t unless every tool is on PATH, naming the
// missing one and debs, the Debian packages that have the tools (e.g.
// "ipset, iptables").
func SkipUnlessInstalled(t testing.TB, debs string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (Debian packages %s): %v", tool, debs, err)
		}
	}
}

// Do runs f on an OS thread locked inside the namespace. Processes that f
// starts inherit the namespace.
func (n *NS) Do(f func() error) error {
	return n.NetNS.Do(func(ns.NetNS) error { return f() })
}
