package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/statusapi"
)

var update = flag.Bool("update", false, "rewrite testdata/status-*.golden from the current output")

// golden compares got with testdata/<name>, rewriting it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update after checking):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// rendered is st in both forms, with the temp state dir made stable.
func rendered(t *testing.T, st *statusapi.State) (text, js string) {
	t.Helper()
	st.Node.StateDir = "/run/routelet"
	var tb, jb bytes.Buffer
	if err := writeStatus(&tb, st, "text", statusNow); err != nil {
		t.Fatal(err)
	}
	if err := writeStatus(&jb, st, "json", statusNow); err != nil {
		t.Fatal(err)
	}
	return tb.String(), jb.String()
}

// goldenStatus compares st's text and JSON with testdata/<name>.golden and
// <name>.json.golden and returns the text.
func goldenStatus(t *testing.T, name string, st *statusapi.State) string {
	t.Helper()
	text, js := rendered(t, st)
	golden(t, name+".golden", text)
	golden(t, name+".json.golden", js)
	return text
}

// TestStatusGoldenHealthy: a healthy node's status, offline, on fakes.
func TestStatusGoldenHealthy(t *testing.T) {
	n := newFakeStatusNode(t, 3, 3)
	n.program(t)
	st := n.status(t, nil)
	text, js := rendered(t, st)
	golden(t, "status-healthy.golden", text)
	golden(t, "status-healthy.json.golden", js)
	if !strings.Contains(text, "No problems") {
		t.Errorf("healthy node reports problems:\n%s", text)
	}
}

// TestStatusGoldenBroken: every broken thing is named, in text and JSON.
func TestStatusGoldenBroken(t *testing.T) {
	st := brokenStatusNode(t).status(t, nil)
	text := goldenStatus(t, "status-broken", st)
	for _, want := range []string{
		"routeletd is NOT RUNNING",
		"pod default/pod-1: routes: 10.244.7.2/32 dev cali0001 missing",
		"workloads-ipv4: unexpected route unicast 192.168.50.0/24 dev cali0002",
		"peer node-0001: FDB: 66:00:00:00:00:01 missing on vxlan.calico",
		"peer node-0001: allowlist: 172.16.0.2 not in routelet-vxlan-peers",
		"peer node-0002: ARP: 10.100.0.128 lladdr 66:00:00:00:00:02 REACHABLE, want 66:00:00:00:00:02 PERMANENT",
		`vtepMAC 01:00:5e:00:00:01 refused`,
	} {
		wantText(t, text, want)
	}
}

// wantText fails t unless the status text holds want.
func wantText(t *testing.T, text, want string) {
	t.Helper()
	if !strings.Contains(text, want) {
		t.Errorf("status text lacks %q:\n%s", want, text)
	}
}

// TestStatusGoldenDaemon: the daemon's view (drift in the last hour, last
// resync) and a daemon not ready before its loop.
func TestStatusGoldenDaemon(t *testing.T) {
	st := brokenStatusNode(t).status(t, nil)
	st.Source, st.Loop, st.LastResync = statusapi.SourceDaemon, true, statusNow.Add(-40*time.Second)
	st.Readiness = statusapi.Readiness{Ready: true, Updated: statusNow}
	st.Repairs = []statusapi.Repair{
		{Time: statusNow.Add(-3 * time.Hour), Object: "route"},
		{Time: statusNow.Add(-20 * time.Minute), Object: "route", Detail: "10.244.7.1/32 dev cali0000"},
		{Time: statusNow.Add(-10 * time.Minute), Object: "allowlist"},
	}
	text, js := rendered(t, st)
	golden(t, "status-daemon.golden", text)
	golden(t, "status-daemon.json.golden", js)
	if !strings.Contains(text, "2 in the last hour (allowlist 1, route 1)") {
		t.Errorf("drift line does not count the last hour's repairs:\n%s", text)
	}

	waiting := &statusapi.State{Source: statusapi.SourceDaemon, Node: statusapi.Node{Name: "node-a", Datastore: "file", Mode: "vxlan", RouteProtocol: 80},
		Readiness: statusapi.Readiness{Reason: "waiting for the node IP: no default route", Updated: statusNow}}
	text, js = rendered(t, waiting)
	golden(t, "status-waiting.golden", text)
	golden(t, "status-waiting.json.golden", js)
}

// BenchmarkStatusFake measures the offline status (read the state
// directory, derive the desired state, compare, render text and JSON) of
// a node with 250 pods and 1,000 peers on a fake kernel, and counts the
// kernel reads one status makes.
func BenchmarkStatusFake(b *testing.B) {
	n := newFakeStatusNode(b, 250, 1000)
	n.program(b)
	c := &inspect.Counting{R: n.kernel}
	var st *statusapi.State
	for b.Loop() {
		st = n.status(b, c)
		var out bytes.Buffer
		if err := writeStatus(&out, st, "text", statusNow); err != nil {
			b.Fatal(err)
		}
		if err := writeStatus(&out, st, "json", statusNow); err != nil {
			b.Fatal(err)
		}
	}
	if len(st.Workloads) != 250 || len(st.Peers) != 1000 || !st.Peers[999].FDB.Present {
		b.Fatalf("status of the fake node: %d workloads, %d peers", len(st.Workloads), len(st.Peers))
	}
	b.ReportMetric(float64(c.Reads())/float64(b.N), "kernel-reads/op")
}

// TestStatusGoldenDatastores: with a datastore other than file, a node
// whose daemon is down says its peers are unknown (not "no peers"); a
// running daemon's view shows the datastore's health: reachable or not,
// failed requests, liveness per peer.
func TestStatusGoldenDatastores(t *testing.T) {
	n := newFakeStatusNode(t, 3, 3)
	n.program(t)
	n.cfg.Datastore = "etcd"
	st := n.status(t, nil)
	text := goldenStatus(t, "status-etcd-down", st)
	for _, want := range []string{
		"Peers: unknown — the daemon is down and the datastore is etcd",
		"Datastore:       etcd: unknown (only the running daemon reads it)",
	} {
		wantText(t, text, want)
	}
	if strings.Contains(text, "Peers: 0") || st.PeersUnknown == "" {
		t.Errorf("status of a node whose daemon is down with etcd reports no peers instead of unknown ones:\n%s", text)
	}

	n.cfg.Datastore = "file"
	st = n.status(t, nil)
	up := false
	st.Source, st.Loop, st.LastResync = statusapi.SourceDaemon, true, statusNow.Add(-40*time.Second)
	st.Readiness = statusapi.Readiness{Ready: true, Updated: statusNow}
	st.Node.Datastore = "etcd"
	st.Datastore.Reachable = &up
	st.Datastore.RequestErrors = map[string]int{"keepalive": 3, "watch": 1}
	st.Datastore.Liveness, st.Datastore.Live = true, []string{"node-0000", "node-0002"}
	for i := range st.Peers {
		live := i != 1
		st.Peers[i].Live = &live
	}
	text = goldenStatus(t, "status-etcd", st)
	for _, want := range []string{
		"Datastore:       etcd UNREACHABLE (the last known peers are kept): ok: 3 peer records",
		"4 failed requests since start (keepalive 3, watch 1); 2/3 peers live",
		"LIVE",
	} {
		wantText(t, text, want)
	}
}
