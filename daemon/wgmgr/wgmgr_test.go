package wgmgr

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
	"github.com/routelet/routelet/pkg/wireguard"
)

const dev = "wireguard.cali"

// fakeDevice is a Device in memory: Apply creates the link in the fake
// kernel (as the real device creates its link) and takes the key and
// peers set since. A route through the device before its Apply fails in
// the fake kernel (ENODEV), so every test that applies checks that the
// manager applies the device before its routes.
type fakeDevice struct {
	mu       sync.Mutex
	nl       *routestest.FakeNetlink
	cfg      wireguard.Config
	key      wgtypes.Key // set, not yet applied
	peers    []wireguard.Peer
	applied  wgtypes.Key      // on the "device"
	onDev    []wireguard.Peer // on the "device"
	applies  int
	checks   int
	fail     error
	notReady string
	// create, when set, makes the device's link instead (a real kernel's).
	create func() error
	// handshake is each peer's last handshake as Status tells it.
	handshake map[wgtypes.Key]time.Time
}

func (d *fakeDevice) SetPrivateKey(k wgtypes.Key) { d.mu.Lock(); d.key = k; d.mu.Unlock() }
func (d *fakeDevice) SetPeers(p []wireguard.Peer) {
	d.mu.Lock()
	d.peers = slices.Clone(p)
	d.mu.Unlock()
}
func (d *fakeDevice) Apply() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applies++
	if d.fail != nil {
		return d.fail
	}
	if d.create != nil {
		if err := d.create(); err != nil {
			return err
		}
	} else if _, err := d.nl.LinkByName(dev); err != nil {
		d.nl.AddLink(dev, true)
	}
	d.applied, d.onDev = d.key, slices.Clone(d.peers)
	return nil
}
func (d *fakeDevice) QueueCheck()                   { d.mu.Lock(); d.checks++; d.mu.Unlock() }
func (d *fakeDevice) OnLinkUpdate(name string) bool { return name == d.cfg.Name }
func (d *fakeDevice) NotReady() string              { d.mu.Lock(); defer d.mu.Unlock(); return d.notReady }
func (d *fakeDevice) Close() error                  { return nil }
func (d *fakeDevice) Status() wireguard.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := wireguard.Status{Impl: "kernel", Up: true, PublicKey: d.applied.PublicKey(), Port: d.cfg.Port, MTU: d.cfg.MTU}
	for _, p := range d.onDev {
		st.Peers = append(st.Peers, wireguard.PeerStatus{PublicKey: p.PublicKey, Endpoint: p.Endpoint, AllowedIPs: p.AllowedIPs,
			LastHandshake: d.handshake[p.PublicKey]})
	}
	return st
}

// peerOn returns the device's peer with key k.
func (d *fakeDevice) peerOn(k wgtypes.Key) (wireguard.Peer, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.onDev {
		if p.PublicKey == k {
			return p, true
		}
	}
	return wireguard.Peer{}, false
}

type fixture struct {
	m     *Manager
	d     *fakeDevice
	nl    *routestest.FakeNetlink
	state string
	now   time.Time
}

// setup makes a manager for a node with blocks 10.244.1.0/24 and
// fd00:1::/120 on a fake kernel and a fake device.
func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{nl: routestest.NewFakeNetlink(), state: t.TempDir(), now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	f.nl.AddLink("eth0", true)
	m, err := New(Config{
		StateDir: f.state, MTU: 1380, Logger: slog.New(slog.DiscardHandler),
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/120")},
		Now:         func() time.Time { return f.now },
	}, func(cfg wireguard.Config, key wgtypes.Key) (Device, error) {
		f.d = &fakeDevice{nl: f.nl, cfg: cfg, key: key, handshake: map[wgtypes.Key]time.Time{}}
		return f.d, nil
	}, func(v int, owned []string) (RouteTable, error) {
		return routes.NewWithDeps(routes.Config{IPVersion: v, Protocol: 80, InterfaceNames: owned, Logger: slog.New(slog.DiscardHandler)},
			f.nl, routestest.NewFakeConntrack(), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func (f *fixture) apply(t *testing.T) {
	t.Helper()
	if err := f.m.Apply(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// kernelRoutes lists the kernel's routes of family v as "cidr dev name
// proto N [scope link]", sorted (the kernel has no link scope for IPv6).
func (f *fixture) kernelRoutes(v int) []string {
	fam := unix.AF_INET
	if v == 6 {
		fam = unix.AF_INET6
	}
	links, _ := f.nl.LinkList()
	name := map[int]string{}
	for _, l := range links {
		name[l.Index] = l.Name
	}
	var out []string
	for _, r := range f.nl.Routes(fam, unix.RT_TABLE_MAIN) {
		scope := ""
		if r.Scope == unix.RT_SCOPE_LINK {
			scope = " scope link"
		}
		out = append(out, fmt.Sprintf("%s dev %s proto %d%s", r.Dst, name[r.LinkIndex], r.Protocol, scope))
	}
	slices.Sort(out)
	return out
}

func key(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey()
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestPeersAndRoutes: a peer with a key becomes a device peer at its host
// IPv4 (else IPv6) and port, allowing its blocks and tunnel addresses;
// a peer without a key gets no device peer; every peer's blocks, key or
// not, are routed into the device, both families, after the device is
// made.
func TestPeersAndRoutes(t *testing.T) {
	f := setup(t)
	ka, kb := key(t), key(t)
	nodes := []peers.NodeInfo{
		{Name: "node-b", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.2"), TunnelAddr: netip.MustParseAddr("10.244.2.0")},
			IPv6:      peers.Endpoint{HostIP: netip.MustParseAddr("2001:db8::2"), TunnelAddr: netip.MustParseAddr("fd00:9::1")},
			Blocks:    prefixes("10.244.2.0/24", "fd00:2::/120"),
			WireGuard: peers.WireGuardPeer{PublicKey: ka, Port: 51821}},
		{Name: "node-c", IPv6: peers.Endpoint{HostIP: netip.MustParseAddr("2001:db8::3")},
			Blocks: prefixes("10.244.3.0/24"), WireGuard: peers.WireGuardPeer{PublicKey: kb}},
		{Name: "node-d", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.4")}, Blocks: prefixes("10.244.4.0/24", "fd00:4::/120")},
	}
	f.m.OnNodes(nodes)
	f.apply(t)

	b, ok := f.d.peerOn(ka)
	if !ok {
		t.Fatal("node-b (with a key) is no device peer")
	}
	if b.Endpoint != netip.MustParseAddrPort("192.0.2.2:51821") {
		t.Errorf("node-b endpoint %s, want its host IPv4 at its port 192.0.2.2:51821", b.Endpoint)
	}
	if want := prefixes("10.244.2.0/24", "fd00:2::/120", "fd00:9::1/128"); !samePrefixes(b.AllowedIPs, want) {
		t.Errorf("node-b allowed IPs %v, want its blocks and the tunnel address outside them %v", b.AllowedIPs, want)
	}
	c, ok := f.d.peerOn(kb)
	if !ok || c.Endpoint != netip.MustParseAddrPort("[2001:db8::3]:51820") {
		t.Errorf("node-c (IPv6 host only, no port): peer %v %+v, want endpoint [2001:db8::3]:51820", ok, c)
	}
	if n := len(f.d.onDev); n != 2 {
		t.Errorf("device holds %d peers, want 2 (node-d has no key)", n)
	}
	want4 := []string{
		"10.244.2.0/24 dev wireguard.cali proto 80 scope link",
		"10.244.3.0/24 dev wireguard.cali proto 80 scope link",
		"10.244.4.0/24 dev wireguard.cali proto 80 scope link",
	}
	if got := f.kernelRoutes(4); !slices.Equal(got, want4) {
		t.Errorf("IPv4 routes\n got %q\nwant %q", got, want4)
	}
	want6 := []string{
		"fd00:2::/120 dev wireguard.cali proto 80",
		"fd00:4::/120 dev wireguard.cali proto 80",
	}
	if got := f.kernelRoutes(6); !slices.Equal(got, want6) {
		t.Errorf("IPv6 routes\n got %q\nwant %q", got, want6)
	}

	// node-b goes, node-d's IPv6 block goes: their entries and routes too.
	f.m.OnNodes([]peers.NodeInfo{nodes[1], {Name: "node-d", IPv4: nodes[2].IPv4, Blocks: prefixes("10.244.4.0/24")}})
	f.apply(t)
	if _, ok := f.d.peerOn(ka); ok {
		t.Error("removed node-b is still a device peer")
	}
	if got, want := f.kernelRoutes(4), want4[1:]; !slices.Equal(got, want) {
		t.Errorf("IPv4 routes after removal\n got %q\nwant %q", got, want)
	}
	if got := f.kernelRoutes(6); len(got) != 0 {
		t.Errorf("IPv6 routes after removal: %q, want none", got)
	}
}

// TestRoutesOnlyOnDevice: the tables own only the route protocol's
// routes on the device: another protocol's route there and routes
// elsewhere stay; an earlier run's route of ours on the device that no
// peer wants goes.
func TestRoutesOnlyOnDevice(t *testing.T) {
	f := setup(t)
	l := f.nl.AddLink(dev, true)
	eth, _ := f.nl.LinkByName("eth0")
	for _, r := range []struct {
		dst   string
		link  int
		proto int
	}{
		{"10.99.0.0/24", l.Index, 80},   // stale: ours, wanted by nobody
		{"10.98.0.0/24", l.Index, 4},    // an operator's static route
		{"10.97.0.0/24", eth.Index, 80}, // ours, but not on the device
	} {
		if err := f.nl.AddRoute(routeOf(r.dst, r.link, r.proto)); err != nil {
			t.Fatal(err)
		}
	}
	f.m.OnNodes([]peers.NodeInfo{{Name: "node-b", Blocks: prefixes("10.244.2.0/24")}})
	f.apply(t)
	want := []string{
		"10.244.2.0/24 dev wireguard.cali proto 80 scope link",
		"10.97.0.0/24 dev eth0 proto 80 scope link",
		"10.98.0.0/24 dev wireguard.cali proto 4 scope link",
	}
	if got := f.kernelRoutes(4); !slices.Equal(got, want) {
		t.Errorf("routes\n got %q\nwant %q", got, want)
	}
}

// TestLeftOut: a block overlapping this node's own is never routed into
// the device nor allowed; a peer claiming this node's key gets no device
// peer.
func TestLeftOut(t *testing.T) {
	f := setup(t)
	f.m.OnNodes([]peers.NodeInfo{
		{Name: "node-b", Blocks: prefixes("10.244.1.128/25", "10.244.2.0/24"), WireGuard: peers.WireGuardPeer{PublicKey: key(t)}},
		{Name: "node-c", Blocks: prefixes("10.244.3.0/24"), WireGuard: peers.WireGuardPeer{PublicKey: f.m.PublicKey()}},
	})
	f.apply(t)
	if got := f.kernelRoutes(4); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "10.244.1.128/25") }) {
		t.Errorf("a peer's block inside a local block is routed away: %q", got)
	}
	if len(f.d.onDev) != 1 || slices.Contains(f.d.onDev[0].AllowedIPs, netip.MustParsePrefix("10.244.1.128/25")) {
		t.Errorf("device peers %+v: want node-b alone, without the overlapping block", f.d.onDev)
	}
	d := &inspect.Desired{}
	f.m.Snapshot(d)
	probs := strings.Join(d.Overlay[0].Problems, "\n")
	if !strings.Contains(probs, "peer node-b: block 10.244.1.128/25 overlaps") || !strings.Contains(probs, "peer node-c: WireGuard key") {
		t.Errorf("problems %q do not name both", probs)
	}
}

// TestKeyRotation: a rotated key file (what `routeletd wireguard
// rotate-key` writes) is noticed by the key watch; the next Apply sets
// the new key on the device, and only after the device took it does the
// node's record get the new public key.
func TestKeyRotation(t *testing.T) {
	f := setup(t)
	first := f.m.PublicKey()
	rec := peers.Record{Name: "node-a"}
	f.m.Publish(&rec)
	if rec.WireGuardPublicKey != first.String() || rec.WireGuardPort != "51820" {
		t.Fatalf("record %+v, want the public key %s and port 51820", rec, first)
	}
	f.apply(t)
	if f.m.UpdateSelf(&rec) {
		t.Error("UpdateSelf changed the record without a rotation")
	}
	if loaded, err := wireguard.LoadKey(f.state); err != nil || loaded.PublicKey() != first {
		t.Fatalf("the key file does not hold the manager's key: %v", err)
	}

	woke := make(chan struct{}, 16)
	ctx := t.Context()
	if err := f.m.Watch(ctx, func() { woke <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	priv, err := wireguard.RotateKey(f.state)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Fatal("the key watch did not wake the loop after the rotation")
	}
	f.d.mu.Lock()
	f.d.fail = errors.New("device busy")
	f.d.mu.Unlock()
	if err := f.m.Apply(); err == nil {
		t.Fatal("the device's error was not returned")
	}
	if f.m.UpdateSelf(&rec) {
		t.Error("the new public key was published before the device took the key")
	}
	f.d.mu.Lock()
	f.d.fail = nil
	f.d.mu.Unlock()
	f.apply(t)
	if f.d.applied != priv {
		t.Fatal("the device does not hold the rotated key")
	}
	if !f.m.UpdateSelf(&rec) || rec.WireGuardPublicKey != priv.PublicKey().String() {
		t.Errorf("record after the rotation: %+v, want public key %s", rec, priv.PublicKey())
	}
	if f.m.UpdateSelf(&rec) {
		t.Error("UpdateSelf changed the record twice for one rotation")
	}
}

// TestBrokenKeyFileKeepsKey: a key file that is no key keeps the key in
// use and says why in the status.
func TestBrokenKeyFileKeepsKey(t *testing.T) {
	f := setup(t)
	f.apply(t)
	before := f.d.applied
	if err := writeFile(KeyDir(f.state), wireguard.KeyFile, "not a key\n"); err != nil {
		t.Fatal(err)
	}
	f.m.KeyChanged()
	f.apply(t)
	if f.d.applied != before {
		t.Error("a broken key file changed the device's key")
	}
	d := &inspect.Desired{}
	f.m.Snapshot(d)
	if !strings.Contains(d.WireGuard.Error, "not a WireGuard key") {
		t.Errorf("status error %q does not say the key file is bad", d.WireGuard.Error)
	}
}

// TestNotReady: the device's not-ready reason is the manager's.
func TestNotReady(t *testing.T) {
	f := setup(t)
	if r := f.m.NotReady(); r != "" {
		t.Fatalf("NotReady %q before anything failed", r)
	}
	f.d.notReady = "wireguard: kernel has none and /dev/net/tun is missing"
	if r := f.m.NotReady(); r != f.d.notReady {
		t.Errorf("NotReady %q, want the device's %q", r, f.d.notReady)
	}
}

// TestEvents: a deleted route the manager wants wakes the loop and is put
// back by the next Apply; the deletion of one it does not want, a route
// of another device, do not wake it; a link event of the device queues a
// route re-read; a lost event a full check.
func TestEvents(t *testing.T) {
	f := setup(t)
	var drift []string
	f.m.cfg.OnDrift = func(object, detail string) { drift = append(drift, object+" "+detail) }
	f.m.OnNodes([]peers.NodeInfo{{Name: "node-b", Blocks: prefixes("10.244.2.0/24")}})
	f.apply(t)
	wakes := 0
	h := f.m.Events(func() { wakes++ })

	h.OnRoute(netwatch.RouteEvent{Iface: dev, Dst: netip.MustParsePrefix("10.99.0.0/24"), Protocol: 80, Deleted: true})
	h.OnRoute(netwatch.RouteEvent{Iface: "eth0", Dst: netip.MustParsePrefix("10.244.2.0/24"), Protocol: 80, Deleted: true})
	if wakes != 0 {
		t.Errorf("%d wakes for deletions that leave the kernel as wanted", wakes)
	}
	l, _ := f.nl.LinkByName(dev)
	if err := f.nl.RouteDel(routePtr(routeOf("10.244.2.0/24", l.Index, 80))); err != nil {
		t.Fatal(err)
	}
	h.OnRoute(netwatch.RouteEvent{Iface: dev, Dst: netip.MustParsePrefix("10.244.2.0/24"), Protocol: 80, Deleted: true})
	if wakes != 1 || !slices.Equal(drift, []string{"route 10.244.2.0/24 dev wireguard.cali"}) {
		t.Fatalf("wanted route deleted: %d wakes, drift %q", wakes, drift)
	}
	f.apply(t)
	if got := f.kernelRoutes(4); len(got) != 1 {
		t.Errorf("deleted route not put back: %q", got)
	}

	h.OnLink(netwatch.LinkEvent{Name: "eth0"})
	if wakes != 1 {
		t.Error("another link's event woke the loop")
	}
	// The device deleted and made again: its routes went with it.
	if err := f.nl.DelLink(dev); err != nil {
		t.Fatal(err)
	}
	h.OnLink(netwatch.LinkEvent{Name: dev, Deleted: true})
	if wakes != 2 {
		t.Fatal("the device's link event did not wake the loop")
	}
	f.apply(t)
	if got := f.kernelRoutes(4); len(got) != 1 {
		t.Errorf("routes after the device came back: %q", got)
	}
	checks := f.d.checks
	h.Rescan()
	h.(netwatch.HostHandler).OnHostChange()
	if f.d.checks != checks+2 || wakes != 4 {
		t.Errorf("rescan and address change: %d device checks, %d wakes", f.d.checks-checks, wakes)
	}
	in := f.m.Interest()
	if !slices.Equal(in.Names, []string{dev}) || !in.RouteDeletesOnly || !in.Host || in.HostIgnores(dev, "wireguard") || !in.HostIgnores("eth0", "device") {
		t.Errorf("interest %+v: want the device's link and address events and its route deletions", in)
	}
}

// TestSnapshotAndMetrics: the wireguard section and the metrics show the
// device, its peers as wanted next to what it holds, and handshake ages;
// the device's routes are in the overlay family of their version.
func TestSnapshotAndMetrics(t *testing.T) {
	f := setup(t)
	kb, kc := key(t), key(t)
	f.m.OnNodes([]peers.NodeInfo{
		{Name: "node-b", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.2")}, Blocks: prefixes("10.244.2.0/24"), WireGuard: peers.WireGuardPeer{PublicKey: kb}},
		{Name: "node-c", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.3")}, Blocks: prefixes("10.244.3.0/24"), WireGuard: peers.WireGuardPeer{PublicKey: kc}},
		{Name: "node-d", Blocks: prefixes("fd00:4::/120")},
	})
	f.apply(t)
	f.d.handshake[kb] = f.now.Add(-42 * time.Second)
	f.apply(t)
	// The overlay's family of IPv4 is there first (overlay manager).
	d := &inspect.Desired{Overlay: []inspect.OverlayFamily{{Version: 4, Routes: map[string][]routes.Target{"eth0": nil}}}}
	f.m.Snapshot(d)
	wg := d.WireGuard
	if wg == nil || wg.Implementation != "kernel" || wg.Device != dev || wg.Port != 51820 || wg.MTU != 1380 || !wg.Up ||
		wg.PublicKey != f.m.PublicKey().String() {
		t.Fatalf("wireguard section %+v", wg)
	}
	if len(wg.Peers) != 2 || wg.Peers[0].Node != "node-b" || wg.Peers[0].Endpoint != "192.0.2.2:51820" || !wg.Peers[0].Configured ||
		wg.Peers[0].HandshakeAgeSeconds == nil || *wg.Peers[0].HandshakeAgeSeconds != 42 || wg.Peers[1].HandshakeAgeSeconds != nil {
		t.Errorf("peers %+v", wg.Peers)
	}
	if !slices.Equal(wg.PeersWithoutKey, []string{"node-d"}) {
		t.Errorf("peers without key %q, want node-d", wg.PeersWithoutKey)
	}
	if len(d.Overlay) != 2 || len(d.Overlay[0].Routes) != 2 || len(d.Overlay[0].Routes[dev]) != 2 || len(d.Overlay[1].Routes[dev]) != 1 ||
		d.Overlay[0].Devices[0].Kind != "wireguard" || d.Overlay[1].Version != 6 {
		t.Errorf("overlay families %+v", d.Overlay)
	}

	reg := prometheus.NewRegistry()
	if err := f.m.Register(reg); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			got[mf.GetName()+labels(m)] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"routelet_wireguard_peers":                              2,
		"routelet_wireguard_handshake_age_seconds{peer=node-b}": 42,
		"routelet_wireguard_implementation{impl=kernel}":        1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}

func labels(m *dto.Metric) string {
	if len(m.Label) == 0 {
		return ""
	}
	var ls []string
	for _, l := range m.Label {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(ls, ",") + "}"
}

// routeOf is a route of protocol proto to dst through the link of index
// link (scope link).
func routeOf(dst string, link, proto int) netlink.Route {
	p := netip.MustParsePrefix(dst)
	return netlink.Route{Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		LinkIndex: link, Protocol: netlink.RouteProtocol(proto), Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN}
}

func routePtr(r netlink.Route) *netlink.Route { return &r }

func writeFile(dir, name, content string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
}

// TestStatusDocument: through the state endpoint's comparison, the
// device's routes show as each peer's routes (path overlay, device
// wireguard.cali), a missing one as the peer's problem, and the
// wireguard section is the document's.
func TestStatusDocument(t *testing.T) {
	f := setup(t)
	kb := key(t)
	nodes := []peers.NodeInfo{
		{Name: "node-b", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.2")}, Blocks: prefixes("10.244.2.0/24"), WireGuard: peers.WireGuardPeer{PublicKey: kb}},
		{Name: "node-c", IPv4: peers.Endpoint{HostIP: netip.MustParseAddr("192.0.2.3")}, Blocks: prefixes("10.244.3.0/24")},
	}
	f.m.OnNodes(nodes)
	f.apply(t)
	d := &inspect.Desired{Loop: true, Node: statusapi.Node{RouteProtocol: 80}}
	for _, n := range nodes {
		d.Peers = append(d.Peers, inspect.Peer{NodeInfo: n})
	}
	f.m.Snapshot(d)
	k := &inspect.Kernel{
		Links:  map[string]inspect.Link{dev: {Name: dev, Kind: "wireguard", Up: true, MTU: 1380}},
		Routes: [2][]inspect.Route{{{Iface: dev, Dst: netip.MustParsePrefix("10.244.2.0/24"), Type: unix.RTN_UNICAST, Protocol: 80, Scope: netlink.SCOPE_LINK}}},
	}
	st := inspect.Compare(d, k, f.now)
	if st.WireGuard == nil || st.WireGuard.Device != dev || len(st.WireGuard.Peers) != 1 {
		t.Fatalf("wireguard section %+v", st.WireGuard)
	}
	rows := map[string]statusapi.Peer{}
	for _, p := range st.Peers {
		rows[p.Name] = p
	}
	if b := rows["node-b"]; b.Path != statusapi.PathOverlay || b.Device != dev || !b.Routes.Wanted || !b.Routes.Present {
		t.Errorf("node-b row %+v: want its route through %s present", b, dev)
	}
	if c := rows["node-c"]; c.Routes.Present || !strings.Contains(c.Problem, "no WireGuard key") {
		t.Errorf("node-c row %+v: want its route missing and the missing key named", c)
	}
	// One row per family the device carries (it is the device of both).
	if len(st.Devices) != 2 || st.Devices[0].Name != dev || st.Devices[0].Family != 4 || st.Devices[1].Family != 6 ||
		st.Devices[0].Problem != "" || st.Devices[1].Problem != "" {
		t.Errorf("devices %+v: want %s as wanted, for IPv4 and IPv6", st.Devices, dev)
	}
}
