package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// parseState decodes status --output json.
func parseState(out string) (*statusapi.State, error) {
	var st statusapi.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("status JSON: %w: %s", err, out)
	}
	return &st, nil
}

// statusFlags are the daemon's flags as startDaemon passes them, for the
// status subcommand (it reads the same configuration).
func (tn *testNode) statusFlags(extra ...string) []string {
	return append([]string{"status", "--node-name=node-a", "--state-dir=" + tn.stateDir, "--pod-cidr=" + tn.podCIDR}, extra...)
}

// statusJSON runs `routeletd status --output json` in the node.
func (tn *testNode) statusJSON(extra ...string) (*statusapi.State, error) {
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
func peerOf(st *statusapi.State, name string) (statusapi.Peer, bool) {
	for _, p := range st.Peers {
		if p.Name == name {
			return p, true
		}
	}
	return statusapi.Peer{}, false
}

// healthyPeer reports whether every check towards node-b passed over the
// overlay.
func healthyPeer(p statusapi.Peer) bool {
	return p.Path == statusapi.PathOverlay && p.Device == "vxlan.calico" &&
		p.Routes.Wanted && p.Routes.Present && p.ARP.Wanted && p.ARP.Present &&
		p.FDB.Wanted && p.FDB.Present && p.Allowlist.Wanted && p.Allowlist.Present
}

// hasRepair reports whether st lists a repair of object.
func hasRepair(st *statusapi.State, object string) bool {
	return slices.ContainsFunc(st.Repairs, func(r statusapi.Repair) bool { return r.Object == object })
}

// deletePeerFDB deletes node-b's FDB entry on the VXLAN device (as
// `bridge fdb del` by an operator).
func (tn *testNode) deletePeerFDB() {
	tn.t.Helper()
	if _, err := netnstest.Exec(context.Background(), tn.node.NS, "bridge", "fdb", "del", "66:aa:bb:cc:dd:02", "dev", "vxlan.calico",
		"dst", "192.0.2.20", "self"); err != nil {
		tn.t.Fatal(err)
	}
}

// repairsLastHour counts st's repairs of the last hour.
func repairsLastHour(st *statusapi.State) int { return st.RepairsSince(time.Now().Add(-time.Hour)) }
