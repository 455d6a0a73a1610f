package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/debugapi"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// runIn runs the built routeletd with args inside the node; stdout and
// stderr apart (JSON on stdout, logs on stderr).
func (tn *testNode) runIn(args ...string) (stdout, stderr string, code int) {
	tn.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tn.node.NS.Do(func(ns.NetNS) error {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "routeletd"), args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		return cmd.Run()
	})
	return out.String(), errb.String(), exitCode(err)
}

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
	var st debugapi.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("status JSON: %w: %s", err, out)
	}
	return &st, nil
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
// route, ARP, FDB and allowlist entry, and a route deleted behind the
// daemon's back counted as drift repaired.
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

	out, _, code := tn.runIn(tn.statusFlags()...)
	for _, want := range []string{"routeletd is running", "Ready:", "yes", "node-b", "10.244.7.0/24 1/254 used",
		"in the last hour (route ", "No problems"} {
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
	vx, err := tn.nl.LinkByName("vxlan.calico")
	if err != nil {
		t.Fatal(err)
	}
	fdb := &netlink.Neigh{LinkIndex: vx.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT, HardwareAddr: mustMAC(t, "66:aa:bb:cc:dd:02"), IP: []byte{192, 0, 2, 20}}
	if err := tn.nl.NeighDel(fdb); err != nil {
		t.Fatalf("delete fdb entry: %v", err)
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

// mustMAC parses a MAC.
func mustMAC(t *testing.T, s string) []byte {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
