package state

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/filetest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func workload(id, ifName string) *Workload {
	return &Workload{
		ContainerID:  id,
		IfName:       ifName,
		HostIface:    "cali0123456789a",
		Netns:        "/var/run/netns/" + id,
		IPs:          []string{"10.244.1.5/32", "fd00::5/128"},
		ContainerMAC: "0a:58:0a:f4:01:05",
		PodNamespace: "default",
		PodName:      "web-0",
		Network:      "k8s-pod-network",
		Created:      time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
	}
}

func TestWorkloadRoundTrip(t *testing.T) {
	s := openTemp(t)
	w := workload("abc123", "eth0")
	if err := s.PutWorkload(w); err != nil {
		t.Fatalf("PutWorkload: %v", err)
	}
	if w.Version != RecordVersion {
		t.Errorf("PutWorkload left Version=%d, want %d", w.Version, RecordVersion)
	}
	got, err := s.GetWorkload("abc123", "eth0")
	if err != nil {
		t.Fatalf("GetWorkload: %v", err)
	}
	if fmt.Sprint(*got) != fmt.Sprint(*w) {
		t.Errorf("GetWorkload = %+v, want %+v", *got, *w)
	}
	data, err := os.ReadFile(filepath.Join(s.WorkloadsDir(), "abc123_eth0.json"))
	if err != nil {
		t.Fatalf("record not at the documented path: %v", err)
	}
	if !strings.Contains(string(data), `"version": 1`) {
		t.Errorf("record lacks \"version\": 1:\n%s", data)
	}

	// Replacing keeps one record with the new content.
	w.IPs = []string{"10.244.1.6/32"}
	if err := s.PutWorkload(w); err != nil {
		t.Fatalf("PutWorkload (replace): %v", err)
	}
	good, bad := s.ListWorkloads()
	if len(bad) != 0 || len(good) != 1 || good[0].IPs[0] != "10.244.1.6/32" {
		t.Fatalf("ListWorkloads after replace = %v, bad %v", good, bad)
	}
}

func TestLongContainerIDGetsHashedName(t *testing.T) {
	s := openTemp(t)
	id := strings.Repeat("a", 256)
	w := workload(id, "eth0")
	if err := s.PutWorkload(w); err != nil {
		t.Fatalf("PutWorkload with 256-byte ID: %v", err)
	}
	got, err := s.GetWorkload(id, "eth0")
	if err != nil || got.ContainerID != id {
		t.Fatalf("GetWorkload = %v, %v", got, err)
	}
	good, bad := s.ListWorkloads()
	if len(good) != 1 || len(bad) != 0 {
		t.Fatalf("ListWorkloads = %d good, bad %v", len(good), bad)
	}
}

func TestDeleteIsIdempotent(t *testing.T) {
	s := openTemp(t)
	if err := s.PutWorkload(workload("abc", "eth0")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.DeleteWorkload("abc", "eth0"); err != nil {
			t.Fatalf("DeleteWorkload #%d: %v", i+1, err)
		}
	}
	if _, err := s.GetWorkload("abc", "eth0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetWorkload after delete: err = %v, want ErrNotFound", err)
	}
	if err := s.DeleteNode("never-existed"); err != nil {
		t.Fatalf("DeleteNode of a missing node: %v", err)
	}
}

func TestListSkipsBadRecords(t *testing.T) {
	s := openTemp(t)
	for _, id := range []string{"a1", "c3"} {
		if err := s.PutWorkload(workload(id, "eth0")); err != nil {
			t.Fatal(err)
		}
	}
	dir := s.WorkloadsDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("b2_eth0.json", "{not json")
	future := strings.Replace(mustRead(t, filepath.Join(dir, "a1_eth0.json")), `"version": 1`, `"version": 2`, 1)
	write("d4_eth0.json", strings.ReplaceAll(future, "a1", "d4"))
	invalid := strings.ReplaceAll(mustRead(t, filepath.Join(dir, "a1_eth0.json")), "10.244.1.5/32", "10.244.1.500/32")
	write("e5_eth0.json", strings.ReplaceAll(invalid, "a1", "e5"))
	write("f6_eth0.json", mustRead(t, filepath.Join(dir, "a1_eth0.json"))) // a1's record under f6's name
	// A symlink to a valid record must not be followed.
	target := filepath.Join(t.TempDir(), "elsewhere.json")
	write("README.txt", "not a record")
	if err := os.WriteFile(target, []byte(strings.ReplaceAll(mustRead(t, filepath.Join(dir, "a1_eth0.json")), "a1", "g7")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "g7_eth0.json")); err != nil {
		t.Fatal(err)
	}
	// A temp file left by a crashed writer is not a record at all.
	write(".tmp-123456", "{partial")

	good, bad := s.ListWorkloads()
	var ids []string
	for _, w := range good {
		ids = append(ids, w.ContainerID)
	}
	if strings.Join(ids, ",") != "a1,c3" {
		t.Errorf("good records = %v, want [a1 c3]", ids)
	}
	wantBad := []string{"b2_eth0.json", "d4_eth0.json", "e5_eth0.json", "f6_eth0.json", "g7_eth0.json"}
	if len(bad) != len(wantBad) {
		t.Fatalf("bad = %v, want one error for each of %v", bad, wantBad)
	}
	for i, name := range wantBad {
		if !strings.Contains(bad[i].Error(), name) {
			t.Errorf("bad[%d] = %q, want it to name %s", i, bad[i], name)
		}
	}
	for _, want := range []string{"unknown record version 2", "symlink", "10.244.1.500/32", "belongs in"} {
		found := false
		for _, e := range bad {
			found = found || strings.Contains(e.Error(), want)
		}
		if !found {
			t.Errorf("no bad-record error mentions %q: %v", want, bad)
		}
	}
	if _, err := s.GetWorkload("g7", "eth0"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("GetWorkload through a symlink: err = %v, want a symlink refusal", err)
	}
	// What a reader may repair (no JSON at all) and what it must leave to
	// the release that wrote it (another version) are told apart.
	write("h8_eth0.json", "")
	for name, want := range map[string]error{"b2_eth0.json": ErrCorrupt, "h8_eth0.json": ErrCorrupt, "d4_eth0.json": ErrUnknownVersion,
		"e5_eth0.json": nil, "f6_eth0.json": nil} {
		_, err := s.WorkloadFile(name)
		for _, sentinel := range []error{ErrCorrupt, ErrUnknownVersion} {
			if errors.Is(err, sentinel) != (sentinel == want) {
				t.Errorf("%s: %v; is %v: %v", name, err, sentinel, errors.Is(err, sentinel))
			}
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestWriteReplacesPlantedSymlink(t *testing.T) {
	s := openTemp(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(s.WorkloadsDir(), "abc_eth0.json")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := s.PutWorkload(workload("abc", "eth0")); err != nil {
		t.Fatalf("PutWorkload over a symlink: %v", err)
	}
	if got := mustRead(t, victim); got != "precious" {
		t.Errorf("symlink target was written through: %q", got)
	}
	fi, err := os.Lstat(link)
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("record path after write: %v, %v; want a regular file", fi, err)
	}
}

func TestPermissions(t *testing.T) {
	old := setUmask(0)
	defer setUmask(old)
	s := openTemp(t)
	if err := s.PutWorkload(workload("abc", "eth0")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutNode(&Node{Name: "node-1", Blocks: []string{"10.244.1.0/26"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteDaemonStatus(&DaemonStatus{Ready: true, PodMTU: 1450}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		s.Root():         0o700 | os.ModeDir,
		s.WorkloadsDir(): 0o700 | os.ModeDir,
		s.NodesDir():     0o700 | os.ModeDir,
		filepath.Join(s.WorkloadsDir(), "abc_eth0.json"): 0o600,
		filepath.Join(s.NodesDir(), "node-1.json"):       0o600,
		filepath.Join(s.Root(), "daemon.json"):           0o600,
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %s, want %s", path, fi.Mode(), want)
		}
	}
}

func TestOpenRefusesSymlinkedDirs(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(base, "link")); err == nil || !strings.Contains(err.Error(), "link") {
		t.Errorf("Open(symlink) err = %v, want a refusal naming the path", err)
	}
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(root, "nodes")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root); err == nil || !strings.Contains(err.Error(), "nodes") {
		t.Errorf("Open with nodes/ a symlink: err = %v, want a refusal naming nodes", err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Open(file) err = %v, want not a directory", err)
	}
}

func TestBadNames(t *testing.T) {
	s := openTemp(t)
	for _, tc := range []struct {
		id, ifName string
		want       string // substring of the error: the bad value
	}{
		{"", "eth0", `""`},
		{"-abc", "eth0", `"-abc"`},
		{"../etc", "eth0", `"../etc"`},
		{"a/b", "eth0", `"a/b"`},
		{"a\x00b", "eth0", `"a\x00b"`},
		{"a b", "eth0", `"a b"`},
		{strings.Repeat("a", 257), "eth0", "longer than 256"},
		{"abc", "", `""`},
		{"abc", "eth0123456789012", `"eth0123456789012"`},
		{"abc", "..", `".."`},
		{"abc", ".", `"."`},
		{"abc", "eth/0", `"eth/0"`},
		{"abc", "eth:0", `"eth:0"`},
		{"abc", "eth 0", `"eth 0"`},
		{"abc", "eth\x000", `"eth\x000"`},
	} {
		w := workload(tc.id, tc.ifName)
		for op, err := range map[string]error{
			"PutWorkload":    s.PutWorkload(w),
			"DeleteWorkload": s.DeleteWorkload(tc.id, tc.ifName),
			"GetWorkload":    func() error { _, err := s.GetWorkload(tc.id, tc.ifName); return err }(),
		} {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s(%q, %q) err = %v, want it to contain %s", op, tc.id, tc.ifName, err, tc.want)
			}
		}
	}
	for _, name := range []string{"", "..", "a..b", "a/b", "-node", "node-", "no_de", "a\x00", strings.Repeat("n", 254)} {
		if err := s.PutNode(&Node{Name: name}); err == nil {
			t.Errorf("PutNode(%q) succeeded, want an error", name)
		}
	}
	for _, name := range []string{"n", "node-1", "ip-10-0-0-1.eu-west-1.compute.internal", "Host1"} {
		if err := ValidateNodeName(name); err != nil {
			t.Errorf("ValidateNodeName(%q) = %v, want nil", name, err)
		}
	}
	ents, err := os.ReadDir(s.WorkloadsDir())
	if err != nil || len(ents) != 0 {
		t.Errorf("workloads dir after bad names: %v, %v; want empty", ents, err)
	}
}

func TestBadFields(t *testing.T) {
	s := openTemp(t)
	for name, mutate := range map[string]func(*Workload){
		"bad CIDR":       func(w *Workload) { w.IPs = []string{"10.0.0.1"} },
		"bad MAC":        func(w *Workload) { w.ContainerMAC = "zz:zz" },
		"bad host iface": func(w *Workload) { w.HostIface = "" },
	} {
		w := workload("abc", "eth0")
		mutate(w)
		if err := s.PutWorkload(w); err == nil {
			t.Errorf("%s: PutWorkload succeeded", name)
		}
	}
	for name, n := range map[string]*Node{
		"v6 as v4":  {Name: "n", HostIPv4: "fd00::1"},
		"v4 as v6":  {Name: "n", HostIPv6: "10.0.0.1"},
		"bad block": {Name: "n", Blocks: []string{"10.0.0.0/33"}},
		"bad MAC":   {Name: "n", VTEPMAC: "nope"},
	} {
		if err := s.PutNode(n); err == nil {
			t.Errorf("%s: PutNode succeeded", name)
		}
	}
}

// TestDaemonStatusRouteProtocol: the route protocol round-trips, a file
// written before the field existed reads as 0 (the default), and a kernel
// protocol (0–4 except unset) or one beyond a byte is refused both ways.
func TestDaemonStatusRouteProtocol(t *testing.T) {
	s := openTemp(t)
	if err := s.WriteDaemonStatus(&DaemonStatus{Ready: true, RouteProtocol: 81}); err != nil {
		t.Fatal(err)
	}
	st, err := s.ReadDaemonStatus()
	if err != nil || st.RouteProtocol != 81 {
		t.Fatalf("ReadDaemonStatus = %+v, %v; want routeProtocol 81", st, err)
	}
	path := filepath.Join(s.Root(), "daemon.json")
	if err := os.WriteFile(path, []byte(`{"version": 1, "ready": true, "podMTU": 1450}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := s.ReadDaemonStatus(); err != nil || st.RouteProtocol != 0 {
		t.Errorf("older daemon.json: %+v, %v; want routeProtocol 0", st, err)
	}
	for _, p := range []int{3, 256, -1} {
		if err := s.WriteDaemonStatus(&DaemonStatus{RouteProtocol: p}); err == nil || !strings.Contains(err.Error(), "route protocol") {
			t.Errorf("write routeProtocol %d: err = %v, want one naming the route protocol", p, err)
		}
		if err := os.WriteFile(path, []byte(`{"version": 1, "routeProtocol": `+fmt.Sprint(p)+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadDaemonStatus(); err == nil || !strings.Contains(err.Error(), "route protocol") {
			t.Errorf("read routeProtocol %d: err = %v, want one naming the route protocol", p, err)
		}
	}
}

func TestNodeAndDaemonStatus(t *testing.T) {
	s := openTemp(t)
	if _, err := s.ReadDaemonStatus(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadDaemonStatus before write: %v, want ErrNotFound", err)
	}
	if err := s.WriteDaemonStatus(&DaemonStatus{Ready: true, PodMTU: 1450, Blocks: []string{"10.244.1.0/26"}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.ReadDaemonStatus()
	if err != nil || !st.Ready || st.PodMTU != 1450 || st.Blocks[0] != "10.244.1.0/26" {
		t.Fatalf("ReadDaemonStatus = %+v, %v", st, err)
	}
	if err := os.WriteFile(filepath.Join(s.Root(), "daemon.json"), []byte(`{"version": 7, "ready": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadDaemonStatus(); err == nil || !strings.Contains(err.Error(), "version 7") {
		t.Errorf("ReadDaemonStatus of version 7: err = %v", err)
	}

	n := &Node{Name: "node-1", HostIPv4: "192.0.2.10", Blocks: []string{"10.244.1.0/26"}, VTEPMAC: "66:00:00:00:00:01", TunnelIPv4: "10.244.1.0"}
	if err := s.PutNode(n); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.NodesDir(), "node-2.json"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	good, bad := s.ListNodes()
	if len(good) != 1 || good[0].Name != "node-1" || len(bad) != 1 || !strings.Contains(bad[0].Error(), "node-2.json") {
		t.Fatalf("ListNodes = %v, bad %v", good, bad)
	}
	got, err := s.GetNode("node-1")
	if err != nil || got.VTEPMAC != n.VTEPMAC {
		t.Fatalf("GetNode = %+v, %v", got, err)
	}
	if _, err := s.GetNode("node-3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetNode(missing) err = %v, want ErrNotFound", err)
	}
}

// Concurrent writers of one record never leave a torn file: every read sees
// one complete version, and at the end no temp file is left behind.
func TestConcurrentWriters(t *testing.T) {
	s := openTemp(t)
	const writers, rounds = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds*2)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				w := workload("shared", "eth0")
				w.PodName = fmt.Sprintf("writer-%d-%d", i, r)
				if err := s.PutWorkload(w); err != nil {
					errs <- err
				}
				// Distinct records from every writer as well.
				if err := s.PutWorkload(workload(fmt.Sprintf("w%d", i), fmt.Sprintf("eth%d", r%3))); err != nil {
					errs <- err
				}
				if got, err := s.GetWorkload("shared", "eth0"); err != nil || !strings.HasPrefix(got.PodName, "writer-") {
					errs <- fmt.Errorf("read during writes: %+v, %v", got, err)
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	good, bad := s.ListWorkloads()
	if len(good) != 1+writers*3 || len(bad) != 0 {
		t.Errorf("ListWorkloads = %d good (want %d), bad %v", len(good), 1+writers*3, bad)
	}
	ents, _ := os.ReadDir(s.WorkloadsDir())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
}

// TestRemoveStaleTemps: killed writers' temp files go; a live writer's
// (locked), a young one, symlinks, directories and other names stay, and
// a symlink's target is never touched.
func TestRemoveStaleTemps(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	mk := func(path string, mtime time.Time) string { return filetest.Aged(t, path, "{", mtime) }
	w, n := s.WorkloadsDir(), s.NodesDir()
	stale := []string{mk(filepath.Join(w, ".tmp-1"), old), mk(filepath.Join(n, ".tmp-22"), old), mk(filepath.Join(s.Root(), ".tmp-333"), old)}
	locked := mk(filepath.Join(w, ".tmp-4"), old)
	filetest.Locked(t, locked)
	target := mk(filepath.Join(t.TempDir(), "target"), old)
	link := filepath.Join(w, ".tmp-5")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(w, ".tmp-6")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	keep := []string{locked, target, link, dir, mk(filepath.Join(w, ".tmp-7"), time.Now()),
		mk(filepath.Join(w, ".tmp-x8"), old), mk(filepath.Join(n, "a.tmp-9"), old)}
	removed, err := s.RemoveStaleTemps(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != len(stale) {
		t.Errorf("removed %v, want %v", removed, stale)
	}
	for _, p := range stale {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s left", p)
		}
	}
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	// A writer that completes still leaves no temp file.
	if err := s.PutNode(&Node{Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	es, _ := os.ReadDir(n)
	for _, e := range es {
		if isTempName(e.Name()) {
			t.Errorf("writer left %s", e.Name())
		}
	}
}

// TestAppendFile: AppendFile extends the file its caller wrote and
// nothing else: not one renamed over it, not a missing one, not a
// symlink to it, not one someone truncated.
func TestAppendFile(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFileAtomic(dir, "f", []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	fi, err := Lstat(dir, "f")
	if err != nil {
		t.Fatal(err)
	}
	if err := AppendFile(dir, "f", fi, []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "one\ntwo\n" {
		t.Errorf("after an append: %q", b)
	}
	if err := os.Symlink("f", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for what, prepare := range map[string]func() error{
		"renamed over": func() error { return WriteFileAtomic(dir, "f", []byte("other\n")) },
		"missing":      func() error { return os.Remove(filepath.Join(dir, "f")) },
		"truncated":    func() error { return os.WriteFile(filepath.Join(dir, "f"), nil, 0o600) },
	} {
		if err := WriteFileAtomic(dir, "f", []byte("one\n")); err != nil {
			t.Fatal(err)
		}
		fi, err := Lstat(dir, "f")
		if err != nil {
			t.Fatal(err)
		}
		if err := prepare(); err != nil {
			t.Fatal(err)
		}
		if err := AppendFile(dir, "f", fi, []byte("two\n")); !errors.Is(err, ErrReplaced) {
			t.Errorf("%s: AppendFile = %v, want ErrReplaced", what, err)
		}
	}
	if err := WriteFileAtomic(dir, "f", []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	fi, err = Lstat(dir, "f")
	if err != nil {
		t.Fatal(err)
	}
	if err := AppendFile(dir, "link", fi, []byte("two\n")); !errors.Is(err, ErrReplaced) {
		t.Errorf("through a symlink: AppendFile = %v, want ErrReplaced", err)
	}
}

// TestRemoveStaleTempsRefusesSymlinkedDir: a directory that is a symlink
// is an error naming it, and nothing in its target is touched.
func TestRemoveStaleTempsRefusesSymlinkedDir(t *testing.T) {
	target := t.TempDir()
	f := filepath.Join(target, ".tmp-1")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(f, old, old); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := RemoveStaleTemps(link, time.Second); err == nil || !strings.Contains(err.Error(), link) {
		t.Errorf("RemoveStaleTemps(symlink) = %v, want an error naming it", err)
	}
	if _, err := os.Lstat(f); err != nil {
		t.Errorf("the target's temp file was removed: %v", err)
	}
	if _, err := RemoveStaleTemps(filepath.Join(target, "missing"), time.Second); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("RemoveStaleTemps(missing) = %v, want ErrNotExist", err)
	}
}

// TestWorkloadsWithHostIface lists the records naming one host veth: the
// ones ListWorkloads has with that HostIface, in the same order, and not a
// record that holds the name in another field, a corrupt file holding the
// name, or a record of another veth.
func TestWorkloadsWithHostIface(t *testing.T) {
	s := openTemp(t)
	const veth = "cali0123456789a"
	for i, host := range []string{veth, "calibbbbbbbbbbb", veth, "calicccccccccc"} {
		w := workload(fmt.Sprintf("c%d", i), "eth0")
		w.HostIface = host
		if i == 3 {
			w.PodName = veth // the name, but not as HostIface
		}
		if err := s.PutWorkload(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.WorkloadsDir(), "c9_eth0.json"), []byte(`{"hostIface": "`+veth+`", `), 0o600); err != nil {
		t.Fatal(err)
	}
	got := s.WorkloadsWithHostIface(veth)
	var ids []string
	for _, w := range got {
		ids = append(ids, w.ContainerID)
	}
	if strings.Join(ids, ",") != "c0,c2" {
		t.Errorf("WorkloadsWithHostIface(%s) = %v, want [c0 c2]", veth, ids)
	}
	all, _ := s.ListWorkloads()
	var want []string
	for _, w := range all {
		if w.HostIface == veth {
			want = append(want, w.ContainerID)
		}
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("WorkloadsWithHostIface %v, ListWorkloads filtered %v", ids, want)
	}
	if got := s.WorkloadsWithHostIface("calinone"); len(got) != 0 {
		t.Errorf("records for a veth nobody names: %v", got)
	}
}

// TestDirScanRead reads what ReadFileNoFollow reads and refuses what it
// refuses: a symlink, a file that is not regular, a file over
// MaxRecordSize; a file larger than its buffer is read whole.
func TestDirScanRead(t *testing.T) {
	dir := t.TempDir()
	small := []byte(`{"a": 1}`)
	big := bytes.Repeat([]byte("x"), 100_000)
	for name, data := range map[string][]byte{"small.json": small, "big.json": big, "empty.json": nil} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("small.json", filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "huge.json"), make([]byte, MaxRecordSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := openDirScan(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range []string{"small.json", "big.json", "empty.json", "small.json"} {
		want, _ := ReadFileNoFollow(dir, name)
		got, err := d.read(name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("read %s: %d bytes, %v; want the file's %d bytes", name, len(got), err, len(want))
		}
	}
	for _, name := range []string{"link.json", "fifo.json", "huge.json", "missing.json", "../x"} {
		if _, err := d.read(name); err == nil {
			t.Errorf("read %s succeeded, want refusal", name)
		}
	}
}

// TestNodeWireGuardFields: the WireGuard key and port round-trip through
// the file datastore and the etcd encoding under their documented JSON
// names, are left out when unset, and count for SameNode.
func TestNodeWireGuardFields(t *testing.T) {
	s := openTemp(t)
	n := &Node{Name: "node-1", HostIPv4: "192.0.2.10", Blocks: []string{"10.244.1.0/26"},
		WireGuardPublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", WireGuardPort: 51821}
	if err := s.PutNode(n); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.NodesDir(), "node-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"wireguardPublicKey": "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="`, `"wireguardPort": 51821`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("record lacks %s:\n%s", want, data)
		}
	}
	got, err := s.GetNode("node-1")
	if err != nil || got.WireGuardPublicKey != n.WireGuardPublicKey || got.WireGuardPort != 51821 || !SameNode(got, n) {
		t.Fatalf("GetNode = %+v, %v; want the WireGuard key and port back", got, err)
	}
	enc, err := EncodeNode(n)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeNode(enc)
	if err != nil || !SameNode(dec, n) {
		t.Fatalf("DecodeNode(EncodeNode) = %+v, %v", dec, err)
	}
	for name, mutate := range map[string]func(*Node){
		"key":  func(m *Node) { m.WireGuardPublicKey = "" },
		"port": func(m *Node) { m.WireGuardPort = 0 },
	} {
		m := *n
		mutate(&m)
		if SameNode(&m, n) {
			t.Errorf("SameNode ignores a changed WireGuard %s", name)
		}
	}
	plain, err := EncodeNode(&Node{Name: "node-2"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "wireguard") {
		t.Errorf("a record without WireGuard encodes WireGuard fields: %s", plain)
	}
}

// TestDaemonStatusWireGuardDevice: the WireGuard device name round-trips
// and an older daemon.json reads as "" (the default).
func TestDaemonStatusWireGuardDevice(t *testing.T) {
	s := openTemp(t)
	if err := s.WriteDaemonStatus(&DaemonStatus{Ready: true, WireGuardDevice: "wg-pods"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.Root(), "daemon.json"))
	if err != nil || !strings.Contains(string(data), `"wireguardDevice": "wg-pods"`) {
		t.Fatalf("daemon.json = %s, %v; want wireguardDevice", data, err)
	}
	if st, err := s.ReadDaemonStatus(); err != nil || st.WireGuardDevice != "wg-pods" {
		t.Fatalf("ReadDaemonStatus = %+v, %v", st, err)
	}
	if err := s.WriteDaemonStatus(&DaemonStatus{Ready: true}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.ReadDaemonStatus(); err != nil || st.WireGuardDevice != "" {
		t.Fatalf("ReadDaemonStatus = %+v, %v; want no WireGuard device", st, err)
	}
}

// TestNodeBGPAS: the BGP AS number round-trips through the file datastore
// and the etcd encoding as bgpAS, is left out when 0 (no BGP), and counts
// for SameNode.
func TestNodeBGPAS(t *testing.T) {
	s := openTemp(t)
	n := &Node{Name: "node-1", HostIPv4: "192.0.2.10", Blocks: []string{"10.244.1.0/26"}, BGPAS: 4200000000}
	if err := s.PutNode(n); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.NodesDir(), "node-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"bgpAS": 4200000000`) {
		t.Errorf("record lacks bgpAS:\n%s", data)
	}
	got, err := s.GetNode("node-1")
	if err != nil || got.BGPAS != 4200000000 || !SameNode(got, n) {
		t.Fatalf("GetNode = %+v, %v; want the AS number back", got, err)
	}
	enc, err := EncodeNode(n)
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := DecodeNode(enc); err != nil || dec.BGPAS != n.BGPAS {
		t.Fatalf("DecodeNode(EncodeNode) = %+v, %v", dec, err)
	}
	m := *n
	m.BGPAS = 64512
	if SameNode(&m, n) {
		t.Error("SameNode ignores a changed BGP AS number")
	}
	plain, err := EncodeNode(&Node{Name: "node-2"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "bgp") {
		t.Errorf("a record without BGP encodes a BGP field: %s", plain)
	}
}
