package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/netnstest"
)

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

	fi, err := os.Lstat(filepath.Join(tn.stateDir, statusapi.SocketName))
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state socket: %v, %v; want a socket with mode 0600", fi, err)
	}
	var st *statusapi.State
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status showing the pod and a healthy peer", func() bool {
		st, err = tn.statusJSON()
		if err != nil {
			t.Log(err)
			return false
		}
		peer, _ := peerOf(st, "node-b")
		return len(st.Workloads) == 1 && st.Workloads[0].Routes.Present && healthyPeer(peer)
	})
	if st.Source != statusapi.SourceDaemon || !st.Loop || !st.Readiness.Ready || st.Node.Name != "node-a" || st.Node.Mode != "vxlan" ||
		st.Node.HostIPv4 != "192.0.2.10" || !st.Datastore.OK || st.Datastore.Valid != 1 || st.LastResync.IsZero() {
		t.Errorf("status = source %s loop %v readiness %+v node %+v datastore %+v lastResync %v",
			st.Source, st.Loop, st.Readiness, st.Node, st.Datastore, st.LastResync)
	}
	if len(st.Blocks) != 1 || st.Blocks[0].CIDR != "10.244.7.0/24" || st.Blocks[0].Used != 1 || st.Blocks[0].Size != 254 {
		t.Errorf("blocks = %+v, want 10.244.7.0/24 with 1 of 254 used", st.Blocks)
	}
	if n := repairsLastHour(st); n != 0 {
		t.Errorf("repairs before any tampering = %d (%+v)", n, st.Repairs)
	}

	// Tamper: delete the pod's route; the daemon puts it back and counts it.
	if _, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "route", "del", p.ip, "dev", p.iface); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status counting the repaired route", func() bool {
		st, err = tn.statusJSON()
		return err == nil && repairsLastHour(st) > 0 && st.Workloads[0].Routes.Present
	})

	// The same for node-b's FDB entry on the VXLAN device.
	tn.deletePeerFDB()
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status counting the repaired FDB entry", func() bool {
		st, err = tn.statusJSON()
		if err != nil {
			return false
		}
		peer, _ := peerOf(st, "node-b")
		return hasRepair(st, "fdb") && healthyPeer(peer)
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
	if _, err := os.Lstat(filepath.Join(tn.stateDir, statusapi.SocketName)); !os.IsNotExist(err) {
		t.Errorf("state socket left after a clean stop: %v", err)
	}

	st, err := tn.statusJSON("--encapsulation=vxlan")
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := peerOf(st, "node-b")
	if st.Source != statusapi.SourceOffline || st.Readiness.Ready || !strings.Contains(st.Readiness.Reason, "not running") ||
		len(st.Workloads) != 1 || !st.Workloads[0].Routes.Present || !healthyPeer(peer) || st.Node.HostIPv4 != "192.0.2.10" {
		t.Fatalf("offline status = source %s readiness %+v workloads %+v peer %+v node %+v", st.Source, st.Readiness, st.Workloads, peer, st.Node)
	}
	out, _, _ := tn.runIn(tn.statusFlags("--encapsulation=vxlan")...)
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "routeletd is NOT RUNNING") {
		t.Errorf("first line of status with the daemon stopped = %q, want it to say so:\n%s", first, out)
	}

	// The FDB entry for node-b's VTEP goes while nobody repairs it.
	tn.deletePeerFDB()
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
	// The socket answers from before the first node-IP attempt ("starting");
	// every answer until the default route exists is not ready, and one
	// soon names the node IP.
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status from the waiting daemon naming the node IP", func() bool {
		st, err := tn.statusJSON()
		if err != nil || st.Source != statusapi.SourceDaemon {
			return false
		}
		if st.Readiness.Ready || st.Loop {
			t.Fatalf("status while waiting for the node IP = loop %v readiness %+v, want not ready", st.Loop, st.Readiness)
		}
		return strings.Contains(st.Readiness.Reason, "node IP")
	})
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

// TestStatusAfterKill: a daemon killed with SIGKILL leaves its socket;
// status then says the daemon is not running, and the next daemon
// replaces the stale socket and answers on it.
func TestStatusAfterKill(t *testing.T) {
	tn := newTestNode(t, true)
	d := tn.startDaemon()
	tn.waitReady()
	d.kill9(t)
	<-d.proc.Done()
	if _, err := os.Lstat(filepath.Join(tn.stateDir, statusapi.SocketName)); err != nil {
		t.Fatalf("no socket left by the killed daemon: %v", err)
	}
	st, err := tn.statusJSON()
	if err != nil || st.Source != statusapi.SourceOffline || !strings.Contains(st.Readiness.Reason, "not running") {
		t.Fatalf("status after SIGKILL = %+v, %v; want offline, not running", st, err)
	}
	tn.startDaemon()
	tn.waitReady()
	netnstest.Eventually(t, netnstest.ReadyTimeout, "status from the new daemon", func() bool {
		st, err := tn.statusJSON()
		return err == nil && st.Source == statusapi.SourceDaemon && st.Readiness.Ready
	})
}
