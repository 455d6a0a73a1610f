package netwatch

import (
	"slices"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// netconfRecorder is a recorder that also takes netconf events.
type netconfRecorder struct {
	recorder
	netconfs []NetconfEvent
}

func (r *netconfRecorder) OnNetconf(ev NetconfEvent) {
	r.mu.Lock()
	r.netconfs = append(r.netconfs, ev)
	r.mu.Unlock()
}

// events returns the netconf events so far.
func (r *netconfRecorder) events() []NetconfEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.netconfs)
}

// netconfMsg builds an RTM_NEWNETCONF as the kernel sends it: a netconfmsg
// of family, then the interface index and a forwarding attribute.
func netconfMsg(typ uint16, family byte, index int32) syscall.NetlinkMessage {
	data := []byte{family, 0, 0, 0}
	data = append(data, nl.NewRtAttr(netconfaIfindex, nl.Uint32Attr(uint32(index))).Serialize()...)
	data = append(data, nl.NewRtAttr(2, nl.Uint32Attr(1)).Serialize()...) // NETCONFA_FORWARDING
	return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: typ}, Data: data}
}

func TestParseNetconf(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    syscall.NetlinkMessage
		want netconfUpdate
		ok   bool
	}{
		{"ipv4 interface", netconfMsg(unix.RTM_NEWNETCONF, unix.AF_INET, 7), netconfUpdate{index: 7}, true},
		{"ipv6 interface", netconfMsg(unix.RTM_NEWNETCONF, unix.AF_INET6, 9), netconfUpdate{ipv6: true, index: 9}, true},
		{"ipv4 all", netconfMsg(unix.RTM_NEWNETCONF, unix.AF_INET, netconfIfindexAll), netconfUpdate{index: netconfIfindexAll}, true},
		{"deleted", netconfMsg(unix.RTM_DELNETCONF, unix.AF_INET, 7), netconfUpdate{}, false},
		{"other family", netconfMsg(unix.RTM_NEWNETCONF, unix.AF_MPLS, 7), netconfUpdate{}, false},
		{"short", syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.RTM_NEWNETCONF}, Data: []byte{unix.AF_INET}}, netconfUpdate{}, false},
		{"no index", syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.RTM_NEWNETCONF},
			Data: append([]byte{unix.AF_INET, 0, 0, 0}, nl.NewRtAttr(2, nl.Uint32Attr(1)).Serialize()...)}, netconfUpdate{}, false},
		{"truncated attribute", syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.RTM_NEWNETCONF},
			Data: []byte{unix.AF_INET, 0, 0, 0, 8, 0, 1, 0, 7}}, netconfUpdate{}, false},
	} {
		got, ok := parseNetconf(tc.m)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: parseNetconf = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestNetconfDispatch: an interface's netconf event goes to the owners of
// the interface that asked for netconf events, a node-wide one to every
// owner that asked; owners without Netconf get none.
func TestNetconfDispatch(t *testing.T) {
	w := fakeWatcher(map[int]string{7: "cali1", 8: "eth0"})
	pods, other, deaf := &netconfRecorder{}, &netconfRecorder{}, &netconfRecorder{}
	w.Register("pods", Interest{Prefixes: []string{"cali"}, Netconf: true}, pods)
	w.Register("other", Interest{Names: []string{"eth0"}, Netconf: true}, other)
	w.Register("deaf", Interest{Prefixes: []string{"cali"}}, deaf)
	w.netconf(netconfUpdate{index: 7})
	w.netconf(netconfUpdate{ipv6: true, index: 8})
	w.netconf(netconfUpdate{index: 99}) // unknown to the kernel
	w.netconf(netconfUpdate{ipv6: true, index: netconfIfindexAll})
	w.netconf(netconfUpdate{index: netconfIfindexDefault})
	node6, node4 := NetconfEvent{IPv6: true}, NetconfEvent{}
	if got, want := pods.events(), []NetconfEvent{{Iface: "cali1"}, node6, node4}; !slices.Equal(got, want) {
		t.Errorf("pods got %+v, want %+v", got, want)
	}
	if got, want := other.events(), []NetconfEvent{{IPv6: true, Iface: "eth0"}, node6, node4}; !slices.Equal(got, want) {
		t.Errorf("other got %+v, want %+v", got, want)
	}
	if got := deaf.events(); len(got) != 0 {
		t.Errorf("an owner without Netconf got %+v", got)
	}
}
