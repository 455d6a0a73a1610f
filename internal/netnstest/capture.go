package netnstest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// Frame is one Ethernet frame a Capture saw on its link.
type Frame struct {
	Data     []byte // from the Ethernet header on
	Outgoing bool   // sent on the link (PACKET_OUTGOING), else received
	At       time.Time
}

// Capture records every frame crossing one link of a network namespace
// through an AF_PACKET socket, as tcpdump would, until Stop.
type Capture struct {
	fd      int
	link    string
	ifindex int
	stop    atomic.Bool
	done    chan struct{}
	mu      sync.Mutex // guards frames and err
	frames  []Frame
	err     error
}

// captureBuf is the socket's receive buffer: frames sent in a burst while
// the reader is descheduled wait there instead of being dropped.
const captureBuf = 8 << 20

// StartCapture opens a raw packet socket inside n bound to link (all
// protocols, both directions) and records its frames until Stop.
func StartCapture(n ns.NetNS, link string) (*Capture, error) {
	c := &Capture{fd: -1, link: link, done: make(chan struct{})}
	err := n.Do(func(ns.NetNS) error {
		ifc, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		c.ifindex = ifc.Index
		proto := int(htons(unix.ETH_P_ALL))
		// The socket's namespace is the one of the thread that creates it.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		c.fd = fd
		return nil
	})
	if err == nil {
		err = c.setup()
	}
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, fmt.Errorf("capture on %s in netns %s: %w", link, Name(n), err)
	}
	go c.read()
	return c, nil
}

// setup binds the socket to the link and sets its buffer and the read
// timeout that lets the reader notice Stop.
func (c *Capture) setup() error {
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, captureBuf); err != nil {
		if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, captureBuf); err != nil {
			return fmt.Errorf("receive buffer: %w", err)
		}
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("receive timeout: %w", err)
	}
	if err := unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: c.ifindex}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	return nil
}

// read records frames until Stop.
func (c *Capture) read() {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	for !c.stop.Load() {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("capture on %s: %w", c.link, err)
			c.mu.Unlock()
			return
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		// Frames of other links may have queued between socket and bind.
		if !ok || ll.Ifindex != c.ifindex {
			continue
		}
		f := Frame{Data: bytes.Clone(buf[:n]), Outgoing: ll.Pkttype == unix.PACKET_OUTGOING, At: time.Now()}
		c.mu.Lock()
		c.frames = append(c.frames, f)
		c.mu.Unlock()
	}
}

// Frames returns a copy of the frames recorded so far.
func (c *Capture) Frames() []Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Frame(nil), c.frames...)
}

// Stop ends the capture, closes the socket and returns every frame
// recorded. The error says why recording ended early, or that the kernel
// dropped frames (the socket's buffer overflowed): then the frames are not
// everything that crossed the link. Stopping twice returns the same.
func (c *Capture) Stop() ([]Frame, error) {
	if c.stop.CompareAndSwap(false, true) {
		<-c.done
		var dropErr error
		if st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil && st.Drops > 0 {
			dropErr = fmt.Errorf("capture on %s: the kernel dropped %d frames", c.link, st.Drops)
		}
		unix.Close(c.fd)
		c.mu.Lock()
		c.err = errors.Join(c.err, dropErr)
		c.mu.Unlock()
	}
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Frame(nil), c.frames...), c.err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// EtherTypes ParseFrame tells apart.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86dd
)

// Packet is what ParseFrame reads from a frame's headers.
type Packet struct {
	EtherType        uint16
	Src, Dst         netip.Addr // IPv4 or IPv6; invalid for other frames
	Proto            uint8      // IP protocol (IPv6: the header after the extension headers)
	SrcPort, DstPort uint16     // UDP or TCP
	ICMPType         uint8      // ICMP or ICMPv6
	Fragment         bool       // a non-first fragment: no transport header
}

// IP protocol numbers ParseFrame reads further.
const (
	ProtoICMP   = 1
	ProtoIGMP   = 2
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// String reads like a tcpdump line: "IPv4 10.0.1.10:51820 > 10.0.1.11:51820 udp".
func (p Packet) String() string {
	switch p.EtherType {
	case EtherTypeARP:
		return "ARP"
	case EtherTypeIPv4, EtherTypeIPv6:
	default:
		return fmt.Sprintf("ethertype %#04x", p.EtherType)
	}
	fam := "IPv4"
	if p.EtherType == EtherTypeIPv6 {
		fam = "IPv6"
	}
	switch {
	case p.Fragment:
		return fmt.Sprintf("%s %s > %s fragment proto %d", fam, p.Src, p.Dst, p.Proto)
	case p.Proto == ProtoUDP || p.Proto == ProtoTCP:
		name := "udp"
		if p.Proto == ProtoTCP {
			name = "tcp"
		}
		return fmt.Sprintf("%s %s > %s %s", fam, netip.AddrPortFrom(p.Src, p.SrcPort), netip.AddrPortFrom(p.Dst, p.DstPort), name)
	case p.Proto == ProtoICMP || p.Proto == ProtoICMPv6:
		return fmt.Sprintf("%s %s > %s icmp type %d", fam, p.Src, p.Dst, p.ICMPType)
	}
	return fmt.Sprintf("%s %s > %s proto %d", fam, p.Src, p.Dst, p.Proto)
}

// LinkControl reports whether p is the link's own housekeeping rather
// than traffic: ARP, IGMP, and the ICMPv6 of neighbour discovery (router
// and neighbour solicitations and advertisements, redirects) and
// multicast listener discovery.
func (p Packet) LinkControl() bool {
	if p.EtherType == EtherTypeARP || p.EtherType == EtherTypeIPv4 && p.Proto == ProtoIGMP {
		return true
	}
	if p.EtherType != EtherTypeIPv6 || p.Proto != ProtoICMPv6 || p.Fragment {
		return false
	}
	switch p.ICMPType {
	case 130, 131, 132, 143, // MLD query, report, done, MLDv2 report
		133, 134, 135, 136, 137: // RS, RA, NS, NA, redirect
		return true
	}
	return false
}

// ParseFrame reads an Ethernet frame's link, network and transport
// headers. Frames other than IPv4 and IPv6 parse to their EtherType only;
// a truncated or malformed IP header is an error naming what is wrong.
func ParseFrame(b []byte) (Packet, error) {
	var p Packet
	if len(b) < 14 {
		return p, fmt.Errorf("frame of %d bytes: shorter than an Ethernet header", len(b))
	}
	p.EtherType = binary.BigEndian.Uint16(b[12:14])
	l3 := b[14:]
	var l4 []byte
	switch p.EtherType {
	case EtherTypeIPv4:
		if len(l3) < 20 || l3[0]>>4 != 4 {
			return p, fmt.Errorf("IPv4 frame: bad header (%d bytes)", len(l3))
		}
		ihl := int(l3[0]&0x0f) * 4
		if ihl < 20 || len(l3) < ihl {
			return p, fmt.Errorf("IPv4 frame: header length %d of %d bytes", ihl, len(l3))
		}
		p.Src, p.Dst = netip.AddrFrom4([4]byte(l3[12:16])), netip.AddrFrom4([4]byte(l3[16:20]))
		p.Proto = l3[9]
		p.Fragment = binary.BigEndian.Uint16(l3[6:8])&0x1fff != 0
		l4 = l3[ihl:]
	case EtherTypeIPv6:
		if len(l3) < 40 || l3[0]>>4 != 6 {
			return p, fmt.Errorf("IPv6 frame: bad header (%d bytes)", len(l3))
		}
		p.Src, p.Dst = netip.AddrFrom16([16]byte(l3[8:24])), netip.AddrFrom16([16]byte(l3[24:40]))
		next, rest := l3[6], l3[40:]
	ext:
		for {
			switch next {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if len(rest) < 8 {
					return p, fmt.Errorf("IPv6 frame: extension header %d truncated", next)
				}
				n := (int(rest[1]) + 1) * 8
				if len(rest) < n {
					return p, fmt.Errorf("IPv6 frame: extension header %d truncated", next)
				}
				next, rest = rest[0], rest[n:]
			case 44: // fragment
				if len(rest) < 8 {
					return p, errors.New("IPv6 frame: fragment header truncated")
				}
				p.Fragment = binary.BigEndian.Uint16(rest[2:4])&0xfff8 != 0
				next, rest = rest[0], rest[8:]
			default:
				break ext
			}
		}
		p.Proto, l4 = next, rest
	default:
		return p, nil
	}
	if p.Fragment {
		return p, nil
	}
	switch p.Proto {
	case ProtoUDP, ProtoTCP:
		if len(l4) < 4 {
			return p, fmt.Errorf("%s: transport header truncated", p)
		}
		p.SrcPort, p.DstPort = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
	case ProtoICMP, ProtoICMPv6:
		if len(l4) < 1 {
			return p, fmt.Errorf("%s: ICMP header truncated", p)
		}
		p.ICMPType = l4[0]
	}
	return p, nil
}

// FramesContaining describes (number, direction, headers, addresses found)
// every frame holding the bytes of any of addrs anywhere — in a header or
// in the payload. An encrypted tunnel's frames must hold none of the
// inner packets' addresses. (Random bytes hold a given IPv4 address at a
// given offset with probability 2⁻³²: a false hit on a few thousand
// frames of ping size is well under one in a thousand.)
func FramesContaining(frames []Frame, addrs []netip.Addr) []string {
	var out []string
	for i, f := range frames {
		var found []string
		for _, a := range addrs {
			if a.IsValid() && bytes.Contains(f.Data, a.AsSlice()) {
				found = append(found, a.String())
			}
		}
		if len(found) > 0 {
			out = append(out, fmt.Sprintf("frame %d (%s) %s holds %v", i, f.direction(), describe(f.Data), found))
		}
	}
	return out
}

// direction is "out" or "in".
func (f Frame) direction() string {
	if f.Outgoing {
		return "out"
	}
	return "in"
}

// describe is ParseFrame's reading of b, or why it has none.
func describe(b []byte) string {
	p, err := ParseFrame(b)
	if err != nil {
		return err.Error()
	}
	return p.String()
}

// Describe returns the frame as a tcpdump-like line: direction and headers.
func (f Frame) Describe() string { return f.direction() + " " + describe(f.Data) }
