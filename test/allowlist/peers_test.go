package allowlist

import (
	"slices"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// TestHostilePeerRecordFirewall: a peer record claiming 128.0.0.0/1 (which
// holds the outside host) does not make that space a pod pool, so pod
// traffic to the outside is still masqueraded, while the record's good
// block and host IP are members as usual; a record carrying the node's own
// host IP is refused whole and adds no member. Both are named in
// routelet_peer_values_refused.
func TestHostilePeerRecordFirewall(t *testing.T) { eachBackend(t, testHostilePeerRecordFirewall) }

func testHostilePeerRecordFirewall(t *testing.T, backend string) {
	c := newLAN(t, backend)
	c.writeNode("node-b", peerIP, peerBlock)
	c.startDaemon("--encapsulation=vxlan")
	pod, _ := c.addPod(t, "pod1")
	member := func(set, m string) func() bool {
		return func() bool {
			got, _ := c.setMembers(set)
			return slices.Contains(got, m)
		}
	}
	if err := c.store.PutNode(&state.Node{Version: 1, Name: "hostile", HostIPv4: "192.0.2.77",
		Blocks: []string{"128.0.0.0/1", "10.244.77.0/24"}, Updated: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 5*time.Second, "the hostile record's good block in routelet-pools", member("routelet-pools", "10.244.77.0/24"))
	if member("routelet-pools", "128.0.0.0/1")() {
		t.Error("routelet-pools holds the refused 128.0.0.0/1")
	}
	for _, m := range []string{peerIP + "/32", "192.0.2.77/32"} {
		if !member("routelet-vxlan-peers", m)() {
			t.Errorf("routelet-vxlan-peers lacks %s", m)
		}
	}
	out := listenUDP(t, c.outside, "9000")
	sendUDP(t, pod, outsideIP+":9000", "to-outside")
	if src := sourceOf(t, out, "to-outside"); src != nodeIP {
		t.Errorf("outside host saw pod traffic from %q, want the node's %s (masqueraded)", src, nodeIP)
	}
	if v := c.metric(`routelet_peer_values_refused{field="block",node="hostile",value="128.0.0.0/1"}`); v != 1 {
		t.Errorf("refusal metric for hostile's 128.0.0.0/1 = %v, want 1", v)
	}

	if err := c.store.PutNode(&state.Node{Version: 1, Name: "impostor", HostIPv4: nodeIP,
		Blocks: []string{"10.244.88.0/24"}, Updated: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 5*time.Second, "impostor refused in /metrics", func() bool {
		v, ok := c.metricValue(`routelet_peer_values_refused{field="record",node="impostor",value="impostor"}`)
		return ok && v == 1
	})
	if member("routelet-pools", "10.244.88.0/24")() || member("routelet-vxlan-peers", nodeIP+"/32")() {
		t.Error("the refused record's block or host IP became a member")
	}
}
