package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/termsafe/termsafetest"
)

// wgState is a running daemon's state with a WireGuard device of two
// peers (one with a handshake 12s before the state was taken, one
// never) and a peer without a key.
func wgState() *statusapi.State {
	age := int64(12)
	return &statusapi.State{
		Source: statusapi.SourceDaemon, Loop: true, Taken: statusNow,
		Node:      statusapi.Node{Name: "node-a", Datastore: "file", Mode: "vxlan"},
		Readiness: statusapi.Readiness{Ready: true, Updated: statusNow},
		WireGuard: &statusapi.WireGuard{
			Implementation: "userspace", Device: "wireguard.cali", PublicKey: "pubA=", Port: 51820, MTU: 1440, Up: true,
			Peers: []statusapi.WireGuardPeer{
				{Node: "node-b", PublicKey: "pubB=", Endpoint: "192.0.2.2:51820", Configured: true,
					LatestHandshake: statusNow.Add(-12 * time.Second), HandshakeAgeSeconds: &age, RxBytes: 2048, TxBytes: 100},
				{Node: "node-c", PublicKey: "pubC=", Endpoint: "192.0.2.3:51821"},
			},
			PeersWithoutKey: []string{"node-d"},
		},
	}
}

// TestStatusWireGuardBlock: the text shows the device's implementation,
// name, port and key, and per peer its endpoint, handshake age ("12s
// ago", "never") and counters; a peer without a key is named.
func TestStatusWireGuardBlock(t *testing.T) {
	text := renderStatus(wgState(), statusNow)
	for _, want := range []string{
		"WireGuard: userspace device wireguard.cali (up, mtu 1440), port 51820, public key pubA=",
		"NODE", "node-b  192.0.2.2:51820  12s ago", "2.0 KiB", "100 B", "pubB=",
		"node-c  192.0.2.3:51821  never",
		"node-d: no WireGuard key: its pods are unreachable (not sent in plaintext)",
		"wireguard peer node-c (key pubC=): not configured on wireguard.cali as wanted",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q:\n%s", want, text)
		}
	}
	// Later than the state was taken, the age has grown.
	if later := renderStatus(wgState(), statusNow.Add(3*time.Second)); !strings.Contains(later, "15s ago") {
		t.Errorf("3s after the state was taken, want the handshake 15s ago:\n%s", later)
	}
	// Without encryption there is no block.
	st := wgState()
	st.WireGuard = nil
	if text := renderStatus(st, statusNow); strings.Contains(text, "WireGuard") {
		t.Errorf("no WireGuard state, yet the text names it:\n%s", text)
	}
}

// TestStatusWireGuardEscapes: values from records and the device (node
// names, endpoints, keys, the device's error) are escaped.
func TestStatusWireGuardEscapes(t *testing.T) {
	st := wgState()
	h := termsafetest.Hostile
	st.WireGuard.Error = h
	st.WireGuard.Device = h
	st.WireGuard.Peers[0].Node, st.WireGuard.Peers[0].Endpoint, st.WireGuard.Peers[0].PublicKey = h, h, h
	st.WireGuard.PeersWithoutKey = []string{h}
	checkNoRawControls(t, "wireguard status", renderStatus(st, statusNow), 6)
}
