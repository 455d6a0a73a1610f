package podguard

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
)

// linkSender writes whole Ethernet frames to one device over an
// AF_PACKET socket, as a pod with CAP_NET_RAW can.
type linkSender struct {
	fd, ifindex int
	mac         net.HardwareAddr
}

// openSender opens a linkSender on dev inside n, closed at t's cleanup.
func openSender(t *testing.T, n *netnstest.NS, dev string) *linkSender {
	t.Helper()
	s := &linkSender{fd: -1}
	err := n.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		// Protocol 0: the socket sends and receives nothing.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		s.fd, s.ifindex, s.mac = fd, ifi.Index, ifi.HardwareAddr
		return nil
	})
	if err != nil {
		t.Fatalf("packet socket on %s: %v", dev, err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return s
}

// send writes frame b; n copies.
func (s *linkSender) send(t *testing.T, b []byte, n int) {
	t.Helper()
	for range n {
		if err := unix.Sendto(s.fd, b, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex}); err != nil {
			t.Fatalf("send %d bytes on ifindex %d: %v", len(b), s.ifindex, err)
		}
	}
}

// udpCounter counts the datagrams a UDP socket receives, by their text up
// to the first '#' (the key the tests put first), and in all.
type udpCounter struct {
	mu    sync.Mutex
	byKey map[string]int
	total int
}

// listenUDP counts what a UDP socket bound to addr inside n receives until
// t's cleanup.
func listenUDP(t *testing.T, n *netnstest.NS, addr string) *udpCounter {
	t.Helper()
	var c *net.UDPConn
	err := n.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	u := &udpCounter{byKey: map[string]int{}}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			m, err := c.Read(buf)
			if err != nil {
				return
			}
			key, _, _ := strings.Cut(string(buf[:m]), "#")
			u.mu.Lock()
			u.byKey[key]++
			u.total++
			u.mu.Unlock()
		}
	}()
	return u
}

// count is how many datagrams with key arrived.
func (u *udpCounter) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byKey[key]
}

// all is how many datagrams arrived.
func (u *udpCounter) all() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total
}

// setVLANOffload turns dev's VLAN tag offloads (rxvlan, txvlan and their
// 802.1ad forms) on or off inside n.
func setVLANOffload(t *testing.T, n *netnstest.NS, dev string, on bool) {
	t.Helper()
	names := []string{"rx-vlan-hw-parse", "tx-vlan-hw-insert", "rx-vlan-stag-hw-parse", "tx-vlan-stag-hw-insert"}
	err := n.Do(func() error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer e.Close()
		want := map[string]bool{}
		for _, f := range names {
			want[f] = on
		}
		if err := e.Change(dev, want); err != nil {
			return err
		}
		have, err := e.Features(dev)
		if err != nil {
			return err
		}
		for _, f := range names {
			if have[f] != on {
				return fmt.Errorf("feature %s is %v after setting it %v", f, have[f], on)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("VLAN offloads of %s: %v", dev, err)
	}
}

// tagPusher is a tc program on a device's egress that pushes VLAN tags
// (VID 0) onto every frame through bpf_skb_vlan_push, as the kernel's VLAN
// devices do: the outer tag goes into the packet's metadata, and the
// device writes it into the frame only when its txvlan offload is off.
type tagPusher struct {
	h    *netlink.Handle
	link int
	fds  map[string]int // a loaded program per tag set, by its TPIDs
}

// newTagPusher readies dev inside n (a clsact qdisc) for tag programs.
func newTagPusher(t *testing.T, n *netnstest.NS, dev string) *tagPusher {
	t.Helper()
	l, err := n.Handle.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	qd := &netlink.GenericQdisc{QdiscType: "clsact", QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := n.Handle.QdiscAdd(qd); err != nil {
		t.Fatalf("clsact on %s: %v", dev, err)
	}
	p := &tagPusher{h: n.Handle, link: l.Attrs().Index, fds: map[string]int{}}
	t.Cleanup(func() {
		for _, fd := range p.fds {
			unix.Close(fd)
		}
	})
	return p
}

// filter is the egress filter slot the programs take in turn.
func (p *tagPusher) filter(fd int) *netlink.BpfFilter {
	return &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: p.link, Parent: netlink.HANDLE_MIN_EGRESS,
		Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 1}, Fd: fd, Name: "push", DirectAction: true}
}

// push makes every frame the device sends from now on get tags (TPIDs,
// outermost first); none stops that.
func (p *tagPusher) push(t *testing.T, tags []uint16) {
	t.Helper()
	if len(tags) == 0 {
		if err := p.h.FilterDel(p.filter(0)); err != nil {
			t.Fatalf("delete tag filter: %v", err)
		}
		return
	}
	key := fmt.Sprint(tags)
	fd, ok := p.fds[key]
	if !ok {
		var err error
		if fd, err = loadTagProgram(tags); err != nil {
			t.Fatalf("tag program %#x: %v", tags, err)
		}
		p.fds[key] = fd
	}
	if err := p.h.FilterReplace(p.filter(fd)); err != nil {
		t.Fatalf("tag filter %#x: %v", tags, err)
	}
}

// loadTagProgram loads a BPF_PROG_TYPE_SCHED_CLS program (direct action)
// that calls bpf_skb_vlan_push for each of tags, innermost first, and
// returns TC_ACT_OK.
func loadTagProgram(tags []uint16) (int, error) {
	type insn struct {
		code uint8
		regs uint8 // dst in the low nibble, src in the high one
		off  int16
		imm  int32
	}
	const (
		movImm, movReg, call, exit = 0xb7, 0xbf, 0x85, 0x95 // BPF_ALU64|BPF_MOV|BPF_K, …|BPF_X, BPF_JMP|BPF_CALL, BPF_JMP|BPF_EXIT
		skbVlanPush                = 18                     // BPF_FUNC_skb_vlan_push
	)
	prog := []insn{{code: movReg, regs: 6 | 1<<4}} // r6 = r1 (the skb)
	for i := len(tags) - 1; i >= 0; i-- {
		be := tags[i]>>8 | tags[i]<<8 // the __be16 argument, as the register holds it on a little-endian host
		prog = append(prog,
			insn{code: movReg, regs: 1 | 6<<4},          // r1 = r6
			insn{code: movImm, regs: 2, imm: int32(be)}, // r2 = vlan_proto
			insn{code: movImm, regs: 3},                 // r3 = vlan_tci 0
			insn{code: call, imm: skbVlanPush},          // bpf_skb_vlan_push(r1, r2, r3)
		)
	}
	prog = append(prog, insn{code: movImm}, insn{code: exit}) // return TC_ACT_OK
	license := []byte("GPL\x00")
	logBuf := make([]byte, 4096)
	attr := struct {
		progType, insnCnt uint32
		insns, license    uint64
		logLevel, logSize uint32
		logBuf            uint64
		kernVersion       uint32
		progFlags         uint32
		progName          [16]byte
	}{
		progType: unix.BPF_PROG_TYPE_SCHED_CLS, insnCnt: uint32(len(prog)),
		insns: uint64(uintptr(unsafe.Pointer(&prog[0]))), license: uint64(uintptr(unsafe.Pointer(&license[0]))),
		logLevel: 1, logSize: uint32(len(logBuf)), logBuf: uint64(uintptr(unsafe.Pointer(&logBuf[0]))),
	}
	copy(attr.progName[:], "vlan_push")
	// The verifier gives up with EAGAIN when a signal is pending, and the
	// Go runtime signals its threads (preemption): load again, a few times.
	var fd uintptr
	var errno unix.Errno
	for range 20 {
		fd, _, errno = unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if errno != unix.EAGAIN {
			break
		}
	}
	runtime.KeepAlive(prog)
	runtime.KeepAlive(license)
	if errno != 0 {
		return -1, fmt.Errorf("bpf prog load: %w: %s", errno, strings.TrimRight(string(logBuf), "\x00"))
	}
	return int(fd), nil
}

// linkMAC is dev's address inside n.
func linkMAC(t *testing.T, n *netnstest.NS, dev string) net.HardwareAddr {
	t.Helper()
	l, err := n.Handle.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().HardwareAddr
}

// noRPFilter turns reverse path filtering off in n (for all, new and dev's
// settings), whatever n inherited, so what reaches the node's stack is the
// guard's decision alone.
func noRPFilter(t *testing.T, n *netnstest.NS, dev string) {
	t.Helper()
	for _, c := range []string{"all", "default", dev} {
		if _, err := netnstest.Sysctl(n.NetNS, "net/ipv4/conf/"+c+"/rp_filter", "0"); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	node4, own4, foreign4 = netip.MustParseAddr("10.66.0.1"), netip.MustParseAddr("10.66.0.2"), netip.MustParseAddr("10.66.0.3")
	node6, own6, foreign6 = netip.MustParseAddr("fd66::1"), netip.MustParseAddr("fd66::2"), netip.MustParseAddr("fd66::3")
)

// TestGuardEthertypes: a pod veth carries only IPv4, IPv6 and ARP from the
// pod. Frames with one or two VLAN tags (802.1Q, 802.1ad, QinQ, two
// 802.1Q; VID 0, which the node strips and delivers), whatever their
// source and whether the pod wrote the tags itself or its kernel offloaded
// them (txvlan on or off, the node's rxvlan alike), MPLS, PPPoE, a local
// experimental type and an 802.3 length frame are all dropped and counted;
// a forged VXLAN packet inside two tags never reaches the node's VXLAN
// port. The pod's own untagged IPv4 and IPv6 still arrive.
func TestGuardEthertypes(t *testing.T) {
	const dev = "calipg00004"
	node, pod := podPair(t, dev)
	noRPFilter(t, node, dev)
	nodeMAC := linkMAC(t, node, dev)
	in4, in6 := listenUDP(t, node, "10.66.0.1:9999"), listenUDP(t, node, "[fd66::1]:9999")
	inVXLAN := listenUDP(t, node, fmt.Sprintf("10.66.0.1:%d", DefaultVXLANPort))

	// Tags the pod writes into the frame itself, and tags its kernel
	// adds (kept in the packet's metadata while eth0's txvlan is on,
	// written into the frame while it is off).
	raw := openSender(t, pod, "eth0")
	pusher := newTagPusher(t, pod, "eth0")
	tagSets := []struct {
		name string
		tags []uint16 // TPIDs, outermost first
	}{
		{"802.1Q", []uint16{etherQ}},
		{"802.1ad", []uint16{etherAD}},
		{"QinQ", []uint16{etherAD, etherQ}},
		{"802.1Q+802.1Q", []uint16{etherQ, etherQ}},
	}
	type tagged struct {
		key  string
		in   *udpCounter // where it would arrive; nil: the VXLAN port
		send func(n int)
	}
	// taggedFrames are the IP packets sent inside each tag set, both
	// ways, their keys starting with phase.
	taggedFrames := func(phase string) []tagged {
		var out []tagged
		for _, ts := range tagSets {
			for _, how := range []string{"pod", "kernel"} {
				packets := []struct {
					what     string
					src, dst netip.Addr
					port     uint16
				}{
					{"spoofed IPv4", foreign4, node4, 9999},
					{"spoofed IPv6", foreign6, node6, 9999},
					{"own IPv4", own4, node4, 9999},
					{"own IPv6", own6, node6, 9999},
					{"forged VXLAN", foreign4, node4, DefaultVXLANPort},
				}
				for _, p := range packets {
					key := fmt.Sprintf("%s %s in %s tags by the %s", phase, p.what, ts.name, how)
					data := []byte(key + "#")
					in := in4
					if p.src.Is6() {
						in = in6
					}
					if p.port == DefaultVXLANPort {
						data, in = vxlan(netip.MustParseAddr("10.244.9.2"), netip.MustParseAddr("10.244.1.5"), data), nil
					}
					pkt, typ := ipUDP(p.src, p.dst, p.port, data)
					if how == "pod" {
						b := frame(nodeMAC, raw.mac, ts.tags, typ, pkt)
						out = append(out, tagged{key, in, func(n int) { raw.send(t, b, n) }})
						continue
					}
					b, tags := frame(nodeMAC, raw.mac, nil, typ, pkt), ts.tags
					out = append(out, tagged{key, in, func(n int) {
						pusher.push(t, tags)
						defer pusher.push(t, nil)
						raw.send(t, b, n)
					}})
				}
			}
		}
		return out
	}
	// Untagged frames of other Ethernet types, each holding a spoofed
	// IPv4 packet: none of them may pass the guard.
	spoofed, _ := ipUDP(foreign4, node4, 9999, []byte("other#"))
	snap := append([]byte{0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00}, spoofed...)
	others := []struct {
		name    string
		typ     uint16
		payload []byte
	}{
		{"MPLS unicast", etherMPLS, append([]byte{0, 0, 0x11, 64}, spoofed...)}, // label 0 (IPv4 explicit null), bottom of stack
		{"MPLS multicast", etherMPLSMC, append([]byte{0, 0, 0x11, 64}, spoofed...)},
		{"PPPoE discovery", etherPPPD, append([]byte{0x11, 0x09, 0, 0, 0, 0}, spoofed...)},
		{"PPPoE session", etherPPPS, append([]byte{0x11, 0, 0, 1, byte((len(spoofed) + 2) >> 8), byte(len(spoofed) + 2), 0x00, 0x21}, spoofed...)},
		{"local experimental 0x88b5", etherLocal, spoofed},
		{"802.3 length (LLC/SNAP IPv4)", uint16(len(snap)), snap},
	}
	marker := func(phase string) string {
		key := phase + " marker"
		pkt, typ := ipUDP(own4, node4, 9999, []byte(key+"#"))
		raw.send(t, frame(nodeMAC, raw.mac, nil, typ, pkt), 1)
		return key
	}

	// Without a guard the node takes what the tags hide.
	for _, f := range taggedFrames("unguarded") {
		f.send(1)
	}
	m := marker("unguarded")
	netnstest.Eventually(t, 10*time.Second, "the unguarded marker arrives", func() bool { return in4.count(m) == 1 })
	var took []string
	for _, f := range taggedFrames("unguarded") {
		if f.in != nil && f.in.count(f.key) > 0 {
			took = append(took, strings.TrimPrefix(f.key, "unguarded "))
		}
	}
	t.Logf("without a guard the node took %d frames: %v; and %d VXLAN datagrams", len(took), took, inVXLAN.all())

	g := guards(t, node)
	spec := Spec{Device: dev, Addrs: []netip.Addr{own4, own6}}
	if _, err := g.Ensure(spec); err != nil {
		t.Fatal(err)
	}
	const copies = 3
	for _, on := range []bool{true, false} {
		phase := fmt.Sprintf("offloads %v:", on)
		setVLANOffload(t, node, dev, on)
		setVLANOffload(t, pod, "eth0", on)
		before, err := g.Drops(dev)
		if err != nil {
			t.Fatal(err)
		}
		vxlanBefore := inVXLAN.all()
		frames := taggedFrames(phase)
		for _, f := range frames {
			f.send(copies)
		}
		for _, o := range others {
			raw.send(t, frame(nodeMAC, raw.mac, nil, o.typ, o.payload), copies)
		}
		ownKeys := map[netip.Addr]string{own4: phase + " own IPv4", own6: phase + " own IPv6"}
		for a, key := range ownKeys {
			dst := node4
			if a.Is6() {
				dst = node6
			}
			pkt, typ := ipUDP(a, dst, 9999, []byte(key+"#"))
			raw.send(t, frame(nodeMAC, raw.mac, nil, typ, pkt), copies)
		}
		m := marker(phase)
		netnstest.WaitFor(t, 10*time.Second, phase+" the pod's own untagged packets arrive", func() error {
			if v4, v6, k := in4.count(ownKeys[own4]), in6.count(ownKeys[own6]), in4.count(m); v4 != copies || v6 != copies || k != 1 {
				return fmt.Errorf("IPv4 %d of %d, IPv6 %d of %d, marker %d of 1", v4, copies, v6, copies, k)
			}
			return nil
		})
		for _, f := range frames {
			if f.in != nil {
				if n := f.in.count(f.key); n != 0 {
					t.Errorf("%s: %d of %d delivered, want 0", f.key, n, copies)
				}
			}
		}
		if n := inVXLAN.all() - vxlanBefore; n != 0 {
			t.Errorf("%s %d forged VXLAN datagrams inside VLAN tags reached the node's VXLAN port, want 0", phase, n)
		}
		if n := in4.count("other"); n != 0 {
			t.Errorf("%s %d spoofed IPv4 packets inside other Ethernet types delivered, want 0", phase, n)
		}
		want := uint64(copies * (len(frames) + len(others)))
		netnstest.WaitFor(t, 10*time.Second, phase+" every frame of another type is counted", func() error {
			d, err := g.Drops(dev)
			if err != nil {
				return err
			}
			if got := d.Ethertype - before.Ethertype; got < want {
				return fmt.Errorf("%d frames of other types dropped, want %d (drops %+v)", got, want, d)
			}
			return nil
		})
	}
	if d, err := g.Drops(dev); err != nil || d.Spoof4 != 0 || d.Spoof6 != 0 || d.VXLAN != 0 {
		t.Errorf("drops %+v, %v: the address and VXLAN rules counted frames the Ethernet type rule drops first", d, err)
	}
}

// TestGuardARPSenders: ARP from a pod creates neighbour entries on the
// node only for the pod's own addresses. Requests from 200 other sender
// addresses and a probe from 0.0.0.0 are dropped and counted, and the
// node's table on the veth gains no entry for them; the pod's own ARP
// still resolves both ways. Without a guard the same requests do create
// entries (logged).
func TestGuardARPSenders(t *testing.T) {
	const dev = "calipg00005"
	node, pod := podPair(t, dev)
	noRPFilter(t, node, dev)
	nodeMAC := linkMAC(t, node, dev)
	l, err := node.Handle.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	raw := openSender(t, pod, "eth0")
	broadcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	var senders []netip.Addr
	for i := range 100 {
		senders = append(senders, netip.AddrFrom4([4]byte{10, 66, 0, byte(100 + i)}), netip.AddrFrom4([4]byte{10, 77, byte(i / 50), byte(1 + i%50)}))
	}
	// neighbours lists the node's IPv4 neighbours on the veth.
	neighbours := func() map[netip.Addr]bool {
		ns, err := node.Handle.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		out := map[netip.Addr]bool{}
		for _, n := range ns {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out[a.Unmap()] = true
			}
		}
		return out
	}
	flush := func() {
		for a := range neighbours() {
			if err := node.Handle.NeighDel(&netlink.Neigh{LinkIndex: l.Attrs().Index, IP: a.AsSlice()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// flood sends a request for the node's address from every sender and
	// a probe (sender 0.0.0.0), then one from the pod's own address, and
	// waits for the node's entry of the pod: the node has processed them.
	flood := func() {
		for _, s := range senders {
			raw.send(t, frame(broadcast, raw.mac, nil, unix.ETH_P_ARP, arp(raw.mac, s, node4)), 1)
		}
		raw.send(t, frame(nodeMAC, raw.mac, nil, unix.ETH_P_ARP, arp(raw.mac, netip.IPv4Unspecified(), node4)), 1)
		raw.send(t, frame(broadcast, raw.mac, nil, unix.ETH_P_ARP, arp(raw.mac, own4, node4)), 1)
		netnstest.Eventually(t, 10*time.Second, "the node learns the pod's own address", func() bool { return neighbours()[own4] })
	}
	foreign := func() []netip.Addr {
		var out []netip.Addr
		for a := range neighbours() {
			if a != own4 {
				out = append(out, a)
			}
		}
		return out
	}

	flood()
	t.Logf("without a guard: %d entries for other senders (%d requests sent); the probe made an entry for 0.0.0.0: %v",
		len(foreign()), len(senders), neighbours()[netip.IPv4Unspecified()])
	flush()

	g := guards(t, node)
	if _, err := g.Ensure(Spec{Device: dev, Addrs: []netip.Addr{own4, own6}}); err != nil {
		t.Fatal(err)
	}
	flood()
	if f := foreign(); len(f) != 0 {
		t.Errorf("the node holds %d neighbour entries for addresses not the pod's: %v", len(f), f)
	}
	want := uint64(len(senders) + 1)
	netnstest.WaitFor(t, 10*time.Second, "the foreign senders' ARP is counted", func() error {
		d, err := g.Drops(dev)
		if err != nil {
			return err
		}
		if d.ARP < want {
			return fmt.Errorf("ARP drops %d, want %d", d.ARP, want)
		}
		return nil
	})
	flush()
	netnstest.WaitFor(t, 10*time.Second, "pod pings the node from 10.66.0.2", func() error {
		_, err := netnstest.Ping(t.Context(), pod.NetNS, "10.66.0.1", 1, "-I", "10.66.0.2")
		return err
	})
	netnstest.WaitFor(t, 10*time.Second, "node pings the pod at 10.66.0.2", func() error {
		_, err := netnstest.Ping(t.Context(), node.NetNS, "10.66.0.2", 1, "-I", "10.66.0.1")
		return err
	})
	if _, err := netnstest.Ping(t.Context(), pod.NetNS, "10.66.0.1", 1, "-I", "10.66.0.3"); err == nil {
		t.Errorf("ping from the foreign source 10.66.0.3 answered")
	}
	if f := foreign(); len(f) != 0 {
		t.Errorf("after the pings the node holds neighbour entries for addresses not the pod's: %v", f)
	}
}
