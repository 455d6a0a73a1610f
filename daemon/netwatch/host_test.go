package netwatch

import (
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostRecorder counts host changes.
type hostRecorder struct {
	recorder
	changes int
}

func (h *hostRecorder) OnHostChange() { h.changes++ }

// counter returns a check that event makes h hear of want host changes.
func (h *hostRecorder) counter(t *testing.T) func(what string, want int, event func()) {
	return func(what string, want int, event func()) {
		t.Helper()
		before := h.changes
		event()
		if got := h.changes - before; got != want {
			t.Errorf("%s: %d host changes, want %d", what, got, want)
		}
	}
}

// TestHostChanges: an owner of host changes hears of every address and
// link event and of main-table routes of other protocols, not of its own
// protocol's routes, other tables or neighbours; other owners hear of
// none of it.
func TestHostChanges(t *testing.T) {
	w := fakeWatcher(map[int]string{3: "eth0", 5: "vxlan.calico"})
	h, other := &hostRecorder{}, &hostRecorder{}
	w.Register("host", Interest{Host: true, OwnProtocols: []int{80}}, h)
	w.Register("other", Interest{Names: []string{"eth0"}}, other)
	count := h.counter(t)
	count("address added", 1, func() {
		w.Addr(netlink.AddrUpdate{LinkAddress: net.IPNet{IP: net.ParseIP("10.250.5.1"), Mask: net.CIDRMask(32, 32)}, LinkIndex: 3, NewAddr: true})
	})
	count("address removed", 1, func() { w.Addr(netlink.AddrUpdate{LinkIndex: 3}) })
	count("link", 1, func() { w.Link(netlink.LinkUpdate{Link: veth(9, "own0", true)}) })
	count("static route", 1, func() { w.Route(route(unix.RTM_NEWROUTE, 3, "10.250.6.0/25", 4, 254)) })
	count("routelet's route", 0, func() { w.Route(route(unix.RTM_NEWROUTE, 5, "10.244.3.0/26", 80, 254)) })
	count("another table", 0, func() { w.Route(route(unix.RTM_NEWROUTE, 3, "10.250.7.0/24", 4, 100)) })
	count("neighbour", 0, func() {
		w.Neigh(netlink.NeighUpdate{Type: unix.RTM_NEWNEIGH, Neigh: netlink.Neigh{LinkIndex: 3, IP: net.ParseIP("192.0.2.1")}})
	})
	if other.changes != 0 {
		t.Errorf("an owner without Host heard of %d host changes", other.changes)
	}
}

// TestHostIgnoresOwnLinks: the link, address and route events of a link
// the owner ignores (by name and kind, known from its link notification)
// are no host change; the same events on another link, a link of another
// kind under an ignored name, a rename between an ignored and another name
// and an address on a link the watcher knows only by index still are.
func TestHostIgnoresOwnLinks(t *testing.T) {
	w := fakeWatcher(map[int]string{3: "eth0", 12: "cali12"})
	h := &hostRecorder{}
	ignores := func(name, kind string) bool { return strings.HasPrefix(name, "cali") && kind == "veth" }
	w.Register("host", Interest{Host: true, OwnProtocols: []int{80}, HostIgnores: ignores}, h)
	count := h.counter(t)
	ll := func(index int, cidr string) netlink.AddrUpdate {
		ip, n, _ := net.ParseCIDR(cidr)
		return netlink.AddrUpdate{LinkAddress: net.IPNet{IP: ip, Mask: n.Mask}, LinkIndex: index, NewAddr: true}
	}
	count("address on a link known by index only", 1, func() { w.Addr(ll(12, "fe80::1/64")) })
	count("pod veth appears", 0, func() { w.Link(netlink.LinkUpdate{Link: veth(9, "cali9", true)}) })
	count("its link-local address", 0, func() { w.Addr(ll(9, "fe80::ecee:eeff:feee:eeee/64")) })
	count("its kernel fe80::/64 route", 0, func() { w.Route(route(unix.RTM_NEWROUTE, 9, "fe80::/64", 2, 254)) })
	count("a veth not named like a pod's", 1, func() { w.Link(netlink.LinkUpdate{Link: veth(3, "eth0", true)}) })
	count("its address", 1, func() { w.Addr(ll(3, "10.250.5.1/24")) })
	count("vxlan named like a pod veth", 1, func() { w.Link(netlink.LinkUpdate{Link: vxlan(10, "cali10")}) })
	count("its address", 1, func() { w.Addr(ll(10, "10.250.9.1/24")) })
	count("pod veth renamed to a host name", 1, func() { w.Link(netlink.LinkUpdate{Link: veth(9, "uplink9", true)}) })
	count("and back", 1, func() { w.Link(netlink.LinkUpdate{Link: veth(9, "cali9", true)}) })
	count("pod veth deleted", 0, func() {
		w.Link(netlink.LinkUpdate{Header: unix.NlMsghdr{Type: unix.RTM_DELLINK}, Link: veth(9, "cali9", false)})
	})
	count("an address on its index after the delete", 1, func() { w.Addr(ll(9, "10.250.8.1/24")) })
}
