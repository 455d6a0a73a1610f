package diagnose

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Prober sends the probe: one ICMP echo of size bytes (IP header
// included) with DF set, from inside the network namespace at netnsPath.
type Prober interface {
	Probe(netnsPath string, dst netip.Addr, size int, timeout time.Duration) (ProbeResult, error)
}

// ProbeResult is what came back.
type ProbeResult struct {
	Replied bool
	RTT     time.Duration
	// SendErr is the error sending gave (e.g. EMSGSIZE: larger than the
	// pod's own MTU or its cached path MTU).
	SendErr error
	// ICMPError describes an ICMP error that came back instead, e.g.
	// "fragmentation needed, next-hop MTU 1400, from 10.0.1.1".
	ICMPError string
}

// probeTimeout bounds the wait for a reply.
const probeTimeout = 2 * time.Second

// probe sends the DF ping of the pod MTU from the source pod and, when it
// does not come back, says where it died from the counters this node has.
func (w *world) probe(s, d End, p Prober) Step {
	st := Step{ID: StepProbe, Status: Fail}
	if s.Kind != KindPod || s.w == nil {
		st.Fact = "not sent"
		st.Problem = "--probe sends from inside the source pod: SRC must be a pod on this node"
		st.Fix = "run it on SRC's node, with SRC the pod"
		return st
	}
	fams := intersect(w.families(s), w.families(d))
	if len(fams) == 0 {
		st.Fact, st.Problem = "not sent", "no common family"
		return st
	}
	v := fams[0]
	dst, ok := w.addr(d, v)
	src, _ := w.addr(s, v)
	if !ok {
		st.Fact, st.Problem = "not sent", "DST has no address to ping"
		return st
	}
	size := w.podMTU()
	if size == 0 {
		st.Fact, st.Problem = "not sent", "the pod MTU is unknown (no daemon.json)"
		return st
	}
	st.Family = v
	before, err := w.k.Links()
	if err != nil {
		st.Fact, st.Problem = err.Error(), "cannot read the link counters"
		return st
	}
	res, err := p.Probe(s.w.Netns, dst, size, probeTimeout)
	if err != nil {
		st.Fact, st.Problem = "not sent: "+err.Error(), "the probe could not be set up in the pod's netns"
		return st
	}
	after, err := w.k.Links()
	if err != nil {
		st.Fact, st.Problem = err.Error(), "cannot read the link counters"
		return st
	}
	st.Fact = fmt.Sprintf("%d-byte DF echo %s → %s", size, src, dst)
	switch {
	case res.Replied:
		st.Status = Pass
		st.Fact += fmt.Sprintf(": reply in %s", res.RTT.Round(10*time.Microsecond))
		return st
	case res.SendErr != nil:
		st.Fact += fmt.Sprintf(": send failed: %v", res.SendErr)
		st.Problem = fmt.Sprintf("the pod itself cannot send %d bytes with DF (its interface or a cached path MTU is smaller)", size)
		st.Fix = "see src-pod-mtu and path-mtu"
		return st
	case res.ICMPError != "":
		st.Fact += ": " + res.ICMPError
		st.Problem = "an ICMP error came back instead of the reply"
		st.Fix = "a hop's MTU is below the pod MTU: see path-mtu, or lower mtu in routeletd's config"
		return st
	}
	st.Fact += fmt.Sprintf(": no reply within %s", probeTimeout)
	st.Problem, st.Fix = w.whereItDied(s, d, v, delta(before, after))
	return st
}

// delta returns each link's counters after minus before, by name.
func delta(before, after []Link) map[string]LinkStats {
	b := map[string]LinkStats{}
	for _, l := range before {
		b[l.Name] = l.Stats
	}
	out := map[string]LinkStats{}
	for _, l := range after {
		o := b[l.Name]
		out[l.Name] = LinkStats{RxPackets: l.Stats.RxPackets - o.RxPackets, TxPackets: l.Stats.TxPackets - o.TxPackets,
			RxDropped: l.Stats.RxDropped - o.RxDropped, TxDropped: l.Stats.TxDropped - o.TxDropped, TxErrors: l.Stats.TxErrors - o.TxErrors}
	}
	return out
}

// whereItDied reads the path's counters hop by hop and names the last hop
// the probe was seen at.
func (w *world) whereItDied(s, d End, v int, dl map[string]LinkStats) (problem, fix string) {
	veth := s.w.HostIface
	if dl[veth].RxPackets == 0 {
		return fmt.Sprintf("it never reached %s on the host (rx +0): dropped inside the pod", veth),
			"check the pod's interface and MTU (src-veth, src-pod-mtu)"
	}
	if d.Kind == KindPod && d.w != nil {
		dv := d.w.HostIface
		if dl[dv].TxPackets == 0 {
			return fmt.Sprintf("it entered %s (rx +%d) but was not sent to %s (tx +0): dropped on this node (route, firewall)", veth, dl[veth].RxPackets, dv),
				"see dst-host-route; iptables -S FORWARD (routelet jumps to ROUTELET-FORWARD while something there can drop)"
		}
		return fmt.Sprintf("it reached %s (tx +%d) but the pod did not answer", dv, dl[dv].TxPackets),
			"the destination pod drops echo requests or is down"
	}
	f := w.family(v)
	dev := ""
	for name, ts := range f.want {
		for _, t := range ts {
			if a, ok := w.addr(d, v); ok && t.CIDR.Contains(a) {
				dev = name
			}
		}
	}
	if dev == "" {
		return fmt.Sprintf("it entered %s (rx +%d) and had no route onward", veth, dl[veth].RxPackets), "see route"
	}
	if dev != f.parent.Name {
		switch dd := dl[dev]; {
		case dd.TxPackets == 0 && (dd.TxDropped > 0 || dd.TxErrors > 0):
			return fmt.Sprintf("%s dropped it (tx_dropped +%d, tx_errors +%d): no usable FDB or neighbour entry for the VTEP", dev, dd.TxDropped, dd.TxErrors),
				"see vtep-arp and vtep-fdb"
		case dd.TxPackets == 0:
			return fmt.Sprintf("it entered %s (rx +%d) but never reached %s (tx +0): dropped on this node before the overlay", veth, dl[veth].RxPackets, dev),
				"see route; iptables -S FORWARD (routelet jumps to ROUTELET-FORWARD while something there can drop)"
		}
	}
	if pd := dl[f.parent.Name]; pd.TxPackets == 0 {
		return fmt.Sprintf("it went through %s but %s sent nothing (tx +0)", dev, f.parent.Name), "check the underlay link and its route to the peer"
	}
	return fmt.Sprintf("it left node %s on %s (tx +%d) and no answer came back: lost beyond this node", w.cfg.NodeName, f.parent.Name, dl[f.parent.Name].TxPackets),
		fmt.Sprintf("run routeletd diagnose on node %s (its allowlist, routes and pod)", d.Node)
}

// ICMPProber sends the probe on a raw ICMP socket made in the pod's netns.
type ICMPProber struct{}

// Probe implements Prober.
func (ICMPProber) Probe(netnsPath string, dst netip.Addr, size int, timeout time.Duration) (ProbeResult, error) {
	v6 := dst.Is6()
	hdr := 20
	if v6 {
		hdr = 40
	}
	if size < hdr+8 {
		return ProbeResult{}, fmt.Errorf("probe size %d is below an echo's %d bytes", size, hdr+8)
	}
	var fd int
	err := inNetns(netnsPath, func() error {
		var err error
		if v6 {
			fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			}
		} else {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
			}
		}
		return err
	})
	if err != nil {
		if fd > 0 {
			unix.Close(fd)
		}
		return ProbeResult{}, fmt.Errorf("raw ICMP socket: %w", err)
	}
	defer unix.Close(fd)
	id := uint16(os.Getpid())
	msg := make([]byte, size-hdr)
	msg[0] = 8 // echo request
	if v6 {
		msg[0] = 128
	}
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], 1)
	if !v6 {
		binary.BigEndian.PutUint16(msg[2:], checksum(msg)) // the kernel sums ICMPv6 itself
	}
	var sa unix.Sockaddr
	if v6 {
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	} else {
		sa = &unix.SockaddrInet4{Addr: dst.As4()}
	}
	start := time.Now()
	if err := unix.Sendto(fd, msg, 0, sa); err != nil {
		return ProbeResult{SendErr: err}, nil
	}
	buf := make([]byte, 65536)
	for deadline := start.Add(timeout); time.Now().Before(deadline); {
		tv := unix.NsecToTimeval(time.Until(deadline).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return ProbeResult{}, err
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return ProbeResult{}, fmt.Errorf("receive: %w", err)
		}
		icmp := buf[:n]
		if !v6 && n > 20 {
			icmp = buf[(buf[0]&0x0f)*4 : n]
		}
		if r, ok := parseReply(icmp, v6, id, fromAddr(from)); ok {
			r.RTT = time.Since(start)
			return r, nil
		}
	}
	return ProbeResult{}, nil
}

// parseReply recognises the reply to our echo, or an ICMP error about it.
func parseReply(b []byte, v6 bool, id uint16, from netip.Addr) (ProbeResult, bool) {
	if len(b) < 8 {
		return ProbeResult{}, false
	}
	typ, code := b[0], b[1]
	if (!v6 && typ == 0 || v6 && typ == 129) && binary.BigEndian.Uint16(b[4:]) == id {
		return ProbeResult{Replied: true}, true
	}
	// An error carries our packet after its 8 bytes: the inner IP header,
	// then our echo's header with our id.
	inner := 8 + 20
	if v6 {
		inner = 8 + 40
	}
	if len(b) < inner+8 || binary.BigEndian.Uint16(b[inner+4:]) != id {
		return ProbeResult{}, false
	}
	switch {
	case !v6 && typ == 3 && code == 4:
		return ProbeResult{ICMPError: fmt.Sprintf("fragmentation needed, next-hop MTU %d, from %s", binary.BigEndian.Uint16(b[6:]), from)}, true
	case v6 && typ == 2:
		return ProbeResult{ICMPError: fmt.Sprintf("packet too big, MTU %d, from %s", binary.BigEndian.Uint32(b[4:]), from)}, true
	case !v6 && typ == 3, v6 && typ == 1:
		return ProbeResult{ICMPError: fmt.Sprintf("destination unreachable (code %d) from %s", code, from)}, true
	case !v6 && typ == 11, v6 && typ == 3:
		return ProbeResult{ICMPError: fmt.Sprintf("time exceeded from %s", from)}, true
	}
	return ProbeResult{}, false
}

// fromAddr converts a socket address.
func fromAddr(sa unix.Sockaddr) netip.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr)
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr)
	}
	return netip.Addr{}
}

// checksum is the Internet checksum of b.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
