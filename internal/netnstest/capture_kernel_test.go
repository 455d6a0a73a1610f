package netnstest

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// vethPair puts a veth between two fresh namespaces, v0 in a with
// 10.9.0.1/24 and fd09::1/64, v1 in b with 10.9.0.2/24 and fd09::2/64.
func vethPair(t *testing.T) (a, b *NS) {
	t.Helper()
	a, b = NewT(t), NewT(t)
	bfd, err := os.Open(b.NetNS.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer bfd.Close()
	if err := a.Handle.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v0"}, PeerName: "v1", PeerNamespace: netlink.NsFd(int(bfd.Fd()))}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		h     *netlink.Handle
		link  string
		addrs []string
	}{{a.Handle, "v0", []string{"10.9.0.1/24", "fd09::1/64"}}, {b.Handle, "v1", []string{"10.9.0.2/24", "fd09::2/64"}}} {
		l, err := e.h.LinkByName(e.link)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range e.addrs {
			addr, _ := netlink.ParseAddr(s)
			addr.Flags = unix.IFA_F_NODAD
			if err := e.h.AddrAdd(l, addr); err != nil {
				t.Fatalf("%s %s: %v", e.link, s, err)
			}
		}
		if err := e.h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// TestCapture: a capture on v0 sees what a user would see in tcpdump on
// it: the UDP datagrams sent (with their ports) for both families, the
// echo reply received, the ARP before them; the frames hold the peer's
// address and no address that took no part.
func TestCapture(t *testing.T) {
	a, _ := vethPair(t)
	c, err := StartCapture(a.NetNS, "v0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	if err := SendUDP(a.NetNS, "10.9.0.2:4242", "capture-v4"); err != nil {
		t.Fatal(err)
	}
	err = a.Do(func() error {
		conn, err := net.DialUDP("udp6", &net.UDPAddr{IP: net.ParseIP("fd09::1"), Port: 4343}, &net.UDPAddr{IP: net.ParseIP("fd09::2"), Port: 4444})
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Write([]byte("capture-v6"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	CheckPing(t, a.NetNS, "10.9.0.2")
	// The reply has arrived once ping returned, the IPv6 datagram once
	// neighbour discovery is done; the capture has them soon after.
	Eventually(t, 2*time.Second, "echo reply and IPv6 datagram captured", func() bool {
		var reply, v6 bool
		for _, f := range c.Frames() {
			p, err := ParseFrame(f.Data)
			reply = reply || err == nil && !f.Outgoing && p.Proto == ProtoICMP && p.ICMPType == 0
			v6 = v6 || err == nil && f.Outgoing && p.Proto == ProtoUDP && p.DstPort == 4444
		}
		return reply && v6
	})
	frames, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var v4, v6, arp bool
	for _, f := range frames {
		lines = append(lines, f.Describe())
		p, err := ParseFrame(f.Data)
		if err != nil {
			t.Errorf("captured frame does not parse: %v", err)
			continue
		}
		switch {
		case f.Outgoing && p.Proto == ProtoUDP && p.Src == netip.MustParseAddr("10.9.0.1") && p.Dst == netip.MustParseAddr("10.9.0.2") && p.DstPort == 4242:
			v4 = true
		case f.Outgoing && p.Proto == ProtoUDP && p.Src == netip.MustParseAddr("fd09::1") && p.SrcPort == 4343 && p.DstPort == 4444:
			v6 = true
		case p.EtherType == EtherTypeARP:
			arp = p.LinkControl()
		}
	}
	if !v4 || !v6 || !arp {
		t.Errorf("capture saw IPv4 UDP to 4242 %v, IPv6 UDP 4343 → 4444 %v, ARP %v; want all; frames:\n%s", v4, v6, arp, strings.Join(lines, "\n"))
	}
	peer := netip.MustParseAddr("10.9.0.2")
	if hits := FramesContaining(frames, []netip.Addr{peer, netip.MustParseAddr("fd09::2")}); len(hits) < 3 {
		t.Errorf("frames holding the peer's addresses: %v; want the datagrams and the echo", hits)
	}
	if hits := FramesContaining(frames, []netip.Addr{netip.MustParseAddr("192.0.2.77"), netip.MustParseAddr("2001:db8::77")}); len(hits) > 0 {
		t.Errorf("frames holding addresses that took no part: %v", hits)
	}
	if _, err := StartCapture(a.NetNS, "nosuchlink"); err == nil || !strings.Contains(err.Error(), "nosuchlink") {
		t.Errorf("capture on a missing link: %v, want an error naming it", err)
	}
	// b's own link is not in a's namespace.
	if _, err := StartCapture(a.NetNS, "v1"); err == nil {
		t.Error("capture on v1 in a's namespace succeeded; v1 is in b's")
	}
}

// TestRunDir: a process started with StartWithRunDir, one run with
// CommandWithRunDir and a function run with DoWithRunDir see their
// directory on WireGuardRunDir, the caller does not, and the started
// process's PID is the command's own.
func TestRunDir(t *testing.T) {
	n := NewT(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &Buffer{}
	p, err := StartWithRunDir(n.NetNS, out, dir, "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	Eventually(t, 5*time.Second, "the PID runs sleep itself", func() bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Cmd.Process.Pid), "cmdline"))
		return err == nil && strings.HasPrefix(string(b), "sleep\x00")
	})
	// /var/run may be a symlink to /run, which would be resolved in the
	// caller's root.
	runDir, err := filepath.EvalSymlinks(filepath.Dir(WireGuardRunDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(p.Cmd.Process.Pid), "root", runDir, filepath.Base(WireGuardRunDir), "marker")); err != nil {
		t.Errorf("the process does not see its directory on %s: %v", WireGuardRunDir, err)
	}
	if _, err := os.Stat(filepath.Join(WireGuardRunDir, "marker")); err == nil {
		t.Fatalf("the directory is mounted on %s in the machine's own mount namespace", WireGuardRunDir)
	}
	err = DoWithRunDir(n.NetNS, dir, func() error {
		if _, err := os.Stat(filepath.Join(WireGuardRunDir, "marker")); err != nil {
			return err
		}
		// The thread is in n: v0 of no other namespace, only n's lo (and
		// the fallback devices a loaded tunnel module puts in every
		// namespace, as tunl0 on a stock kernel).
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		var names []string
		for _, i := range ifs {
			if !slices.Contains(FallbackDevices, i.Name) {
				names = append(names, i.Name)
			}
		}
		if !slices.Equal(names, []string{"lo"}) {
			t.Errorf("links seen in DoWithRunDir: %v, want n's lo only (besides %v)", ifs, FallbackDevices)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(WireGuardRunDir, "marker")); err == nil {
		t.Fatalf("DoWithRunDir left the directory mounted on %s", WireGuardRunDir)
	}
	cmd, err := CommandWithRunDir(t.Context(), n.NetNS, dir, "ls", WireGuardRunDir+"/")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "marker" {
		t.Errorf("ls %s through CommandWithRunDir: %q, %v; want the marker", WireGuardRunDir, b, err)
	}
	if err := p.Kill(); err == nil {
		t.Error("kill of the process: exit status nil, want death by SIGKILL")
	}
}
