package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/internal/termsafe/termsafetest"
)

// bgpState is a running daemon's state with a BGP speaker of two
// sessions (one established, one not) that refused a learned route.
func bgpState() *statusapi.State {
	return &statusapi.State{
		Source: statusapi.SourceDaemon, Loop: true, Taken: statusNow,
		Node:      statusapi.Node{Name: "node-a", Datastore: "file", Mode: "none"},
		Readiness: statusapi.Readiness{Ready: true, Updated: statusNow},
		BGP: &statusapi.BGP{
			ASN: 64512, RouterID: "192.0.2.1", Programmed: true, Converged: true,
			Peers: []statusapi.BGPPeer{
				{Address: "192.0.2.2", ASN: 64512, Description: "mesh node-b", State: "established", Since: statusNow.Add(-time.Minute),
					Received: 2, Accepted: 1, Advertised: 1, EndOfRIB: true},
				{Address: "192.0.2.254", Port: 1179, ASN: 65000, Description: "global", RouteReflector: true, State: "active", LastError: "connection refused"},
			},
			Announced: []string{"10.244.1.0/24"}, Learned: 2, Accepted: 1,
			RefusedTotal: map[string]uint64{"outside-pools": 3}, RefusedNow: 1,
			Refused: []statusapi.BGPRefusal{{Prefix: "172.16.0.0/16", NextHop: "192.0.2.2", Peer: "192.0.2.2", Reason: "outside-pools",
				Detail: "not inside a known node block", Since: statusNow}},
		},
	}
}

// TestStatusBGPBlock: the text sums the speaker up, lists every session
// with its state and counts, the announced prefixes and the refusals; a
// session not established and the refusals are problems.
func TestStatusBGPBlock(t *testing.T) {
	text := renderStatus(bgpState(), statusNow)
	for _, want := range []string{
		"BGP:             AS 64512, learned routes programmed; 2 sessions, 1 established; 1 prefixes announced; 2 learned, 1 accepted, 1 refused",
		"BGP: AS 64512, router ID 192.0.2.1, learned routes programmed (converged)",
		"PEER",
		"Announced: 10.244.1.0/24",
		"Refused: 1 now; since start: outside-pools 3",
		"172.16.0.0/16 from 192.0.2.2 next hop 192.0.2.2: outside-pools: not inside a known node block",
		"bgp peer 192.0.2.254 (global): active: connection refused",
		"bgp: 1 learned routes refused",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q:\n%s", want, text)
		}
	}
	for _, row := range [][]string{
		{"192.0.2.2 ", "64512", "mesh node-b", "established", "(1m0s ago)", "2         1         1", "✓"},
		{"192.0.2.254 port 1179", "65000", "global (route reflector)", "active", "never", "connection refused"},
	} {
		if !slices.ContainsFunc(strings.Split(text, "\n"), func(l string) bool {
			return !slices.ContainsFunc(row, func(w string) bool { return !strings.Contains(l, w) })
		}) {
			t.Errorf("status text has no session row with %q:\n%s", row, text)
		}
	}
	st := bgpState()
	st.BGP.Programmed, st.BGP.Converged, st.BGP.Adopted = false, false, 4
	if text := renderStatus(st, statusNow); !strings.Contains(text, "announce only (converging: keeping 4 routes of the previous run)") {
		t.Errorf("announce only, converging: text\n%s", text)
	}
	st.BGP = nil
	if text := renderStatus(st, statusNow); strings.Contains(text, "BGP") {
		t.Errorf("no BGP state, yet the text names it:\n%s", text)
	}
}

// TestStatusBGPEscapes: values from peers, records and the speaker are
// escaped.
func TestStatusBGPEscapes(t *testing.T) {
	st := bgpState()
	h := termsafetest.Hostile
	st.BGP.Error = h
	st.BGP.Peers[1].Description, st.BGP.Peers[1].LastError, st.BGP.Peers[1].State = h, h, h
	st.BGP.Refused[0].Detail = h
	st.BGP.Announced = []string{h}
	checkNoRawControls(t, "bgp status", renderStatus(st, statusNow), 6)
}
