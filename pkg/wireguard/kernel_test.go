package wireguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/defaults"
)

// The privileged tests run two simulated nodes, each a network namespace
// with a userspace device (this kernel may have no WireGuard), joined by a
// veth. wgctrl's userspace backend finds the datapaths' sockets in
// /var/run/wireguard whatever the namespace, so the two devices (and those
// of any test process running at the same time) have names of their own:
// wg<pid>-<n>a and wg<pid>-<n>b.

var deviceSeq atomic.Int32

// testNode is one simulated node with its device.
type testNode struct {
	ns      *netnstest.NS
	name    string
	key     wgtypes.Key
	host    netip.Addr   // underlay address
	block4  netip.Prefix // the node's pod blocks
	block6  netip.Prefix
	tunnel  []netip.Prefix // tunnel addresses: first of each block
	cfg     Config
	dev     *Device
	mu      sync.Mutex
	repairs []string
}

// takeRepairs returns and forgets the repairs reported so far.
func (n *testNode) takeRepairs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.repairs
	n.repairs = nil
	return r
}

// newDevice makes a Device for n inside n's namespace (a second call
// stands for a restarted daemon).
func (n *testNode) newDevice(t testing.TB) *Device {
	t.Helper()
	var d *Device
	if err := n.ns.Do(func() error {
		var err error
		d, err = New(n.cfg, n.key)
		return err
	}); err != nil {
		t.Fatalf("New %s: %v", n.name, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func (n *testNode) apply(t testing.TB) {
	t.Helper()
	if err := n.dev.Apply(); err != nil {
		t.Fatalf("Apply %s: %v", n.name, err)
	}
}

// peerOf is n as the other node's peer.
func (n *testNode) peerOf() Peer {
	return Peer{PublicKey: n.key.PublicKey(), Endpoint: netip.AddrPortFrom(n.host, 51820),
		AllowedIPs: []netip.Prefix{n.block4, n.block6, n.tunnel[0], n.tunnel[1]}}
}

// routeTo routes other's blocks into n's device, as the manager's route
// table does (a device made again has lost them).
func (n *testNode) routeTo(t testing.TB, other *testNode) {
	t.Helper()
	link, err := n.ns.Handle.LinkByName(n.name)
	if err != nil {
		t.Fatalf("route: %v", err)
	}
	for _, b := range []netip.Prefix{other.block4, other.block6} {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &ipNets([]netip.Prefix{b})[0], Scope: netlink.SCOPE_LINK}
		if err := n.ns.Handle.RouteReplace(r); err != nil {
			t.Fatalf("route %s dev %s: %v", b, n.name, err)
		}
	}
}

// pingsWithin waits until a ping from n to dst is answered.
func (n *testNode) pingsWithin(t testing.TB, timeout time.Duration, dst netip.Addr) {
	t.Helper()
	netnstest.WaitFor(t, timeout, fmt.Sprintf("ping %s from %s", dst, n.name), func() error {
		_, err := netnstest.Ping(t.Context(), n.ns.NetNS, dst.String(), 1)
		return err
	})
}

// pid is the datapath's pid from the pid file.
func (n *testNode) pid(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.cfg.RunDir, n.name+".pid"))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

func (n *testNode) link(t testing.TB) netlink.Link {
	t.Helper()
	l, err := n.ns.Handle.LinkByName(n.name)
	if err != nil {
		t.Fatalf("link %s: %v", n.name, err)
	}
	return l
}

// datapaths returns the pids of the running datapath processes for name.
func datapaths(name string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && isDatapath(pid, name) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killDatapaths ends every datapath of name (they are this process's:
// the name holds its pid) and removes a socket a killed one left.
func killDatapaths(t *testing.T, name string) {
	for _, pid := range datapaths(name) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(datapaths(name)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := datapaths(name); len(left) > 0 {
		t.Errorf("datapaths of %s still running: %v", name, left)
	}
	_ = os.Remove(socketPath(name))
}

// testLog writes a Device's log into the test's.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newNode makes a namespace with the underlay end of a veth and the
// configuration of a userspace device named for this test.
func newNode(t *testing.T, side string, i int) *testNode {
	ns := netnstest.NewT(t)
	name := fmt.Sprintf("wg%d-%d%s", os.Getpid()%100000, deviceSeq.Add(1), side)
	t.Cleanup(func() { killDatapaths(t, name) }) // before the namespace goes
	n := &testNode{ns: ns, name: name, key: genKey(t),
		host:   netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", i)),
		block4: netip.MustParsePrefix(fmt.Sprintf("10.200.%d.0/26", i)),
		block6: netip.MustParsePrefix(fmt.Sprintf("fd00:200:%d::/122", i)),
	}
	n.tunnel = []netip.Prefix{netip.PrefixFrom(n.block4.Addr().Next(), 32), netip.PrefixFrom(n.block6.Addr().Next(), 128)}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n.cfg = Config{Name: name, Addrs: n.tunnel, Impl: ImplUserspace, RunDir: filepath.Join(t.TempDir(), "wireguard"),
		Datapath: []string{self, defaults.WireGuardDatapathCommand, "--device", name, "--mtu", "1420"},
		Logger:   slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnRepair: func(o string) { n.mu.Lock(); n.repairs = append(n.repairs, o); n.mu.Unlock() },
	}
	return n
}

// newPair makes two nodes joined by a veth (192.0.2.1 and .2), a device on
// each with the other as its peer, routes to the other's blocks, and waits
// until they ping each other through the tunnel.
func newPair(t *testing.T) (a, b *testNode) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces, TUN devices and datapath processes")
	netnstest.SkipUnlessInstalled(t, "iputils-ping", "ping")
	a, b = newNode(t, "a", 1), newNode(t, "b", 2)
	if _, err := netnstest.AddVeth(a.ns.Handle, "ul", "ul-peer"); err != nil {
		t.Fatal(err)
	}
	peer, err := a.ns.Handle.LinkByName("ul-peer")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ns.Handle.LinkSetNsFd(peer, int(b.ns.NetNS.Fd())); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{a, b} {
		ifname := map[*testNode]string{a: "ul", b: "ul-peer"}[n]
		l, err := n.ns.Handle.LinkByName(ifname)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.ns.Handle.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		if err := n.ns.Handle.AddrAdd(l, &netlink.Addr{IPNet: &ipNets([]netip.Prefix{netip.PrefixFrom(n.host, 24)})[0]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*testNode{a, b} {
		n.dev = n.newDevice(t)
		other := map[*testNode]*testNode{a: b, b: a}[n]
		n.dev.SetPeers([]Peer{other.peerOf()})
		n.apply(t)
		if r := n.takeRepairs(); len(r) > 0 {
			t.Errorf("the first Apply of %s reported repairs %v", n.name, r)
		}
		n.routeTo(t, other)
	}
	a.pingsWithin(t, 10*time.Second, b.tunnel[0].Addr())
	a.pingsWithin(t, 10*time.Second, b.tunnel[1].Addr())
	b.pingsWithin(t, 10*time.Second, a.tunnel[0].Addr())
	return a, b
}

// TestDevicesCarryTraffic: two nodes' userspace devices, each the other's
// peer, carry pings both ways and in both families; Status shows the
// session; a peer entry with the wrong key carries nothing, the right one
// again does.
func TestDevicesCarryTraffic(t *testing.T) {
	a, b := newPair(t)
	s := a.dev.Status()
	if s.Impl != ImplUserspace || !s.Up || s.MTU != 1420 || s.Port != 51820 || s.PublicKey != a.key.PublicKey() || s.LastError != "" {
		t.Errorf("status of %s: %+v", a.name, s)
	}
	if len(s.Peers) != 1 || s.Peers[0].PublicKey != b.key.PublicKey() || s.Peers[0].LastHandshake.IsZero() ||
		s.Peers[0].RxBytes == 0 || s.Peers[0].TxBytes == 0 || s.Peers[0].Endpoint.String() != "192.0.2.2:51820" {
		t.Errorf("peer status of %s: %+v", a.name, s.Peers)
	}
	if why := a.dev.NotReady(); why != "" {
		t.Errorf("NotReady %q for a working device", why)
	}
	if pids := datapaths(a.name); len(pids) != 1 || pids[0] != a.pid(t) {
		t.Errorf("datapaths of %s: %v, pid file %d", a.name, pids, a.pid(t))
	}
	// The datapath is detached: a session of its own, stdin /dev/null.
	if sid, err := unix.Getsid(a.pid(t)); err != nil || sid != a.pid(t) {
		t.Errorf("datapath session %d (%v), want its own (%d)", sid, err, a.pid(t))
	}
	if in, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", a.pid(t))); err != nil || in != os.DevNull {
		t.Errorf("datapath stdin %q (%v), want %s", in, err, os.DevNull)
	}

	// Another peer added: the session with B is not touched.
	other := Peer{PublicKey: genKey(t).PublicKey(), Endpoint: netip.MustParseAddrPort("192.0.2.9:51820"), AllowedIPs: prefixes("10.200.9.0/26")}
	a.dev.SetPeers([]Peer{b.peerOf(), other})
	a.apply(t)
	s2 := a.dev.Status()
	if len(s2.Peers) != 2 {
		t.Errorf("peers after adding one: %+v", s2.Peers)
	}
	for _, p := range s2.Peers {
		if p.PublicKey == b.key.PublicKey() && (!p.LastHandshake.Equal(s.Peers[0].LastHandshake) || p.TxBytes < s.Peers[0].TxBytes) {
			t.Errorf("the session with B was reset by adding another peer: before %+v, after %+v", s.Peers[0], p)
		}
	}

	wrong := b.peerOf()
	wrong.PublicKey = genKey(t).PublicKey()
	a.dev.SetPeers([]Peer{wrong})
	a.apply(t)
	if out, err := netnstest.Ping(t.Context(), a.ns.NetNS, b.tunnel[0].Addr().String(), 2); err == nil {
		t.Errorf("ping through a peer entry with the wrong key answered:\n%s", out)
	}
	a.dev.SetPeers([]Peer{b.peerOf()})
	a.apply(t)
	a.pingsWithin(t, 10*time.Second, b.tunnel[0].Addr())
	if r := a.takeRepairs(); len(r) > 0 {
		t.Errorf("peer changes reported as repairs: %v", r)
	}
}

// TestDeviceRepairs: what something else changes on the device — MTU,
// address, admin state, peers, port, key, the link itself — is set back
// by the next Apply after the hint (link event or check), reported once
// under its name, and traffic flows again.
func TestDeviceRepairs(t *testing.T) {
	a, b := newPair(t)
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()

	a.dev.QueueCheck()
	a.apply(t)
	if r := a.takeRepairs(); len(r) > 0 {
		t.Fatalf("a check of an untouched device repaired %v", r)
	}
	h := a.ns.Handle
	for _, c := range []struct {
		object string
		tamper func() error
		check  func() error
	}{
		{"mtu", func() error { return h.LinkSetMTU(a.link(t), 1300) }, func() error {
			if mtu := a.link(t).Attrs().MTU; mtu != 1420 {
				return fmt.Errorf("MTU %d", mtu)
			}
			return nil
		}},
		{"address", func() error {
			return h.AddrDel(a.link(t), &netlink.Addr{IPNet: &ipNets(a.tunnel[:1])[0]})
		}, nil},
		{"up", func() error { return h.LinkSetDown(a.link(t)) }, nil},
		{"peer", func() error {
			return wg.ConfigureDevice(a.name, wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: b.key.PublicKey(), Remove: true}}})
		}, nil},
		{"port", func() error { p := 51999; return wg.ConfigureDevice(a.name, wgtypes.Config{ListenPort: &p}) }, nil},
		{"key", func() error { k := genKey(t); return wg.ConfigureDevice(a.name, wgtypes.Config{PrivateKey: &k}) }, nil},
		{"link", func() error { return h.LinkDel(a.link(t)) }, nil},
	} {
		t.Run(c.object, func(t *testing.T) {
			oldPID := a.pid(t)
			if err := c.tamper(); err != nil {
				t.Fatal(err)
			}
			if c.object == "link" {
				// The datapath exits once its TUN link is gone.
				netnstest.Eventually(t, 5*time.Second, "the old datapath to exit", func() bool { return !isDatapath(oldPID, a.name) })
			}
			if c.object == "mtu" || c.object == "address" || c.object == "up" || c.object == "link" {
				if !a.dev.OnLinkUpdate(a.name) {
					t.Fatal("OnLinkUpdate does not take the device's own name")
				}
			} else {
				a.dev.QueueCheck()
			}
			a.apply(t)
			r := a.takeRepairs()
			if c.object == "up" && slices.Equal(r, []string{"address", "up"}) {
				// A link set down loses its IPv6 addresses (unless
				// keep_addr_on_down): put back too.
				r = r[1:]
			}
			if !slices.Equal(r, []string{c.object}) {
				t.Errorf("repairs %v, want [%s]", r, c.object)
			}
			if c.check != nil {
				if err := c.check(); err != nil {
					t.Error(err)
				}
			}
			s := a.dev.Status()
			if !s.Up || s.Port != 51820 || s.PublicKey != a.key.PublicKey() || len(s.Peers) != 1 {
				t.Errorf("status after the repair: %+v", s)
			}
			if c.object == "link" {
				if a.pid(t) == oldPID {
					t.Error("no new datapath started")
				}
			} else if a.pid(t) != oldPID {
				t.Errorf("the datapath was restarted (pid %d, was %d)", a.pid(t), oldPID)
			}
			// Without its address, down or made again the device lost its
			// routes: the manager's route table puts them back.
			a.routeTo(t, b)
			a.pingsWithin(t, 10*time.Second, b.tunnel[0].Addr())
			a.pingsWithin(t, 10*time.Second, b.tunnel[1].Addr())
		})
	}
	if a.dev.OnLinkUpdate("ul") {
		t.Error("OnLinkUpdate takes another link's event")
	}
}

// TestDeviceAdoptsRunningDatapath: a second Device (a restarted daemon)
// adopts the running datapath: same process, the session kept, nothing
// repaired, traffic never stops.
func TestDeviceAdoptsRunningDatapath(t *testing.T) {
	a, b := newPair(t)
	pid := a.pid(t)
	before := a.dev.Status()
	if err := a.dev.Close(); err != nil {
		t.Fatal(err)
	}
	if !isDatapath(pid, a.name) {
		t.Fatal("Close stopped the datapath")
	}
	a.dev = a.newDevice(t)
	a.dev.SetPeers([]Peer{b.peerOf()})
	a.apply(t)
	if r := a.takeRepairs(); len(r) > 0 {
		t.Errorf("adoption repaired %v", r)
	}
	if got := a.pid(t); got != pid || !isDatapath(pid, a.name) {
		t.Errorf("datapath pid %d (running %v), want the adopted %d", got, isDatapath(pid, a.name), pid)
	}
	if pids := datapaths(a.name); len(pids) != 1 {
		t.Errorf("datapaths after adoption: %v", pids)
	}
	after := a.dev.Status()
	if after.Impl != ImplUserspace || len(after.Peers) != 1 || len(before.Peers) != 1 ||
		!after.Peers[0].LastHandshake.Equal(before.Peers[0].LastHandshake) || after.Peers[0].TxBytes < before.Peers[0].TxBytes {
		t.Errorf("the session did not survive adoption: before %+v, after %+v", before.Peers, after.Peers)
	}
	if out, err := netnstest.Ping(t.Context(), a.ns.NetNS, b.tunnel[0].Addr().String(), 1); err != nil {
		t.Errorf("no ping right after adoption: %v\n%s", err, out)
	}
}

// TestDeviceReplacesDeadDatapath: a datapath killed (its TUN link goes
// with it) or stopped (its link stays, its socket no longer answers) is
// replaced by the next Apply, which reports the link repaired.
func TestDeviceReplacesDeadDatapath(t *testing.T) {
	a, b := newPair(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			old := a.pid(t)
			if err := syscall.Kill(old, sig); err != nil {
				t.Fatal(err)
			}
			if sig == syscall.SIGSTOP {
				netnstest.WaitFor(t, 5*time.Second, "the datapath to stop", func() error {
					b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", old))
					if err != nil {
						return err
					}
					// pid (comm) state ...: the state follows the last ')'.
					if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) == 0 || f[0] != "T" {
						return fmt.Errorf("state %q", f)
					}
					return nil
				})
			}
			if sig == syscall.SIGKILL {
				netnstest.Eventually(t, 5*time.Second, "the TUN link to go with its datapath", func() bool {
					_, err := a.ns.Handle.LinkByName(a.name)
					return nlutil.LinkNotFound(err)
				})
			}
			a.dev.QueueCheck()
			a.apply(t)
			if r := a.takeRepairs(); !slices.Equal(r, []string{"link"}) {
				t.Errorf("repairs %v, want [link]", r)
			}
			if a.pid(t) == old {
				t.Fatal("no new datapath")
			}
			netnstest.Eventually(t, 5*time.Second, "the old datapath gone", func() bool { return !isDatapath(old, a.name) })
			a.routeTo(t, b)
			a.pingsWithin(t, 10*time.Second, b.tunnel[0].Addr())
		})
	}
}

// TestDeviceAutoImplementation: with Impl auto the device is the kernel's
// where the kernel has WireGuard, else the userspace one.
func TestDeviceAutoImplementation(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces, links and datapath processes")
	n := newNode(t, "x", 3)
	n.cfg.Impl = ImplAuto
	want := ImplUserspace
	if kernelHasWireGuard(t) {
		want = ImplKernel
	}
	n.dev = n.newDevice(t)
	n.apply(t)
	s := n.dev.Status()
	if s.Impl != want || !s.Up || s.MTU != 1420 || s.PublicKey != n.key.PublicKey() {
		t.Errorf("status %+v, want implementation %s, up, MTU 1420", s, want)
	}
	kind := linkKind(n.link(t))
	if (want == ImplKernel) != (kind == kindKernel) {
		t.Errorf("link kind %q for implementation %s", kind, want)
	}
	if why := n.dev.NotReady(); why != "" {
		t.Errorf("NotReady %q", why)
	}
}

// TestDeviceLeavesForeignLink: a link of another kind under the device's
// name is not routelet's: Apply fails naming it, and leaves it.
func TestDeviceLeavesForeignLink(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces and links")
	n := newNode(t, "x", 3)
	if _, err := netnstest.AddVeth(n.ns.Handle, n.name, "other"); err != nil {
		t.Fatal(err)
	}
	n.dev = n.newDevice(t)
	err := n.dev.Apply()
	if err == nil || !strings.Contains(err.Error(), `"veth"`) || !strings.Contains(err.Error(), n.name) {
		t.Errorf("Apply over a veth: %v, want an error naming it", err)
	}
	if why := n.dev.NotReady(); !strings.Contains(why, "veth") {
		t.Errorf("NotReady %q does not say why", why)
	}
	if _, ok := n.link(t).(*netlink.Veth); !ok {
		t.Error("the foreign link was replaced")
	}
	if pids := datapaths(n.name); len(pids) > 0 {
		t.Errorf("datapaths started: %v", pids)
	}
}

// kernelHasWireGuard reports whether this kernel creates wireguard links,
// tried in a scratch namespace.
func kernelHasWireGuard(t *testing.T) bool {
	ns := netnstest.NewT(t)
	err := ns.Handle.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: "wgprobe"}})
	if err != nil && !unsupportedKind(err) && !errors.Is(err, unix.EEXIST) {
		t.Fatalf("probe a wireguard link: %v", err)
	}
	return err == nil
}

// TestRouteletdRunsTheDatapath: routeletd's hidden subcommand is the
// datapath a Device starts by default (`routeletd wireguard-datapath
// --device NAME --mtu N`), and it exits once its TUN link is deleted,
// removing its socket.
func TestRouteletdRunsTheDatapath(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces, TUN devices and datapath processes")
	bin := netnstest.Bins(t, netnstest.Routeletd)
	n := newNode(t, "x", 3)
	n.cfg.Datapath = []string{filepath.Join(bin, netnstest.Routeletd), defaults.WireGuardDatapathCommand, "--device", n.name, "--mtu", "1420"}
	n.dev = n.newDevice(t)
	n.apply(t)
	s := n.dev.Status()
	if s.Impl != ImplUserspace || !s.Up || s.MTU != 1420 || s.PublicKey != n.key.PublicKey() {
		t.Errorf("status %+v", s)
	}
	pid := n.pid(t)
	if !isDatapath(pid, n.name) {
		t.Fatalf("pid file names %d, not a datapath of %s", pid, n.name)
	}
	if err := n.ns.Handle.LinkDel(n.link(t)); err != nil {
		t.Fatal(err)
	}
	netnstest.Eventually(t, 5*time.Second, "routeletd's datapath to exit", func() bool { return !isDatapath(pid, n.name) })
	if _, err := os.Stat(socketPath(n.name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s left: %v", socketPath(n.name), err)
	}
	logged, err := os.ReadFile(filepath.Join(n.cfg.RunDir, n.name+".log"))
	if err != nil || !strings.Contains(string(logged), "wireguard datapath running") || !strings.Contains(string(logged), "TUN link was deleted") {
		t.Errorf("datapath log (%v):\n%s", err, logged)
	}
}
