package netwatch

import (
	"net"
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

// TestHostChanges: an owner of host changes hears of every address and
// link event and of main-table routes of other protocols, not of its own
// protocol's routes, other tables or neighbours; other owners hear of
// none of it.
func TestHostChanges(t *testing.T) {
	w := fakeWatcher(map[int]string{3: "eth0", 5: "vxlan.calico"})
	h, other := &hostRecorder{}, &hostRecorder{}
	w.Register("host", Interest{Host: true, OwnProtocols: []int{80}}, h)
	w.Register("other", Interest{Names: []string{"eth0"}}, other)
	count := func(what string, want int, event func()) {
		t.Helper()
		before := h.changes
		event()
		if got := h.changes - before; got != want {
			t.Errorf("%s: %d host changes, want %d", what, got, want)
		}
	}
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
