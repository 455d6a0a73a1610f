package cleanup

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
	"github.com/routelet/routelet/pkg/wireguard"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckStateDir: what makes a directory routelet's. Each marker alone
// is enough (state directories of earlier releases have daemon.json,
// routeletd.lock, ipam/lock or records, and no other marker); files that
// only look like routelet's are not.
func TestCheckStateDir(t *testing.T) {
	for _, c := range []struct {
		what  string
		files map[string]string
		ok    bool
	}{
		{"daemon.json", map[string]string{"daemon.json": `{"version": 1, "ready": false}`}, true},
		{"routeletd.lock", map[string]string{"routeletd.lock": ""}, true},
		{"ipam/lock", map[string]string{"ipam/lock": "pid 1 (ADD c1)\n"}, true},
		{"a workload record", map[string]string{"workloads/c1_eth0.json": `{"version": 1, "containerID": "c1", "ifName": "eth0"}`}, true},
		{"a node record", map[string]string{"nodes/a.json": `{"version": 1, "name": "a"}`}, true},
		{"peer-claims.json", map[string]string{"peer-claims.json": `{"version": 2, "claims": []}` + "\n" + `{"claims": []}` + "\n"}, true},
		{"empty", map[string]string{}, false},
		{"look-alikes", map[string]string{
			"daemon.json":            `{"ready": true}`,
			"peer-claims.json":       "claims",
			"workloads/c1_eth0.json": `{"containerID": "c1", "ifName": "eth0"}`,
			"nodes/a.json":           `{"version": 1}`,
			"ipam/addrs/10.0.0.1":    "c1\neth0\n",
			"ipam/lock/x":            "a directory named lock",
			".tmp-123":               "",
			"notes":                  "",
		}, false},
	} {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, dir, c.files)
		err := CheckStateDir(dir)
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
		if !c.ok && (!errors.Is(err, ErrNotStateDir) || !strings.Contains(err.Error(), dir)) {
			t.Errorf("%s: %v, want ErrNotStateDir naming %s", c.what, err, dir)
		}
	}
	// A symlink to a real state directory, and a file.
	real := filepath.Join(t.TempDir(), "state")
	write(t, real, map[string]string{"routeletd.lock": ""})
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckStateDir(link); !errors.Is(err, ErrNotStateDir) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlink: %v", err)
	}
	if err := CheckStateDir(filepath.Join(real, "routeletd.lock")); !errors.Is(err, ErrNotStateDir) {
		t.Errorf("a file: %v", err)
	}
	if err := CheckStateDir(filepath.Join(real, "missing")); err != nil {
		t.Errorf("missing: %v, want nil (nothing to remove)", err)
	}
}

// TestRemoveStateRealLayout: a state directory as pkg/state and pkg/ipam
// write it is removed whole; foreign entries, links included, stay and are
// listed, and so do the directories holding them.
func TestRemoveStateRealLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	store, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutWorkload(&state.Workload{ContainerID: "c1", IfName: "eth0", HostIface: "cali1", Netns: "/var/run/netns/x",
		IPs: []string{"10.244.7.1/32"}, ContainerMAC: "02:00:00:00:00:01", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := store.PutNode(&state.Node{Name: "node-a", HostIPv4: "192.0.2.10", Blocks: []string{"10.244.7.0/24"}}); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteDaemonStatus(&state.DaemonStatus{Reason: "stopped", Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	alloc, err := ipam.New(filepath.Join(dir, "ipam"), []netip.Prefix{netip.MustParsePrefix("10.244.7.0/24"), netip.MustParsePrefix("fd00:7::/120")}, ipam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cid := range []string{"c1", "c2"} {
		if _, err := alloc.Allocate(context.Background(), ipam.Attachment{ContainerID: cid, IfName: "eth0"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	write(t, dir, map[string]string{"routeletd.lock": "", ".tmp-4711": "", "ipam/veth-locks/cali1": "pid 1\n", "nodes/.tmp-99": "{"})

	p, err := scanStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	left, err := p.removeState(&rep)
	p.close()
	if err != nil || len(left) != 0 {
		t.Fatalf("left %q, %v; removed %q", left, err, rep.Paths)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in %s: %v", dir, ents)
	}

	// Foreign entries in a marked directory.
	write(t, dir, map[string]string{"daemon.json": `{"version": 1}`, "workloads/x.txt": "", "ipam/blocks/10.244.7.0_24": "no magic", "ipam/addrs/foo": "c1\neth0\n"})
	target := filepath.Join(t.TempDir(), "target")
	write(t, target, map[string]string{"c9_eth0.json": `{"version": 1, "containerID": "c9", "ifName": "eth0"}`})
	if err := os.Symlink(target, filepath.Join(dir, "nodes")); err != nil {
		t.Fatal(err)
	}
	p, err = scanStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	left, err = p.removeState(&rep)
	p.close()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"workloads/x.txt", "ipam/blocks/10.244.7.0_24", "ipam/addrs/foo", "nodes"}
	if len(left) != len(want) {
		t.Errorf("left %q, want %q", left, want)
	}
	for _, w := range want {
		found := false
		for _, l := range left {
			found = found || strings.HasPrefix(l, filepath.Join(dir, w))
		}
		if !found {
			t.Errorf("left %q, want %s among them", left, w)
		}
		if _, err := os.Lstat(filepath.Join(dir, w)); err != nil {
			t.Errorf("%s: %v", w, err)
		}
	}
	if _, err := os.Stat(filepath.Join(target, "c9_eth0.json")); err != nil {
		t.Errorf("a record behind the nodes/ link was removed: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "daemon.json")); err == nil {
		t.Error("daemon.json left")
	}
}

// TestRemoveStateWireGuard: in <stateDir>/wireguard the key (as
// wireguard.LoadOrCreateKey writes it), a datapath's pid file and its log
// (however large) and temp files go, and the directory with them; a file
// named like the key that holds no key, and any other file, stay and are
// listed, and the directory with them.
func TestRemoveStateWireGuard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	write(t, dir, map[string]string{"routeletd.lock": ""})
	if _, _, err := wireguard.LoadOrCreateKey(dir); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{
		"wireguard/wireguard.cali.pid": "4242\n",
		"wireguard/wireguard.cali.log": strings.Repeat("a line of the datapath's output\n", 64<<10), // 2 MiB
		"wireguard/.tmp-123":           "",
	})
	p, err := scanStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	left, err := p.removeState(&rep)
	p.close()
	if err != nil || len(left) != 0 {
		t.Fatalf("left %q, %v; removed %q", left, err, rep.Paths)
	}
	if _, err := os.Lstat(filepath.Join(dir, "wireguard")); err == nil {
		t.Errorf("%s/wireguard still there", dir)
	}

	foreign := map[string]string{
		"wireguard/private.key": "not a key\n",
		"wireguard/notes":       "mine",
		"wireguard/x.pid":       "pid 1\n",
	}
	write(t, dir, foreign)
	write(t, dir, map[string]string{"routeletd.lock": ""})
	p, err = scanStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	left, err = p.removeState(&rep)
	p.close()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	var want []string
	for f := range foreign {
		want = append(want, filepath.Join(dir, f))
	}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	for f := range foreign {
		if _, err := os.Lstat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
