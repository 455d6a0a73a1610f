package netnstest

import (
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

// frame builds an Ethernet frame of ethertype et around the hex of its
// payload.
func frame(t *testing.T, et uint16, payload string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(payload, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 14)
	hdr[12], hdr[13] = byte(et>>8), byte(et)
	return append(hdr, b...)
}

// TestParseFrame reads what tcpdump would of hand-made frames, also
// through IPv6 extension headers and fragments, and refuses truncated
// headers naming what is wrong.
func TestParseFrame(t *testing.T) {
	const v4udp = "45000020 00004000 4011 0000 0a000110 0a000111 ca6c ca6c 000c 0000 41424344"
	const v6icmp = "60000000 0008 3aff fd000001000000000000000000000010 fd000001000000000000000000000011 8000 0000 00000000"
	// Hop-by-hop (8 bytes, next = ICMPv6) then an MLDv2 report (143).
	const v6mld = "60000000 0010 0001 fe800000000000000000000000000001 ff020000000000000000000000000016 3a000502 00000100 8f00 0000 00000000"
	// Fragment header (next = UDP) with offset 8: no UDP header follows.
	const v6frag = "60000000 0010 2c40 fd000001000000000000000000000010 fd000001000000000000000000000011 11000009 00000001 0000000000000000"
	for _, c := range []struct {
		name string
		b    []byte
		want string
		ctl  bool
	}{
		{"IPv4 UDP", frame(t, EtherTypeIPv4, v4udp), "IPv4 10.0.1.16:51820 > 10.0.1.17:51820 udp", false},
		{"IPv6 echo", frame(t, EtherTypeIPv6, v6icmp), "IPv6 fd00:1::10 > fd00:1::11 icmp type 128", false},
		{"IPv6 MLD after hop-by-hop", frame(t, EtherTypeIPv6, v6mld), "IPv6 fe80::1 > ff02::16 icmp type 143", true},
		{"IPv6 fragment", frame(t, EtherTypeIPv6, v6frag), "IPv6 fd00:1::10 > fd00:1::11 fragment proto 17", false},
		{"ARP", frame(t, EtherTypeARP, "0001"), "ARP", true},
		{"IGMPv3 report", frame(t, EtherTypeIPv4, "46c00028 00004000 0102 0000 0a000101 e0000016 94040000 2200 0000"), "IPv4 10.0.1.1 > 224.0.0.22 proto 2", true},
		{"LLDP", frame(t, 0x88cc, ""), "ethertype 0x88cc", false},
	} {
		p, err := ParseFrame(c.b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if p.String() != c.want || p.LinkControl() != c.ctl {
			t.Errorf("%s: %q (link control %v), want %q (%v)", c.name, p, p.LinkControl(), c.want, c.ctl)
		}
	}
	p, _ := ParseFrame(frame(t, EtherTypeIPv4, v4udp))
	if p.SrcPort != 51820 || p.DstPort != 51820 || p.Proto != ProtoUDP || p.Src != netip.MustParseAddr("10.0.1.16") {
		t.Errorf("IPv4 UDP parsed as %+v", p)
	}
	for _, c := range []struct {
		name, want string
		b          []byte
	}{
		{"short frame", "shorter than an Ethernet header", []byte{1, 2, 3}},
		{"short IPv4", "IPv4 frame: bad header", frame(t, EtherTypeIPv4, "4500")},
		{"IPv4 header length", "header length 60", frame(t, EtherTypeIPv4, "4f000020 00004000 4011 0000 0a000110 0a000111")},
		{"UDP truncated", "transport header truncated", frame(t, EtherTypeIPv4, "45000020 00004000 4011 0000 0a000110 0a000111 ca")},
		{"IPv6 extension truncated", "extension header 0 truncated", frame(t, EtherTypeIPv6, "60000000 0010 0001 fe800000000000000000000000000001 ff020000000000000000000000000016 3a05")},
	} {
		if _, err := ParseFrame(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestFramesContaining finds an address's bytes in a header and in a
// payload, and nothing else.
func TestFramesContaining(t *testing.T) {
	in := netip.MustParseAddr("10.244.1.2")
	frames := []Frame{
		{Data: frame(t, EtherTypeIPv4, "45000020 00004000 4011 0000 0a000110 0a000111 ca6c ca6c 000c 0000 41424344")},
		{Data: frame(t, EtherTypeIPv4, "45000020 00004000 4011 0000 0a000110 0a000111 ca6c ca6c 000c 0000 0af40102"), Outgoing: true},
		{Data: frame(t, EtherTypeIPv4, "45000020 00004000 4001 0000 0af40102 0a000111 0800 0000")},
	}
	hits := FramesContaining(frames, []netip.Addr{in, netip.MustParseAddr("fd00:244:1::2"), {}})
	if len(hits) != 2 || !strings.HasPrefix(hits[0], "frame 1 (out) IPv4 10.0.1.16:51820 > 10.0.1.17:51820 udp holds [10.244.1.2]") ||
		!strings.HasPrefix(hits[1], "frame 2 (in)") {
		t.Errorf("FramesContaining = %q, want frames 1 and 2", hits)
	}
}
