package bgp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
)

// Test timers: a connection attempt every second, a 9 s hold time.
const (
	testConnectRetry = time.Second
	testHoldTime     = 9 * time.Second
	sessionTimeout   = 10 * time.Second
)

// node is one namespace standing in for a BGP speaker's host.
type node struct {
	*netnstest.NS
	v4, v6 string // its addresses, without the prefix length
}

// newNodes makes n namespaces; link joins pairs of them.
func newNodes(t *testing.T, n int) []*node {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces and veths, runs BGP speakers in them")
	out := make([]*node, n)
	for i := range out {
		out[i] = &node{NS: netnstest.NewT(t)}
	}
	return out
}

// link joins a and b with a veth on subnet 10.0.<net>.0/24 and
// fd00:<net>::/64; a gets .1/::1, b .2/::2, and each node's v4/v6 are set
// to its addresses on the first link it is on.
func link(t *testing.T, net int, a, b *node) {
	t.Helper()
	an, bn := fmt.Sprintf("veth%da", net), fmt.Sprintf("veth%db", net)
	ip(t, "-n", a.Name, "link", "add", an, "type", "veth", "peer", "name", bn, "netns", b.Name)
	for i, e := range []struct {
		n   *node
		dev string
	}{{a, an}, {b, bn}} {
		v4 := fmt.Sprintf("10.0.%d.%d", net, i+1)
		v6 := fmt.Sprintf("fd00:%d::%d", net, i+1)
		ip(t, "-n", e.n.Name, "addr", "add", v4+"/24", "dev", e.dev)
		ip(t, "-n", e.n.Name, "-6", "addr", "add", v6+"/64", "dev", e.dev, "nodad")
		ip(t, "-n", e.n.Name, "link", "set", e.dev, "up")
		if e.n.v4 == "" {
			e.n.v4, e.n.v6 = v4, v6
		}
	}
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// speakerConfig is the test configuration of a speaker on n: port 179,
// graceful restart on, short timers.
func speakerConfig(n *node, asn uint32) helperConfig {
	return helperConfig{
		ASN: asn, RouterID: netip.MustParseAddr(n.v4), ListenPort: 179,
		GracefulRestart: true, RestartTime: 30 * time.Second,
		ConnectRetry: testConnectRetry, HoldTime: testHoldTime,
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// waitEstablished waits for p's sessions to addrs to be established.
func waitEstablished(t *testing.T, p *speakerProc, addrs ...string) {
	t.Helper()
	netnstest.WaitFor(t, sessionTimeout, p.name+" sessions established", func() error {
		for _, a := range addrs {
			if st := p.peer(a); st.State != "established" {
				return fmt.Errorf("%s: %s (last error %q)", a, st.State, st.LastError)
			}
		}
		return nil
	})
}

// learnedPrefixes is the prefixes of routes, as strings.
func learnedPrefixes(routes []Route) []string {
	out := []string{}
	for _, r := range routes {
		out = append(out, r.Prefix.String())
	}
	return out
}

// waitLearned waits for p's learned prefixes to be exactly want.
func waitLearned(t *testing.T, p *speakerProc, want ...string) []Route {
	t.Helper()
	var got []Route
	netnstest.WaitFor(t, sessionTimeout, fmt.Sprintf("%s learning %v", p.name, want), func() error {
		got = p.learned()
		if ps := learnedPrefixes(got); !slices.Equal(ps, want) {
			return fmt.Errorf("learned %v", ps)
		}
		return nil
	})
	return got
}

// TestKernelAnnounceWithdraw: two speakers (eBGP and iBGP) with an IPv4
// and an IPv6 session each way; what one announces the other learns, with
// the next hop given (IPv6 through MP_REACH_NLRI on the IPv6 session),
// the AS path and the session; a withdrawal and a next hop change are
// seen; nobody learns its own prefixes; status counts and End-of-RIB.
func TestKernelAnnounceWithdraw(t *testing.T) {
	for _, tc := range []struct {
		name   string
		as, bs uint32
		path   []uint32
	}{
		{"ebgp", 65001, 65002, []uint32{65001}},
		{"ibgp", 64512, 64512, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNodes(t, 2)
			link(t, 1, n[0], n[1])
			a := startSpeaker(t, n[0].NetNS, "a", speakerConfig(n[0], tc.as))
			b := startSpeaker(t, n[1].NetNS, "b", speakerConfig(n[1], tc.bs))
			a.peers(Peer{Address: addr(n[1].v4), ASN: tc.bs}, Peer{Address: addr(n[1].v6), ASN: tc.bs, Description: "v6"})
			b.peers(Peer{Address: addr(n[0].v4), ASN: tc.as}, Peer{Address: addr(n[0].v6), ASN: tc.as})
			a.announce("10.0.1.1", "fd00:1::1", "10.10.0.0/24", "10.10.1.0/26", "fd10::/64")
			b.announce("10.0.1.2", "", "10.20.0.0/24")
			waitEstablished(t, a, n[1].v4, n[1].v6)
			waitEstablished(t, b, n[0].v4, n[0].v6)

			got := waitLearned(t, b, "10.10.0.0/24", "10.10.1.0/26", "fd10::/64")
			for _, r := range got {
				wantNH, wantPeer := addr("10.0.1.1"), addr(n[0].v4)
				if r.Prefix.Addr().Is6() {
					wantNH, wantPeer = addr("fd00:1::1"), addr(n[0].v6)
				}
				if r.NextHop != wantNH || r.Peer != wantPeer || !slices.Equal(r.ASPath, tc.path) || r.Stale {
					t.Errorf("b learned %+v, want next hop %s from %s, AS path %v", r, wantNH, wantPeer, tc.path)
				}
			}
			waitLearned(t, a, "10.20.0.0/24")

			netnstest.WaitFor(t, sessionTimeout, "b's status", func() error {
				st := b.peer(n[0].v4)
				if st.Received != 2 || st.Accepted != 2 || st.Advertised != 1 || !st.EndOfRIB || st.Since.IsZero() || st.LastError != "" {
					return fmt.Errorf("%+v", st)
				}
				if st := b.peer(n[0].v6); st.Received != 1 || st.Advertised != 0 || !st.EndOfRIB {
					return fmt.Errorf("%+v", st)
				}
				return nil
			})
			if st := a.peer(n[1].v6); st.Description != "v6" || st.ASN != tc.bs {
				t.Errorf("a's v6 peer: %+v", st)
			}

			// Withdraw one, move the IPv6 next hop.
			a.announce("10.0.1.1", "fd00:1::3", "10.10.0.0/24", "fd10::/64")
			netnstest.WaitFor(t, sessionTimeout, "withdrawal and new next hop", func() error {
				got := b.learned()
				if ps := learnedPrefixes(got); !slices.Equal(ps, []string{"10.10.0.0/24", "fd10::/64"}) {
					return fmt.Errorf("learned %v", ps)
				}
				if got[1].NextHop != addr("fd00:1::3") {
					return fmt.Errorf("fd10::/64 via %s", got[1].NextHop)
				}
				return nil
			})
			// Everything withdrawn.
			a.announce("", "")
			waitLearned(t, b)
			if r := a.must(helperCmd{Op: "status"}); r.Changes == 0 {
				t.Error("OnChange was never called")
			}
			a.end("stop")
			b.end("stop")
		})
	}
}

// TestKernelNoTransit: A–B–C in a line, three ASes. B learns A's prefix
// and C learns B's, but C never learns A's through B: the speaker
// announces only its own prefixes.
func TestKernelNoTransit(t *testing.T) {
	n := newNodes(t, 3)
	link(t, 1, n[0], n[1]) // a 10.0.1.1, b 10.0.1.2
	link(t, 2, n[1], n[2]) // b 10.0.2.1, c 10.0.2.2
	a := startSpeaker(t, n[0].NetNS, "a", speakerConfig(n[0], 65001))
	b := startSpeaker(t, n[1].NetNS, "b", speakerConfig(n[1], 65002))
	c := startSpeaker(t, n[2].NetNS, "c", speakerConfig(n[2], 65003))
	a.peers(Peer{Address: addr("10.0.1.2"), ASN: 65002}, Peer{Address: addr("fd00:1::2"), ASN: 65002})
	b.peers(Peer{Address: addr("10.0.1.1"), ASN: 65001}, Peer{Address: addr("fd00:1::1"), ASN: 65001},
		Peer{Address: addr("10.0.2.2"), ASN: 65003}, Peer{Address: addr("fd00:2::2"), ASN: 65003})
	c.peers(Peer{Address: addr("10.0.2.1"), ASN: 65002}, Peer{Address: addr("fd00:2::1"), ASN: 65002})
	b.announce("", "") // sessions start with the first SetAnnounced
	c.announce("", "")
	a.announce("10.0.1.1", "fd00:1::1", "10.10.0.0/24", "fd10::/64")
	waitEstablished(t, b, "10.0.1.1", "fd00:1::1", "10.0.2.2", "fd00:2::2")
	waitLearned(t, b, "10.10.0.0/24", "fd10::/64")
	// Announced after B holds A's routes: once C has B's own prefixes,
	// anything B would pass on has been sent too.
	b.announce("10.0.2.1", "fd00:2::1", "10.20.0.0/24", "fd20::/64")
	waitLearned(t, c, "10.20.0.0/24", "fd20::/64")
	time.Sleep(500 * time.Millisecond)
	if got := learnedPrefixes(c.learned()); !slices.Equal(got, []string{"10.20.0.0/24", "fd20::/64"}) {
		t.Errorf("c learned %v: A's routes passed through B", got)
	}
	for _, a := range []string{"10.0.2.2", "fd00:2::2"} {
		if st := b.peer(a); st.Advertised != 1 {
			t.Errorf("b advertised %d prefixes to c (%s), want 1", st.Advertised, a)
		}
	}
}

// TestKernelMD5: sessions with the same TCP MD5 password come up; with a
// different one, or none on one side, they never do and the status says
// the handshake got no answer.
func TestKernelMD5(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pa, pb string
		up     bool
	}{
		{"same", "s3cret", "s3cret", true},
		{"different", "s3cret", "other", false},
		{"one side", "s3cret", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNodes(t, 2)
			link(t, 1, n[0], n[1])
			a := startSpeaker(t, n[0].NetNS, "a", speakerConfig(n[0], 65001))
			b := startSpeaker(t, n[1].NetNS, "b", speakerConfig(n[1], 65002))
			a.peers(Peer{Address: addr(n[1].v4), ASN: 65002, Password: tc.pa}, Peer{Address: addr(n[1].v6), ASN: 65002, Password: tc.pa})
			b.peers(Peer{Address: addr(n[0].v4), ASN: 65001, Password: tc.pb}, Peer{Address: addr(n[0].v6), ASN: 65001, Password: tc.pb})
			a.announce("", "") // sessions start with the first SetAnnounced
			b.announce("", "")
			if tc.up {
				waitEstablished(t, a, n[1].v4, n[1].v6)
				a.announce("10.0.1.1", "", "10.10.0.0/24")
				waitLearned(t, b, "10.10.0.0/24")
				return
			}
			netnstest.WaitFor(t, sessionTimeout, "a's connection error", func() error {
				st := a.peer(n[1].v4)
				if !strings.Contains(st.LastError, "MD5") {
					return fmt.Errorf("%+v", st)
				}
				return nil
			})
			for _, p := range []*speakerProc{a, b} {
				for _, st := range p.status() {
					if st.State == "established" || st.State == "openconfirm" || st.State == "opensent" {
						t.Errorf("%s: session to %s %s despite the password mismatch", p.name, st.Address, st.State)
					}
				}
			}
			t.Logf("a's status: %+v", a.peer(n[1].v4))
		})
	}
}

// garbageServer listens on port in n and answers every connection with
// reply, then reads until the client goes or 3 s passed. It stops in
// t.Cleanup.
func garbageServer(t *testing.T, n ns.NetNS, port int, reply []byte) {
	t.Helper()
	netnstest.ServeTCP(t, n, "tcp", fmt.Sprintf(":%d", port), func(c net.Conn) {
		c.Write(reply)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
}

// TestKernelGarbage: a peer whose port speaks something else (HTTP), a
// peer sending a BGP header with a bad length, one sending a whole header
// of a type BGP does not define (type 9), one sending a stream of random
// bytes, and garbage sent to the speaker's own port from a configured
// peer's address, leave the speaker running, the bad sessions with their
// reasons, and a good session on the side working. (GoBGP v3.37.0 as
// released dereferenced the nil message its parser returns for an
// unknown type, and the process died: third_party/gobgp.)
func TestKernelGarbage(t *testing.T) {
	n := newNodes(t, 2)
	link(t, 1, n[0], n[1])
	ip(t, "-n", n[1].Name, "addr", "add", "10.0.1.3/24", "dev", "veth1b")
	garbageServer(t, n[1].NetNS, 1790, []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
	badLength := append(bytes.Repeat([]byte{0xff}, 16), 0, 7, 1)
	garbageServer(t, n[1].NetNS, 1791, badLength)
	ip(t, "-n", n[1].Name, "addr", "add", "10.0.1.4/24", "dev", "veth1b")
	unknownType := append(bytes.Repeat([]byte{0xff}, 16), 0, 19, 9)
	garbageServer(t, n[1].NetNS, 1792, unknownType)
	ip(t, "-n", n[1].Name, "addr", "add", "10.0.1.5/24", "dev", "veth1b")
	random := make([]byte, 64<<10)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	garbageServer(t, n[1].NetNS, 1793, random)
	a := startSpeaker(t, n[0].NetNS, "a", speakerConfig(n[0], 65001))
	b := startSpeaker(t, n[1].NetNS, "b", speakerConfig(n[1], 65002))
	// a's IPv4 sessions go to the garbage ports, its IPv6 one to b.
	a.peers(Peer{Address: addr(n[1].v4), ASN: 65002, Port: 1790}, Peer{Address: addr("10.0.1.3"), ASN: 65002, Port: 1791},
		Peer{Address: addr("10.0.1.4"), ASN: 65002, Port: 1792}, Peer{Address: addr("10.0.1.5"), ASN: 65002, Port: 1793},
		Peer{Address: addr(n[1].v6), ASN: 65002})
	b.peers(Peer{Address: addr(n[0].v6), ASN: 65001})
	a.announce("", "")
	b.announce("", "")
	netnstest.WaitFor(t, sessionTimeout, "a's errors for the garbage ports", func() error {
		if st := a.peer(n[1].v4); !strings.Contains(st.LastError, "opensent") {
			return fmt.Errorf("%+v", st)
		}
		if st := a.peer("10.0.1.3"); !strings.Contains(st.LastError, "malformed BGP Header") {
			return fmt.Errorf("%+v", st)
		}
		if st := a.peer("10.0.1.4"); !strings.Contains(st.LastError, "unknown message type") {
			return fmt.Errorf("%+v", st)
		}
		if st := a.peer("10.0.1.5"); st.LastError == "" {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	t.Logf("HTTP port: %q", a.peer(n[1].v4).LastError)
	t.Logf("bad length: %q", a.peer("10.0.1.3").LastError)
	t.Logf("unknown type: %q", a.peer("10.0.1.4").LastError)
	t.Logf("random bytes: %q", a.peer("10.0.1.5").LastError)
	waitEstablished(t, a, n[1].v6)
	a.announce("", "fd00:1::1", "fd10::/64")
	waitLearned(t, b, "fd10::/64")

	// Garbage from b's IPv6 address to a's port 179, and from an address
	// a has no session with.
	ip(t, "-n", n[1].Name, "-6", "addr", "add", "fd00:1::9/64", "dev", "veth1b", "nodad")
	for _, src := range []string{n[1].v6, "fd00:1::9"} {
		err := n[1].Do(func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
			c, err := d.Dial("tcp", net.JoinHostPort(n[0].v6, "179"))
			if err != nil {
				return err
			}
			defer c.Close()
			c.Write([]byte(strings.Repeat("\xffgarbage\x00", 100)))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					return nil
				}
			}
		})
		if err != nil {
			t.Logf("garbage from %s: %v", src, err)
		}
	}
	// a still answers, and the good session is (back) up.
	waitEstablished(t, a, n[1].v6)
	waitLearned(t, b, "fd10::/64")
	a.end("stop")
}

// TestKernelMaxPrefixes: a peer sending more prefixes than its limit has
// its session closed; both sides' status say why.
func TestKernelMaxPrefixes(t *testing.T) {
	n := newNodes(t, 2)
	link(t, 1, n[0], n[1])
	a := startSpeaker(t, n[0].NetNS, "a", speakerConfig(n[0], 65001))
	b := startSpeaker(t, n[1].NetNS, "b", speakerConfig(n[1], 65002))
	a.peers(Peer{Address: addr(n[1].v4), ASN: 65002})
	b.peers(Peer{Address: addr(n[0].v4), ASN: 65001, MaxPrefixes: 3})
	b.announce("", "") // sessions start with the first SetAnnounced
	a.announce("10.0.1.1", "", "10.10.0.0/24", "10.10.1.0/24", "10.10.2.0/24")
	waitEstablished(t, b, n[0].v4)
	waitLearned(t, b, "10.10.0.0/24", "10.10.1.0/24", "10.10.2.0/24")
	a.announce("10.0.1.1", "", "10.10.0.0/24", "10.10.1.0/24", "10.10.2.0/24", "10.10.3.0/24")
	netnstest.WaitFor(t, sessionTimeout, "b closing the session over the limit", func() error {
		st := b.peer(n[0].v4)
		if st.State == "established" || !strings.Contains(st.LastError, "limit") {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	t.Logf("b: %+v", b.peer(n[0].v4))
	netnstest.WaitFor(t, sessionTimeout, "a's reason", func() error {
		if st := a.peer(n[1].v4); !strings.Contains(st.LastError, "maximum number of prefixes") {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	t.Logf("a: %+v", a.peer(n[1].v4))
	if got := b.learned(); len(got) != 0 {
		t.Errorf("b still has %v", learnedPrefixes(got))
	}
}

// birdPath is Debian's BIRD 2 (package bird2).
const birdPath = "/usr/sbin/bird"

// birdRouter is a BIRD running in a test's namespace.
type birdRouter struct {
	t    *testing.T
	sock string
	cmd  *exec.Cmd
	log  *netnstest.Buffer
}

// startBird runs bird in the foreground in n with config conf, its own
// control socket and pid file in a temporary directory; it is killed by
// PID in t.Cleanup.
func startBird(t *testing.T, n ns.NetNS, conf string) *birdRouter {
	t.Helper()
	if _, err := exec.LookPath(birdPath); err != nil {
		t.Skipf("%s not installed (Debian package bird2): %v", birdPath, err)
	}
	dir := t.TempDir()
	b := &birdRouter{t: t, sock: dir + "/bird.ctl", log: &netnstest.Buffer{}}
	if err := os.WriteFile(dir+"/bird.conf", []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	b.cmd = exec.Command(birdPath, "-f", "-c", dir+"/bird.conf", "-s", b.sock, "-P", dir+"/bird.pid")
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := n.Do(func(ns.NetNS) error { return b.cmd.Start() }); err != nil {
		t.Fatalf("start bird: %v", err)
	}
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
		if t.Failed() {
			t.Logf("bird log:\n%s", b.log.String())
		}
	})
	netnstest.WaitFor(t, 5*time.Second, "bird's control socket", func() error {
		_, err := b.birdc("show", "status")
		return err
	})
	return b
}

func (b *birdRouter) birdc(args ...string) (string, error) {
	out, err := exec.Command("/usr/sbin/birdc", append([]string{"-s", b.sock}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// routes is the prefixes in bird's tables, sorted.
func (b *birdRouter) routes() ([]string, error) {
	out, err := b.birdc("show", "route")
	if err != nil {
		return nil, err
	}
	got := []string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if p, err := netip.ParsePrefix(f[0]); err == nil {
			got = append(got, p.String())
		}
	}
	slices.Sort(got)
	return got, nil
}

// grBirdConf is bird on 10.0.1.1/fd00:1::1, AS 65001, with a session per
// family to a speaker on 10.0.1.2/fd00:1::2, AS 65002, graceful restart on,
// importing everything and announcing nothing.
const grBirdConf = `
router id 10.0.1.1;
log stderr all;
protocol device {}
protocol bgp s4 {
	local 10.0.1.1 as 65001;
	neighbor 10.0.1.2 as 65002;
	graceful restart on;
	hold time 9;
	connect retry time 1;
	ipv4 { import all; export none; };
}
protocol bgp s6 {
	local fd00:1::1 as 65001;
	neighbor fd00:1::2 as 65002;
	graceful restart on;
	hold time 9;
	connect retry time 1;
	ipv6 { import all; export none; };
}
`

// birdProtocols is `show protocols all` of bird's two sessions.
func (b *birdRouter) protocols() (string, error) {
	return b.birdc("show", "protocols", "all", `"s*"`)
}

// TestKernelGracefulRestartBird: BIRD keeps the speaker's routes while the
// speaker's process is killed (-9) or its Speaker closed (Close) and a new
// one starts on the same address, and keeps them after the new one
// reconnected and announced them again: they are in BIRD's table at every
// look throughout, and BIRD ends its graceful restart with the new
// session. Without graceful restart the routes go with the process; Stop
// withdraws them at once.
func TestKernelGracefulRestartBird(t *testing.T) {
	for _, tc := range []struct {
		name string
		gr   bool
	}{{"kill", true}, {"close", true}, {"kill without graceful restart", false}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNodes(t, 2)
			link(t, 1, n[0], n[1])
			bird := startBird(t, n[0].NetNS, grBirdConf)
			want := []string{"10.10.0.0/24", "10.10.1.0/24", "fd10::/64"}
			start := func() *speakerProc {
				cfg := speakerConfig(n[1], 65002)
				cfg.GracefulRestart = tc.gr
				p := startSpeaker(t, n[1].NetNS, "s", cfg)
				p.peers(Peer{Address: addr("10.0.1.1"), ASN: 65001}, Peer{Address: addr("fd00:1::1"), ASN: 65001})
				p.announce("10.0.1.2", "fd00:1::2", want...)
				return p
			}
			routesAre := func(want []string) func() error {
				return func() error {
					got, err := bird.routes()
					if err == nil && !slices.Equal(got, want) {
						err = fmt.Errorf("bird has %v", got)
					}
					return err
				}
			}
			s := start()
			netnstest.WaitFor(t, sessionTimeout, "bird learning the speaker's routes", routesAre(want))
			if !tc.gr {
				s.kill()
				netnstest.WaitFor(t, 5*time.Second, "bird dropping the routes", routesAre([]string{}))
				return
			}

			// Look every 20 ms from now on: the routes must never go.
			stop := make(chan struct{})
			missing := make(chan string, 1)
			looked := make(chan int, 1)
			go func() {
				n := 0
				defer func() { looked <- n }()
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					got, err := bird.routes()
					n++
					if err == nil && !slices.Equal(got, want) {
						routes, _ := bird.birdc("show", "route", "all")
						protos, _ := bird.protocols()
						select {
						case missing <- fmt.Sprintf("bird had %v after %d looks at %s; then:\n%s\n%s", got, n, time.Now().Format("15:04:05.000"), routes, protos):
						default:
						}
					}
				}
			}()
			if tc.name == "kill" {
				s.kill()
			} else {
				s.end("close")
			}
			// BIRD sees both sessions go and keeps the routes (stale).
			netnstest.WaitFor(t, sessionTimeout, "bird's graceful restart", func() error {
				out, err := bird.protocols()
				if err == nil && strings.Count(out, "Neighbor graceful restart active") != 2 {
					err = fmt.Errorf("no graceful restart of both sessions:\n%s", out)
				}
				return err
			})
			time.Sleep(time.Second)
			s2 := start()
			waitEstablished(t, s2, "10.0.1.1", "fd00:1::1")
			netnstest.WaitFor(t, sessionTimeout, "bird's End-of-RIB", func() error {
				for _, st := range s2.status() {
					if !st.EndOfRIB {
						return fmt.Errorf("%+v", st)
					}
				}
				return nil
			})
			netnstest.WaitFor(t, sessionTimeout, "bird ending the graceful restart", func() error {
				out, err := bird.protocols()
				if err == nil && (strings.Contains(out, "graceful restart active") || strings.Count(out, "BGP state:          Established") != 2) {
					err = fmt.Errorf("bird:\n%s", out)
				}
				return err
			})
			time.Sleep(500 * time.Millisecond)
			close(stop)
			t.Logf("bird's table looked at %d times", <-looked)
			select {
			case m := <-missing:
				t.Errorf("the routes went during the restart: %s", m)
			default:
			}
			if err := routesAre(want)(); err != nil {
				t.Errorf("after the restart: %v", err)
			}
			// Stop sends a Cease: bird drops the routes at once.
			s2.end("stop")
			netnstest.WaitFor(t, 3*time.Second, "bird dropping the routes after Stop", routesAre([]string{}))
		})
	}
}
