package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/daemon/debugapi"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/netguard"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/state"
)

// statusFlags are the daemon's flags as startDaemon passes them, for the
// status subcommand (it reads the same configuration).
func (tn *testNode) statusFlags(extra ...string) []string {
	return append([]string{"status", "--node-name=node-a", "--state-dir=" + tn.stateDir, "--pod-cidr=" + tn.podCIDR}, extra...)
}

// statusJSON runs `routeletd status --output json` in the node.
func (tn *testNode) statusJSON(extra ...string) (*debugapi.State, error) {
	out, errs, code := tn.runIn(tn.statusFlags(append(extra, "--output", "json")...)...)
	if code != 0 {
		return nil, fmt.Errorf("status exited %d: %s", code, errs)
	}
	return parseState(out)
}

// addPeerRecord writes node-b's record as its daemon would publish it.
func (tn *testNode) addPeerRecord() {
	tn.t.Helper()
	err := tn.store.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.20", Blocks: []string{"10.244.8.0/24"},
		VTEPMAC: "66:aa:bb:cc:dd:02", TunnelIPv4: "10.244.8.0", Updated: time.Now()})
	if err != nil {
		tn.t.Fatal(err)
	}
}

// peerOf returns the named peer's row.
func peerOf(st *debugapi.State, name string) (debugapi.Peer, bool) {
	for _, p := range st.Peers {
		if p.Name == name {
			return p, true
		}
	}
	return debugapi.Peer{}, false
}

// healthyPeer reports whether every check towards node-b passed over the
// overlay.
func healthyPeer(p debugapi.Peer) bool {
	return p.Path == debugapi.PathOverlay && p.Device == "vxlan.calico" &&
		p.Routes.Wanted && p.Routes.Present && p.ARP.Wanted && p.ARP.Present &&
		p.FDB.Wanted && p.FDB.Present && p.Allowlist.Wanted && p.Allowlist.Present
}

// TestStatusDaemonRunning: with the daemon running, status comes from its
// state socket (mode 0600): ready, the pod and its route, the peer's
// route, ARP, FDB and allowlist entry, and a pod route and the peer's FDB
// entry deleted behind the daemon's back counted as drift repaired.
func TestStatusDaemonRunning(t *testing.T) {
	tn := newTestNode(t, true)
	tn.addPeerRecord()
	tn.startDaemon("--encapsulation=vxlan")
	tn.waitReady()
	p := tn.addPod("status-pod")

	fi, err := os.Lstat(filepath.Join(tn.stateDir, debugapi.SocketName))
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state socket: %v, %v; want a socket with mode 0600", fi, err)
	}
	var st *debugapi.State
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status showing the pod and a healthy peer", func() bool {
		st, err = tn.statusJSON()
		if err != nil {
			t.Log(err)
			return false
		}
		peer, _ := peerOf(st, "node-b")
		return len(st.Workloads) == 1 && st.Workloads[0].Routes.Present && healthyPeer(peer)
	})
	if st.Source != debugapi.SourceDaemon || !st.Loop || !st.Readiness.Ready || st.Node.Name != "node-a" || st.Node.Mode != "vxlan" ||
		st.Node.HostIPv4 != "192.0.2.10" || !st.Datastore.OK || st.Datastore.Valid != 1 || st.LastResync.IsZero() {
		t.Errorf("status = source %s loop %v readiness %+v node %+v datastore %+v lastResync %v",
			st.Source, st.Loop, st.Readiness, st.Node, st.Datastore, st.LastResync)
	}
	if len(st.Blocks) != 1 || st.Blocks[0].CIDR != "10.244.7.0/24" || st.Blocks[0].Used != 1 || st.Blocks[0].Size != 254 {
		t.Errorf("blocks = %+v, want 10.244.7.0/24 with 1 of 254 used", st.Blocks)
	}
	if n := st.RepairsSince(time.Now().Add(-time.Hour)); n != 0 {
		t.Errorf("repairs before any tampering = %d (%+v)", n, st.Repairs)
	}

	// Tamper: delete the pod's route; the daemon puts it back and counts it.
	if _, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "route", "del", p.ip, "dev", p.iface); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status counting the repaired route", func() bool {
		st, err = tn.statusJSON()
		return err == nil && st.RepairsSince(time.Now().Add(-time.Hour)) > 0 && st.Workloads[0].Routes.Present
	})

	// The same for node-b's FDB entry on the VXLAN device.
	if _, err := netnstest.Exec(context.Background(), tn.node.NS, "bridge", "fdb", "del", "66:aa:bb:cc:dd:02", "dev", "vxlan.calico",
		"dst", "192.0.2.20", "self"); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status counting the repaired FDB entry", func() bool {
		st, err = tn.statusJSON()
		if err != nil {
			return false
		}
		peer, _ := peerOf(st, "node-b")
		return slices.ContainsFunc(st.Repairs, func(r debugapi.Repair) bool { return r.Object == "fdb" }) && healthyPeer(peer)
	})

	out, _, code := tn.runIn(tn.statusFlags()...)
	for _, want := range []string{"routeletd is running", "Ready:", "yes", "node-b", "10.244.7.0/24 1/254 used",
		"2 in the last hour (fdb 1, route 1)", "No problems"} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if strings.Contains(out, "NOT RUNNING") {
		t.Errorf("status of a running daemon says it is not running:\n%s", out)
	}
}

// TestStatusDaemonStopped: after the daemon stopped, status says so first
// and shows what the state directory and the kernel hold: the pod's route
// and the peer's entries are still in place, and an FDB entry deleted
// while the daemon is down is shown missing.
func TestStatusDaemonStopped(t *testing.T) {
	tn := newTestNode(t, true)
	tn.addPeerRecord()
	d := tn.startDaemon("--encapsulation=vxlan")
	tn.waitReady()
	tn.addPod("status-pod")
	netnstest.Eventually(t, netnstest.ReadyTimeout, "pod route", func() bool {
		st, err := tn.statusJSON()
		return err == nil && len(st.Workloads) == 1 && st.Workloads[0].Routes.Present
	})
	if err := d.stop(t); err != nil {
		t.Fatalf("routeletd exit: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(tn.stateDir, debugapi.SocketName)); !os.IsNotExist(err) {
		t.Errorf("state socket left after a clean stop: %v", err)
	}

	st, err := tn.statusJSON("--encapsulation=vxlan")
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := peerOf(st, "node-b")
	if st.Source != debugapi.SourceOffline || st.Readiness.Ready || !strings.Contains(st.Readiness.Reason, "not running") ||
		len(st.Workloads) != 1 || !st.Workloads[0].Routes.Present || !healthyPeer(peer) || st.Node.HostIPv4 != "192.0.2.10" {
		t.Fatalf("offline status = source %s readiness %+v workloads %+v peer %+v node %+v", st.Source, st.Readiness, st.Workloads, peer, st.Node)
	}
	out, _, _ := tn.runIn(tn.statusFlags("--encapsulation=vxlan")...)
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "routeletd is NOT RUNNING") {
		t.Errorf("first line of status with the daemon stopped = %q, want it to say so:\n%s", first, out)
	}

	// The FDB entry for node-b's VTEP goes while nobody repairs it.
	if _, err := netnstest.Exec(context.Background(), tn.node.NS, "bridge", "fdb", "del", "66:aa:bb:cc:dd:02", "dev", "vxlan.calico",
		"dst", "192.0.2.20", "self"); err != nil {
		t.Fatal(err)
	}
	st, err = tn.statusJSON("--encapsulation=vxlan")
	if err != nil {
		t.Fatal(err)
	}
	if peer, _ = peerOf(st, "node-b"); !peer.FDB.Wanted || peer.FDB.Present || !strings.Contains(peer.FDB.Fact, "missing") {
		t.Errorf("peer after its FDB entry was deleted = %+v, want FDB missing", peer)
	}
	out, _, _ = tn.runIn(tn.statusFlags("--encapsulation=vxlan")...)
	if !strings.Contains(out, "peer node-b: FDB: 66:aa:bb:cc:dd:02 missing on vxlan.calico") {
		t.Errorf("status text does not name the missing FDB entry:\n%s", out)
	}
}

// TestStatusNotReady: a daemon still waiting for its node IP (no default
// route, the condition it really waits on before its loop) answers on its
// socket: not ready, and why.
func TestStatusNotReady(t *testing.T) {
	tn := newTestNode(t, false)
	tn.startDaemon()
	var st *debugapi.State
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status from the waiting daemon", func() bool {
		var err error
		st, err = tn.statusJSON()
		return err == nil && st.Source == debugapi.SourceDaemon
	})
	if st.Readiness.Ready || st.Loop || !strings.Contains(st.Readiness.Reason, "node IP") {
		t.Errorf("status while waiting for the node IP = loop %v readiness %+v, want not ready naming the node IP", st.Loop, st.Readiness)
	}
	out, _, _ := tn.runIn(tn.statusFlags()...)
	if !strings.Contains(out, "NO: waiting for the node IP") || !strings.Contains(out, "routeletd is running") {
		t.Errorf("status text while waiting:\n%s", out)
	}
	tn.addDefaultRoute()
	tn.waitReady()
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status ready", func() bool {
		st, err := tn.statusJSON()
		return err == nil && st.Loop && st.Readiness.Ready
	})
}

// nodesCmd runs `routeletd nodes VERB ARGS` in the node with the flags
// startDaemon gives the daemon (the same state directory and node).
func (tn *testNode) nodesCmd(verb string, args ...string) (string, string, int) {
	tn.t.Helper()
	full := append([]string{"nodes", verb}, args...)
	full = append(full, "--node-name=node-a", "--state-dir="+tn.stateDir, "--pod-cidr="+tn.podCIDR)
	return tn.runIn(full...)
}

// TestNodesCLI: peer records added with `routeletd nodes add` are what the
// running daemon routes to; a record the daemon would refuse is refused
// with the value named and nothing written; `remove` takes the peer away.
func TestNodesCLI(t *testing.T) {
	tn := newTestNode(t, true)
	tn.startDaemon("--encapsulation=vxlan")
	tn.waitReady()
	const route = "10.244.8.0/24 vxlan.calico proto 80"

	out, errs, code := tn.nodesCmd("add", "node-b", "--host-ipv4", "192.0.2.20", "--block", "10.244.8.0/24",
		"--vtep-mac", "66:aa:bb:cc:dd:02", "--tunnel-ipv4", "10.244.8.0")
	if code != 0 {
		t.Fatalf("nodes add node-b: exit %d: %s%s", code, out, errs)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "route to node-b's block", func() bool { return tn.hasRoute(v4, route) })
	rec, err := tn.store.GetNode("node-b")
	if err != nil || rec.HostIPv4 != "192.0.2.20" || rec.VTEPMAC != "66:aa:bb:cc:dd:02" || rec.Updated.IsZero() {
		t.Errorf("record written = %+v, %v", rec, err)
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"node-c", []string{"--host-ipv4", "192.0.2.21", "--block", "10.244.7.128/25"}, `block "10.244.7.128/25" refused: overlaps this node's block 10.244.7.0/24`},
		{"node-d", []string{"--host-ipv4", "192.0.2.22", "--block", "10.244.9.0/24", "--vtep-mac", "01:00:5e:00:00:01"}, `vtepMAC "01:00:5e:00:00:01" refused`},
		{"node-e", []string{"--host-ipv4", "192.0.2.20", "--block", "10.244.10.0/24"}, `hostIPv4 "192.0.2.20" refused: is node node-b's`},
		{"node-f", []string{"--host-ipv4", "192.0.2.10", "--block", "10.244.11.0/24"}, `refused`},
		{"Bad_Name", []string{"--host-ipv4", "192.0.2.23", "--block", "10.244.12.0/24"}, `"Bad_Name"`},
	} {
		_, errs, code := tn.nodesCmd("add", append([]string{c.name}, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("nodes add %s %v: exit %d, stderr %q; want a refusal naming %q", c.name, c.args, code, errs, c.want)
		}
		if _, err := os.Lstat(filepath.Join(tn.stateDir, "nodes", c.name+".json")); !os.IsNotExist(err) {
			t.Errorf("refused record %s was written (%v)", c.name, err)
		}
	}
	if _, errs, code := tn.nodesCmd("add", "node-b", "--host-ipv4", "192.0.2.30", "--block", "10.244.8.0/24"); code == 0 || !strings.Contains(errs, "--replace") {
		t.Errorf("nodes add over an existing record: exit %d %q, want a refusal pointing at --replace", code, errs)
	}
	if _, errs, code := tn.nodesCmd("remove", "node-a"); code == 0 || !strings.Contains(errs, "this node") {
		t.Errorf("nodes remove of this node's own record: exit %d %q, want a refusal", code, errs)
	}

	out, _, code = tn.nodesCmd("list")
	if code != 0 || !strings.Contains(out, "node-b  192.0.2.20") || !strings.Contains(out, "this node") {
		t.Errorf("nodes list: exit %d:\n%s", code, out)
	}
	out, _, code = tn.nodesCmd("show", "node-b", "--output", "json")
	if code != 0 || !strings.Contains(out, `"vtepMAC": "66:aa:bb:cc:dd:02"`) {
		t.Errorf("nodes show node-b: exit %d:\n%s", code, out)
	}

	// A record copied from node-b's own state directory goes in with --from.
	if _, errs, code := tn.nodesCmd("remove", "node-b"); code != 0 {
		t.Fatalf("nodes remove node-b: exit %d: %s", code, errs)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "route to node-b gone", func() bool { return !tn.hasRoute(v4, route) })
	file := filepath.Join(t.TempDir(), "node-b.json")
	if err := os.WriteFile(file, []byte(`{"version":1,"name":"node-b","hostIPv4":"192.0.2.20","blocks":["10.244.8.0/24"],`+
		`"vtepMAC":"66:aa:bb:cc:dd:02","tunnelIPv4":"10.244.8.0","updated":"2026-01-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := tn.nodesCmd("add", "--from", file); code != 0 {
		t.Fatalf("nodes add --from: exit %d: %s", code, errs)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "route to node-b again", func() bool { return tn.hasRoute(v4, route) })
}

// BenchmarkStatusKernel measures `routeletd status` on a node with 250
// pods and 1,000 VXLAN peers, all programmed by a real daemon: through
// the running daemon's state socket ("daemon"), the routeletd binary
// asking it ("binary"), and, the daemon stopped, built from the state
// directory and the kernel in process ("offline", kernel reads counted).
func BenchmarkStatusKernel(b *testing.B) {
	needRoot(b)
	const pods, peers = 250, 1000
	tn := benchNode(b, pods)
	for i := range pods {
		writeRecord(b, tn, i)
	}
	writePeerRecords(b, tn.store, peers, time.Now())
	flags := []string{"--log-level=info", "--pod-cidr=10.244.8.0/24", "--encapsulation=vxlan"}
	d := tn.startDaemon(flags...)
	tn.waitReady()
	healthy := func(st *debugapi.State) bool {
		if len(st.Workloads) != pods || len(st.Peers) != peers {
			return false
		}
		for _, t := range st.Tables {
			if t.Programmed != t.Desired {
				return false
			}
		}
		for _, p := range st.Peers {
			if !p.Routes.Present || !p.ARP.Present || !p.FDB.Present || !p.Allowlist.Present {
				return false
			}
		}
		return true
	}
	get := func() *debugapi.State {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := debugapi.Get(ctx, tn.stateDir)
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	netnstest.Eventually(b, 60*time.Second, "every pod and peer programmed", func() bool { return healthy(get()) })

	b.Run("daemon", func(b *testing.B) {
		for b.Loop() {
			get()
		}
	})
	b.Run("binary", func(b *testing.B) {
		for b.Loop() {
			if _, errs, code := tn.runIn(tn.statusFlags(append(flags, "--output=json")...)...); code != 0 {
				b.Fatalf("status: exit %d: %s", code, errs)
			}
		}
	})
	if err := d.stop(b); err != nil {
		b.Fatal(err)
	}
	cfg := testConfig(b, append([]string{"--node-name=node-a", "--state-dir=" + tn.stateDir, "--pod-cidr=" + tn.podCIDR}, flags...)...)
	b.Run("offline", func(b *testing.B) {
		var reads int64
		err := tn.node.NS.Do(func(ns.NetNS) error {
			nl, err := inspect.NewNetlink()
			if err != nil {
				return err
			}
			defer nl.Close()
			c := &inspect.Counting{R: nl}
			var st *debugapi.State
			for b.Loop() {
				onl, err := overlay.NewKernel()
				if err != nil {
					return err
				}
				host, err := netguard.ReadHost(nil, cfg.RouteProtocol, ownLink(cfg))
				if err != nil {
					return err
				}
				if st, err = offlineStatus(cfg, "routeletd is not running", c, onl, host, time.Now()); err != nil {
					return err
				}
			}
			reads = c.Reads()
			if !healthy(st) {
				return fmt.Errorf("offline status of the stopped daemon's node is not healthy")
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(reads)/float64(b.N), "kernel-reads/op")
	})
}
