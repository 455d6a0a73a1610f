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
// asked for netconf events. Each setting is changed to the opposite of
// what it is, from a namespace whose defaults are off and from one whose
// defaults are on: a new namespace takes its IPv4 all/default settings
// from the host's (net.core.devconf_inherit_init_net 0, the default), so
// on a host with forwarding on (Docker, podman, kubelet) its veths start
// with forwarding 1, and writing 1 would change nothing and send no event.
func TestNetconfEventsKernel(t *testing.T) {
	keys := []struct {
		key  string
		want NetconfEvent
	}{
		{"net/ipv4/conf/calinc0/proxy_arp", NetconfEvent{Iface: "calinc0"}},
		{"net/ipv4/conf/calinc0/forwarding", NetconfEvent{Iface: "calinc0"}},
		{"net/ipv6/conf/calinc0/proxy_ndp", NetconfEvent{IPv6: true, Iface: "calinc0"}},
		{"net/ipv6/conf/calinc0/forwarding", NetconfEvent{IPv6: true, Iface: "calinc0"}},
		{"net/ipv4/ip_forward", NetconfEvent{}},
	}
	for _, start := range []string{"0", "1"} {
		t.Run("defaults="+start, func(t *testing.T) {
			// The namespace's all and default values, set before the veth
			// exists: the veth takes its settings from default.
			defaults := []string{
				"net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding", "net/ipv4/conf/default/proxy_arp",
				"net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding", "net/ipv6/conf/default/proxy_ndp",
			}
			setDefaults := func(n *netnstest.NS) {
				for _, key := range defaults {
					if _, err := netnstest.Sysctl(n.NetNS, key, start); err != nil {
						t.Fatal(err)
					}
				}
			}
			pods, deaf := &netconfRecorder{}, &netconfRecorder{}
			n, _ := startWithVeth(t, New(nil), "calinc", setDefaults, func(w *Watcher) {
				w.Register("pods", Interest{Names: []string{"calinc0"}, Netconf: true}, pods)
				w.Register("deaf", Interest{Prefixes: []string{"cali"}}, deaf)
			})
			for _, tc := range keys {
				was, err := netnstest.Sysctl(n.NetNS, tc.key, "")
				if err != nil {
					t.Fatal(err)
				}
				if was != start {
					t.Fatalf("%s = %s in a namespace whose defaults are %s", tc.key, was, start)
				}
				flip := "1"
				if was == "1" {
					flip = "0"
				}
				before := len(pods.events())
				seen := func() bool { return slices.Contains(pods.events()[before:], tc.want) }
				// A write that finds RTNL taken (another namespace being
				// torn down) is restarted by the kernel after it changed
				// the value, and the restarted write notifies nothing:
				// when no event came, the value is written back and
				// flipped again, at most twice.
				for try := 0; ; try++ {
					if _, err := netnstest.Sysctl(n.NetNS, tc.key, flip); err != nil {
						t.Fatal(err)
					}
					if try == 2 {
						netnstest.Eventually(t, 10*time.Second, tc.key+"="+flip+" event", seen)
						break
					}
					if within(2*time.Second, seen) {
						break
					}
					t.Logf("%s=%s: no event in 2s, writing it again", tc.key, flip)
					if _, err := netnstest.Sysctl(n.NetNS, tc.key, was); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, ev := range pods.events() {
				if ev.Iface != "" && ev.Iface != "calinc0" {
					t.Errorf("event for an interface the owner does not own: %+v", ev)
				}
			}
			if got := deaf.events(); len(got) != 0 {
				t.Errorf("an owner without Netconf got %+v", got)
			}
		})
	}
}

// within polls cond every 10 ms for at most d and reports whether it held.
func within(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
