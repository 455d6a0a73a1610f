package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/podguard"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/routes/routestest"
	"github.com/routelet/routelet/pkg/state"
)

// fakeDataplane keeps veths and host routes in memory and fails the step
// named in failAt.
type fakeDataplane struct {
	failAt string
	veths  map[string]podnet.Spec    // host iface → what Setup made
	routes map[string][]netip.Addr   // host iface → host routes
	protos map[string]int            // host iface → protocol its host routes carry
	calls  []string                  // step names in call order
	podIfs map[string]bool           // "<netns>/<ifname>" present
	node   nodespace.Host            // the node's own links and addresses, besides the veths
	guards map[string]podguard.Spec  // host iface → its pod guard
	owned  func(nodespace.Link) bool // the owned-link rule of the last Host call
	// drift, when set, changes the host routes InspectHost reports (the
	// kernel's, after someone else changed them).
	drift func(r *netlink.Route)
}

var _ dataplane = (*fakeDataplane)(nil)

func newFake() *fakeDataplane {
	return &fakeDataplane{veths: map[string]podnet.Spec{}, routes: map[string][]netip.Addr{}, protos: map[string]int{}, podIfs: map[string]bool{}, guards: map[string]podguard.Spec{}}
}

var errInjected = errors.New("injected failure")

func (f *fakeDataplane) step(name string) error {
	f.calls = append(f.calls, name)
	if f.failAt == name {
		return fmt.Errorf("%s: %w", name, errInjected)
	}
	return nil
}

func (f *fakeDataplane) InspectPod(netnsPath, ifName string) (*podnet.PodView, error) {
	if err := f.step("inspect-pod"); err != nil {
		return nil, err
	}
	v := &podnet.PodView{Exists: f.podIfs[netnsPath+"/"+ifName]}
	if v.Exists {
		for _, s := range f.veths {
			if s.Netns == netnsPath && s.ContIface == ifName {
				v.Up, v.MAC = true, "02:00:00:00:00:01"
				for _, a := range s.Addrs {
					v.Addrs = append(v.Addrs, netip.PrefixFrom(a, a.BitLen()))
				}
				v.Routes = []podnet.Route{
					{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: podnet.GatewayV4},
					{Dst: netip.MustParsePrefix("::/0"), Gw: podnet.GatewayV6},
				}
			}
		}
	}
	return v, nil
}

func (f *fakeDataplane) InspectHost(hostIface string) (*podnet.HostView, error) {
	if err := f.step("inspect-host"); err != nil {
		return nil, err
	}
	if _, ok := f.veths[hostIface]; !ok {
		return &podnet.HostView{}, nil
	}
	v := &podnet.HostView{Exists: true, Type: "veth", Up: true, MAC: podnet.HostMAC.String()}
	for _, a := range f.routes[hostIface] {
		// What AddHostRoutes writes (the link index is not kept).
		k := podnet.HostRoute(a, 0, netlink.RouteProtocol(f.protos[hostIface]))
		if f.drift != nil {
			f.drift(&k)
		}
		r, _ := podnet.RouteOf(&k)
		v.Routes = append(v.Routes, r)
	}
	return v, nil
}

func (f *fakeDataplane) HostLink(hostIface string) (*podnet.HostView, error) {
	v, err := f.InspectHost(hostIface)
	if v != nil {
		v.Routes = nil
	}
	return v, err
}

func (f *fakeDataplane) EnableForwarding(bool) error { return f.step("forwarding") }

func (f *fakeDataplane) Setup(spec podnet.Spec) (*podnet.Attached, error) {
	if err := f.step("setup"); err != nil {
		return nil, err
	}
	f.veths[spec.HostIface] = spec
	if spec.Created != nil {
		if err := spec.Created(); err != nil {
			delete(f.veths, spec.HostIface)
			return nil, err
		}
	}
	f.podIfs[spec.Netns+"/"+spec.ContIface] = true
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	return &podnet.Attached{HostIface: spec.HostIface, HostMAC: podnet.HostMAC, ContIface: spec.ContIface,
		ContMAC: mac, MTU: spec.MTU, NetnsPath: spec.Netns}, nil
}

func (f *fakeDataplane) AddHostRoutes(hostIface string, addrs []netip.Addr, proto netlink.RouteProtocol) error {
	if err := f.step("host-routes"); err != nil {
		return err
	}
	f.routes[hostIface] = append(f.routes[hostIface], addrs...)
	f.protos[hostIface] = int(proto)
	return nil
}

func (f *fakeDataplane) Teardown(hostIface string) error {
	if err := f.step("teardown"); err != nil {
		return err
	}
	if s, ok := f.veths[hostIface]; ok {
		delete(f.podIfs, s.Netns+"/"+s.ContIface)
	}
	delete(f.veths, hostIface)
	delete(f.routes, hostIface)
	delete(f.protos, hostIface)
	return nil
}

func (f *fakeDataplane) Unplug(hostIface string) (vethErr, guardErr error) {
	if err := f.Teardown(hostIface); err != nil {
		return err, nil
	}
	return nil, f.RemoveGuard(hostIface)
}

func (f *fakeDataplane) EnsureGuard(spec podguard.Spec) error {
	if err := f.step("guard"); err != nil {
		return err
	}
	if _, ok := f.veths[spec.Device]; !ok {
		return fmt.Errorf("guard %s: no such device", spec.Device)
	}
	f.guards[spec.Device] = spec
	return nil
}

func (f *fakeDataplane) ReadGuard(spec podguard.Spec) (podguard.State, error) {
	if err := f.step("read-guard"); err != nil {
		return podguard.Missing, err
	}
	have, ok := f.guards[spec.Device]
	switch {
	case !ok:
		return podguard.Missing, nil
	case have.VXLANPort != spec.VXLANPort || !slices.Equal(have.Addrs, spec.Addrs):
		return podguard.WrongRules, nil
	}
	return podguard.OK, nil
}

func (f *fakeDataplane) RemoveGuard(hostIface string) error {
	if err := f.step("remove-guard"); err != nil {
		return err
	}
	delete(f.guards, hostIface)
	return nil
}

// Host is f.node plus the fake's veths.
func (f *fakeDataplane) Host(_ int, owned func(nodespace.Link) bool) (nodespace.Host, error) {
	f.owned = owned
	h := f.node
	h.Links = slices.Clone(h.Links)
	for name := range f.veths {
		h.Links = append(h.Links, nodespace.Link{Name: name, Type: "veth"})
	}
	return h, nil
}

// useFake swaps the dataplane and stdout for the test's duration.
func useFake(t *testing.T) (*fakeDataplane, *bytes.Buffer) {
	t.Helper()
	f := newFake()
	var out bytes.Buffer
	oldDP, oldOut := dp, stdout
	dp, stdout = f, &out
	t.Cleanup(func() { dp, stdout = oldDP, oldOut })
	return f, &out
}

// unitNode is a state directory for fake-backed command tests.
func unitNode(t testing.TB) (*node, []byte) {
	n := &node{t: t, stateDir: filepath.Join(t.TempDir(), "state")}
	return n, n.conf("1.0.0", nil)
}

// writeDaemonStatus writes content as the node's daemon.json, as a
// routeletd would, in a state directory made if need be.
func (n *node) writeDaemonStatus(content string) {
	n.t.Helper()
	if _, err := state.Open(n.stateDir); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.stateDir, "daemon.json"), []byte(content), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

// TestAddFailureMatrix fails each step of ADD in turn and checks that the
// address, the veth, the pod guard, the record and the host routes are all undone and the
// error names the failed step. It needs no root: the kernel is faked, the
// IPAM and state directory are real.
func TestAddFailureMatrix(t *testing.T) {
	for _, step := range []string{"inspect-pod", "inspect-host", "forwarding", "setup", "guard", "host-routes"} {
		t.Run(step, func(t *testing.T) {
			f, out := useFake(t)
			f.failAt = step
			n, conf := unitNode(t)
			err := cmdAdd(&skel.CmdArgs{ContainerID: "matrix", Netns: "/run/netns/pod", IfName: "eth0", StdinData: conf})
			if err == nil {
				t.Fatalf("ADD succeeded with %s failing", step)
			}
			if !strings.Contains(err.Error(), step) {
				t.Errorf("error %q does not name the failed step %s", err, step)
			}
			if out.Len() != 0 {
				t.Errorf("failed ADD printed a result: %s", out)
			}
			if len(f.veths) != 0 || len(f.routes) != 0 || len(f.guards) != 0 {
				t.Errorf("veths %v / routes %v / guards %v left after failed ADD", f.veths, f.routes, f.guards)
			}
			if r := n.records(); len(r) != 0 {
				t.Errorf("%d records left after failed ADD", len(r))
			}
			if a := n.allocations(); len(a) != 0 {
				t.Errorf("allocations left after failed ADD: %v", a)
			}
		})
	}
}

// TestAddDelWithFake walks ADD, CHECK and DEL against the fake, including a
// DEL whose veth teardown fails (the record must survive for the retry).
func TestAddDelWithFake(t *testing.T) {
	f, out := useFake(t)
	n, conf := unitNode(t)
	args := &skel.CmdArgs{ContainerID: "fake", Netns: "/run/netns/pod", IfName: "eth0", Args: "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web", StdinData: conf}
	if err := cmdAdd(args); err != nil {
		t.Fatal(err)
	}
	host := podnet.VethName("cali", "ns1", "web", "fake", "eth0")
	if _, ok := f.veths[host]; !ok {
		t.Fatalf("no veth %s; have %v", host, f.veths)
	}
	if got := f.routes[host]; len(got) != 2 {
		t.Errorf("host routes %v, want one v4 and one v6", got)
	}
	recs := n.records()
	if len(recs) != 1 || recs[0].PodNamespace != "ns1" || recs[0].PodName != "web" || recs[0].HostIface != host {
		t.Errorf("records = %+v", recs)
	}
	wantOrder := []string{"inspect-pod", "inspect-host", "forwarding", "setup", "guard", "host-routes"}
	if !slices.Equal(f.calls, wantOrder) {
		t.Errorf("ADD steps %v, want %v", f.calls, wantOrder)
	}
	if g, ok := f.guards[host]; !ok || len(g.Addrs) != 2 || g.VXLANPort != 0 {
		t.Errorf("pod guard after ADD: %+v (present %v), want the pod's two addresses and the default port", g, ok)
	}

	checkArgs := *args
	checkArgs.StdinData = withPrev(t, conf, out.Bytes())
	if err := cmdCheck(&checkArgs); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	saved := f.guards[host]
	delete(f.guards, host)
	if err := cmdCheck(&checkArgs); err == nil || !strings.Contains(err.Error(), "pod source check on "+host+": missing") {
		t.Errorf("CHECK without the pod guard: %v", err)
	}
	f.guards[host] = podguard.Spec{Device: host, Addrs: saved.Addrs[:1]}
	if err := cmdCheck(&checkArgs); err == nil || !strings.Contains(err.Error(), "pod source check on "+host+": rules differ") {
		t.Errorf("CHECK with a guard for one address only: %v", err)
	}
	f.guards[host] = saved
	f.routes[host] = f.routes[host][1:] // lose the IPv4 host route
	if err := cmdCheck(&checkArgs); err == nil || !strings.Contains(err.Error(), "host route 10.90.0.1/32 dev "+host+" is missing") {
		t.Errorf("CHECK with a missing host route: %v", err)
	}

	f.failAt = "teardown"
	err := cmdDel(args)
	var te *types.Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "teardown") {
		t.Fatalf("DEL with failing teardown: %v, want an error naming it", err)
	}
	if len(n.records()) != 1 {
		t.Errorf("record removed although the veth is still there")
	}
	if _, ok := f.guards[host]; !ok {
		t.Errorf("pod guard removed although the veth is still there")
	}
	f.failAt = ""
	if err := cmdDel(args); err != nil {
		t.Fatalf("DEL retry: %v", err)
	}
	if len(f.veths) != 0 || len(n.records()) != 0 || len(n.allocations()) != 0 || len(f.guards) != 0 {
		t.Errorf("after DEL: veths %v, %d records, allocations %v, guards %v", f.veths, len(n.records()), n.allocations(), f.guards)
	}
	if err := cmdDel(args); err != nil {
		t.Errorf("second DEL: %v", err)
	}
}

// TestHostRouteProtocolFromDaemonStatus: ADD stamps the host routes with the
// protocol daemon.json publishes (80 without daemon.json, or with one from a
// daemon that predates the field), and CHECK wants that same protocol: with
// the daemon on 81, a host route carrying 80 is wrong, and the other way
// round.
func TestHostRouteProtocolFromDaemonStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status string // daemon.json content; "" for none
		want   int
	}{
		{name: "no daemon.json", want: 80},
		{name: "older daemon.json", status: `{"version": 1, "ready": true}`, want: 80},
		{name: "daemon on 80", status: `{"version": 1, "ready": true, "routeProtocol": 80}`, want: 80},
		{name: "daemon on 81", status: `{"version": 1, "ready": true, "routeProtocol": 81}`, want: 81},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, out := useFake(t)
			n, conf := unitNode(t)
			if tc.status != "" {
				n.writeDaemonStatus(tc.status)
			}
			args := &skel.CmdArgs{ContainerID: "proto", Netns: "/run/netns/pod", IfName: "eth0", StdinData: conf}
			if err := cmdAdd(args); err != nil {
				t.Fatal(err)
			}
			host := podnet.VethName("cali", "", "", "proto", "eth0")
			if got := f.protos[host]; got != tc.want || len(f.routes[host]) != 2 {
				t.Fatalf("ADD: host routes %v with protocol %d, want two with %d", f.routes[host], got, tc.want)
			}
			check := *args
			check.StdinData = withPrev(t, conf, out.Bytes())
			if err := cmdCheck(&check); err != nil {
				t.Errorf("CHECK with the routes ADD made: %v", err)
			}
			other := 81
			if tc.want == 81 {
				other = 80
			}
			f.protos[host] = other
			msg := fmt.Sprintf("host route 10.90.0.1/32 dev %s has proto %d, not as routeletd writes it (proto %d)", host, other, tc.want)
			if err := cmdCheck(&check); err == nil || !strings.Contains(err.Error(), msg) {
				t.Errorf("CHECK with host routes on protocol %d: %v, want an error containing %q", other, err, msg)
			}
		})
	}
}

// TestOverlayDevicesFromDaemonStatus: ADD and DEL count the overlay
// devices and the WireGuard device daemon.json names as routelet's links
// (not the node's space), and the default names without daemon.json or
// with one from a daemon that predates the fields; the WireGuard device as
// the kernel's (kind wireguard) or the userspace datapath's (kind tun).
func TestOverlayDevicesFromDaemonStatus(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    string // daemon.json content; "" for none
		vxlan     string // the IPv4 VXLAN device routelet owns
		wireguard string // the WireGuard device routelet owns
	}{
		{name: "no daemon.json", vxlan: "vxlan.calico", wireguard: "wireguard.cali"},
		{name: "older daemon.json", status: `{"version": 1, "ready": true}`, vxlan: "vxlan.calico", wireguard: "wireguard.cali"},
		{name: "configured device", status: `{"version": 1, "ready": true, "vxlanDevice": "vx-custom"}`, vxlan: "vx-custom", wireguard: "wireguard.cali"},
		{name: "configured WireGuard device", status: `{"version": 1, "ready": true, "wireguardDevice": "wg-pods"}`, vxlan: "vxlan.calico", wireguard: "wg-pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := useFake(t)
			n, conf := unitNode(t)
			if tc.status != "" {
				n.writeDaemonStatus(tc.status)
			}
			other := "vx-custom"
			if tc.vxlan == other {
				other = "vxlan.calico"
			}
			args := &skel.CmdArgs{ContainerID: "devices", Netns: "/run/netns/pod", IfName: "eth0", StdinData: conf}
			for _, cmd := range []struct {
				name string
				run  func(*skel.CmdArgs) error
			}{{"ADD", cmdAdd}, {"DEL", cmdDel}} {
				f.owned = nil
				if err := cmd.run(args); err != nil {
					t.Fatalf("%s: %v", cmd.name, err)
				}
				if f.owned == nil {
					t.Fatalf("%s read no host", cmd.name)
				}
				for _, l := range []nodespace.Link{{Name: tc.vxlan, Type: "vxlan"}, {Name: "vxlan-v6.calico", Type: "vxlan"}, {Name: "tunl0", Type: "ipip"},
					{Name: tc.wireguard, Type: "wireguard"}, {Name: tc.wireguard, Type: "tuntap"}} {
					if !f.owned(l) {
						t.Errorf("%s: %s (%s) is not routelet's", cmd.name, l.Name, l.Type)
					}
				}
				otherWG := "wg-pods"
				if tc.wireguard == otherWG {
					otherWG = "wireguard.cali"
				}
				for _, l := range []nodespace.Link{{Name: other, Type: "vxlan"}, {Name: otherWG, Type: "wireguard"}, {Name: tc.wireguard, Type: "dummy"}} {
					if f.owned(l) {
						t.Errorf("%s: %s (%s) is routelet's", cmd.name, l.Name, l.Type)
					}
				}
			}
		})
	}
}

// TestCheckHostRouteDrift: CHECK fails for a host route the daemon's
// route table would not leave as it is — same destination and veth,
// drifted in one attribute the table compares (routestest.Drifts:
// protocol, source, MTU, IPv4 scope) — and names what the kernel has.
func TestCheckHostRouteDrift(t *testing.T) {
	f, out := useFake(t)
	_, conf := unitNode(t)
	args := &skel.CmdArgs{ContainerID: "drift", Netns: "/run/netns/pod", IfName: "eth0", StdinData: conf}
	if err := cmdAdd(args); err != nil {
		t.Fatal(err)
	}
	host := podnet.VethName("cali", "", "", "drift", "eth0")
	check := *args
	check.StdinData = withPrev(t, conf, out.Bytes())
	if err := cmdCheck(&check); err != nil {
		t.Fatalf("CHECK with the routes ADD made: %v", err)
	}
	addrs := f.routes[host]
	if len(addrs) == 0 {
		t.Fatal("ADD made no host routes")
	}
	for _, a := range addrs {
		v := 4
		if a.Is6() {
			v = 6
		}
		dst := netip.PrefixFrom(a, a.BitLen())
		for _, d := range routestest.Drifts(routes.Target{CIDR: dst}, v) {
			f.drift = func(r *netlink.Route) {
				if r.Dst.IP.Equal(a.AsSlice()) {
					d.Change(r)
				}
			}
			msg := fmt.Sprintf("host route %s dev %s has %s", dst, host, d.Want)
			if err := cmdCheck(&check); err == nil || !strings.Contains(err.Error(), msg) {
				t.Errorf("CHECK with %s drifted (%s): %v, want an error containing %q", dst, d.Name, err, msg)
			}
		}
	}
	f.drift = nil
}

// TestDelLeavesNewSandboxVeth: two sandboxes of one pod share the host veth
// name; the old sandbox's DEL must not delete the new sandbox's veth.
func TestDelLeavesNewSandboxVeth(t *testing.T) {
	f, _ := useFake(t)
	n, conf := unitNode(t)
	podArgs := "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web"
	old := &skel.CmdArgs{ContainerID: "sandbox-old", Netns: "/run/netns/old", IfName: "eth0", Args: podArgs, StdinData: conf}
	cur := &skel.CmdArgs{ContainerID: "sandbox-new", Netns: "/run/netns/new", IfName: "eth0", Args: podArgs, StdinData: conf}
	if err := cmdAdd(old); err != nil {
		t.Fatal(err)
	}
	if err := cmdAdd(cur); err != nil { // replaces the veth, as podnet.Setup does
		t.Fatal(err)
	}
	if err := cmdDel(old); err != nil {
		t.Fatal(err)
	}
	host := podnet.VethName("cali", "ns1", "web", "", "eth0")
	if s, ok := f.veths[host]; !ok || s.Netns != "/run/netns/new" {
		t.Errorf("new sandbox's veth %s gone after the old sandbox's DEL (veths %v)", host, f.veths)
	}
	if r := n.records(); len(r) != 1 || r[0].ContainerID != "sandbox-new" {
		t.Errorf("records after DEL of old sandbox: %+v", r)
	}
}
