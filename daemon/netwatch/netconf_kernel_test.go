package netwatch

import (
	"slices"
	"testing"
	"time"

	"github.com/routelet/routelet/internal/netnstest"
)

// TestNetconfEventsKernel: in a fresh namespace, the watcher reports a
// change of a veth's IPv4 proxy_arp and forwarding and IPv6 proxy_ndp and
// forwarding as a netconf event naming the veth and its family, a change of
// the node's ip_forward as a node-wide one, and only to the owner that
// asked for netconf events.
func TestNetconfEventsKernel(t *testing.T) {
	pods, deaf := &netconfRecorder{}, &netconfRecorder{}
	n, _ := startWithVeth(t, New(nil), "calinc", func(w *Watcher) {
		w.Register("pods", Interest{Names: []string{"calinc0"}, Netconf: true}, pods)
		w.Register("deaf", Interest{Prefixes: []string{"cali"}}, deaf)
	})
	for _, tc := range []struct {
		key, value string
		want       NetconfEvent
	}{
		{"net/ipv4/conf/calinc0/proxy_arp", "1", NetconfEvent{Iface: "calinc0"}},
		{"net/ipv4/conf/calinc0/forwarding", "1", NetconfEvent{Iface: "calinc0"}},
		{"net/ipv6/conf/calinc0/proxy_ndp", "1", NetconfEvent{IPv6: true, Iface: "calinc0"}},
		{"net/ipv6/conf/calinc0/forwarding", "1", NetconfEvent{IPv6: true, Iface: "calinc0"}},
		{"net/ipv4/ip_forward", "1", NetconfEvent{}},
	} {
		before := len(pods.events())
		if _, err := netnstest.Sysctl(n.NetNS, tc.key, tc.value); err != nil {
			t.Fatal(err)
		}
		netnstest.Eventually(t, 10*time.Second, tc.key+" event", func() bool {
			return slices.Contains(pods.events()[before:], tc.want)
		})
	}
	for _, ev := range pods.events() {
		if ev.Iface != "" && ev.Iface != "calinc0" {
			t.Errorf("event for an interface the owner does not own: %+v", ev)
		}
	}
	if got := deaf.events(); len(got) != 0 {
		t.Errorf("an owner without Netconf got %+v", got)
	}
}
