package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// cniConfName is the conflist routeletd writes by default.
const cniConfName = "10-routelet.conflist"

// otherConfs are files of others in the CNI conf dir, which routeletd must
// leave as they are.
var otherConfs = map[string]string{
	"99-loopback.conf": `{"cniVersion":"1.0.0","name":"lo","type":"loopback"}`,
	"README":           "not ours",
}

// fileState is what a user would compare to tell a file was left alone:
// its content and the file itself (inode, mtime).
type fileState struct {
	data string
	fi   os.FileInfo
}

// statFile returns path's state.
func statFile(t *testing.T, path string) fileState {
	t.Helper()
	data, err := os.ReadFile(path)
	fi, serr := os.Stat(path)
	if err != nil || serr != nil {
		t.Fatalf("%s: %v %v", path, err, serr)
	}
	return fileState{data: string(data), fi: fi}
}

// same reports whether s is the file was describes, unchanged.
func (s fileState) same(was fileState) bool {
	return s.data == was.data && os.SameFile(s.fi, was.fi) && s.fi.ModTime().Equal(was.fi.ModTime())
}

// TestCNIConfWrittenOnceReady: with --cni-conf-dir the daemon writes its
// conflist only once it is ready, with the pod MTU filled in, so that an
// inotify watcher sees a write on the final name; a pod can be attached
// through it; other files in the directory stay as they were; and a
// restart with the same settings does not rewrite it.
func TestCNIConfWrittenOnceReady(t *testing.T) {
	tn := newTestNode(t, false) // no default route: not ready at first
	netnstest.Bins(t, netnstest.PortmapPackage)
	dir := t.TempDir()
	for n, c := range otherConfs {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	others := map[string]fileState{}
	for n := range otherConfs {
		others[n] = statFile(t, filepath.Join(dir, n))
	}
	events := netnstest.WatchDir(t, dir)
	seen := map[string]uint32{}
	collect := func() {
		for n, m := range events() {
			seen[n] |= m
		}
	}
	path := filepath.Join(dir, cniConfName)

	d := tn.startDaemon("--cni-conf-dir=" + dir)
	netnstest.Eventually(t, netnstest.ReadyTimeout, "daemon.json saying it waits for the node IP", func() bool {
		st, err := tn.store.ReadDaemonStatus()
		return err == nil && !st.Ready && strings.Contains(st.Reason, "node IP")
	})
	if _, err := os.Lstat(path); err == nil {
		t.Fatal("conflist written before the daemon is ready")
	}
	collect()
	for n, m := range seen {
		if n != "" {
			t.Errorf("event %#x on %q before the daemon is ready", m, n)
		}
	}

	tn.addDefaultRoute()
	netnstest.WaitFor(t, netnstest.ReadyTimeout, "the conflist", func() error {
		_, err := os.Lstat(path)
		return err
	})
	// The ready status is published before the write is asked for.
	if code, body, err := tn.get("/readyz"); err != nil || code != 200 {
		t.Errorf("conflist present while /readyz = %d %q %v", code, body, err)
	}
	st, err := tn.store.ReadDaemonStatus()
	if err != nil || !st.Ready || st.PodMTU == 0 {
		t.Fatalf("conflist present while daemon.json = %+v, %v", st, err)
	}
	// What containerd 1.6 reloads on (fsnotify Write: IN_MODIFY), and what
	// newer watchers take (IN_CLOSE_WRITE), both on the final name.
	netnstest.WaitFor(t, 10*time.Second, "write events on "+cniConfName, func() error {
		collect()
		if m := seen[cniConfName]; m&unix.IN_MODIFY == 0 || m&unix.IN_CLOSE_WRITE == 0 {
			return fmt.Errorf("events %#x", m)
		}
		return nil
	})

	list, err := libcni.ConfListFromFile(path)
	if err != nil {
		t.Fatalf("libcni cannot load the written conflist: %v", err)
	}
	if len(list.Plugins) != 2 || list.Plugins[0].Network.Type != "routelet" || list.Plugins[1].Network.Type != "portmap" {
		t.Fatalf("plugins %+v, want routelet then portmap", list.Plugins)
	}
	var rl struct {
		MTU      int    `json:"mtu"`
		StateDir string `json:"stateDir"`
		Prefix   string `json:"interfacePrefix"`
	}
	if err := json.Unmarshal(list.Plugins[0].Bytes, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.MTU != st.PodMTU || rl.StateDir != tn.stateDir || rl.Prefix != "cali" {
		t.Errorf("routelet plugin %+v; want mtu %d (daemon.json's podMTU), stateDir %s, prefix cali", rl, st.PodMTU, tn.stateDir)
	}
	for n, m := range seen {
		if n == cniConfName || n == "" {
			continue
		}
		if _, other := otherConfs[n]; other {
			t.Errorf("event %#x on the other file %s", m, n)
		}
		if !strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".conf") || strings.HasSuffix(n, ".conflist") || strings.HasSuffix(n, ".json") {
			t.Errorf("routeletd used %q, a name a runtime would load", n)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != len(otherConfs)+1 {
		t.Errorf("conf dir holds %v (%v), want the other files and %s only", entries, err, cniConfName)
	}
	for n, want := range others {
		if got := statFile(t, filepath.Join(dir, n)); !got.same(want) {
			t.Errorf("other file %s changed: %q, was %q", n, got.data, want.data)
		}
	}

	// The written conflist serves an ADD, portmap chained.
	tn.conf = list
	p := tn.addPod("cniconf-pod")
	netnstest.Eventually(t, 10*time.Second, "pod route", func() bool { return tn.hasRoute(v4, p.ip+" "+p.iface+" proto 80") })
	tn.delPod(p)

	// A restart with the same settings leaves the file alone.
	if err := d.stop(t); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	before := statFile(t, path)
	collect()
	clear(seen)
	d = tn.startDaemon("--cni-conf-dir=" + dir)
	tn.waitReady()
	netnstest.Eventually(t, 10*time.Second, "the daemon finding its conflist up to date", func() bool {
		return strings.Contains(d.log.String(), "CNI config already up to date")
	})
	collect()
	if m := seen[cniConfName]; m&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_CREATE|unix.IN_ATTRIB) != 0 {
		t.Errorf("unchanged conflist written again at restart: events %#x", m)
	}
	if got := statFile(t, path); !got.same(before) {
		t.Errorf("unchanged conflist replaced at restart (mtime %v, was %v)", got.fi.ModTime(), before.fi.ModTime())
	}
	for n, want := range others {
		if got := statFile(t, filepath.Join(dir, n)); !got.same(want) {
			t.Errorf("other file %s changed at restart: %q, was %q", n, got.data, want.data)
		}
	}
}

// TestCNIConfRefused: a missing conf dir and bad templates stop routeletd
// with exit 2 naming the key and the value, before it is ready, and no
// conflist is written.
func TestCNIConfRefused(t *testing.T) {
	tn := newTestNode(t, true)
	dir := t.TempDir()
	tmpl := func(s string) string {
		p := filepath.Join(t.TempDir(), "t.conflist")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withMTU := tmpl(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"routelet","mtu":9000}]}`)
	portmapFirst := tmpl(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"portmap"},{"type":"routelet"}]}`)
	otherState := tmpl(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"routelet","stateDir":"/var/lib/elsewhere"}]}`)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--cni-conf-dir=" + dir + "/absent"}, []string{`"cni-conf-dir"`, dir + "/absent"}},
		{[]string{"--cni-conf-dir=relative/dir"}, []string{`"cni-conf-dir"`, "relative/dir"}},
		{[]string{"--cni-conf-dir=" + dir, "--cni-conf-template=" + dir + "/none.conflist"}, []string{`"cni-conf-template"`, "none.conflist"}},
		{[]string{"--cni-conf-dir=" + dir, "--cni-conf-template=" + withMTU}, []string{`"cni-conf-template"`, withMTU, `"mtu"`}},
		{[]string{"--cni-conf-dir=" + dir, "--cni-conf-template=" + portmapFirst}, []string{`"cni-conf-template"`, "portmap"}},
		{[]string{"--cni-conf-dir=" + dir, "--cni-conf-template=" + otherState}, []string{`"cni-conf-template"`, "/var/lib/elsewhere", tn.stateDir}},
		{[]string{"--cni-conf-dir=" + dir, "--cni-conf-name=../x.conflist"}, []string{`"cni-conf-name"`, "../x.conflist"}},
	} {
		d := tn.startDaemon(tc.args...)
		select {
		case <-d.proc.Done():
		case <-time.After(netnstest.ReadyTimeout):
			t.Fatalf("routeletd %v still running", tc.args)
		}
		out := d.log.String()
		if code := exitCode(d.proc.Err()); code != 2 {
			t.Errorf("routeletd %v: exit %d, want 2\n%s", tc.args, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("routeletd %v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
		if e, _ := os.ReadDir(dir); len(e) != 0 {
			t.Errorf("routeletd %v left %v in the conf dir", tc.args, e)
		}
	}
}
