package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/state"
)

// e2ePrefix starts the name of every namespace these tests create; nsPrefix
// adds this test process's PID (see netnstest.OwnedPrefix).
const e2ePrefix = "routelet-e2e-"

var nsPrefix = netnstest.OwnedPrefix(e2ePrefix)

// routeProto is the protocol routelet stamps on its host routes (docs/design.md).
const routeProto = 80

// podGatewayV4 is the link-local next hop every pod's default route uses.
const podGatewayV4 = "169.254.1.1"

// pluginDir holds the binaries built by TestMain.
var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(netnstest.Privileged{
		Stale: e2ePrefix, Bins: []string{netnstest.Routelet, netnstest.PortmapPackage},
		Built: func(dir string) { pluginDir = dir },
	}.Main(m))
}

// routeletdBin builds routeletd beside the plugins on first use and returns
// its path.
func routeletdBin(t *testing.T) string {
	t.Helper()
	return filepath.Join(netnstest.Bins(t, netnstest.Routeletd), "routeletd")
}

// env is one simulated node running routelet with one conflist.
type env struct {
	node     *netnstest.Node
	conf     netnstest.RouteletConf
	list     *libcni.NetworkConfigList
	stateDir string
	blocks   []netip.Prefix
}

// newEnv creates a node namespace and a routelet conflist for it; both are
// removed when t ends, even on failure.
func newEnv(t *testing.T, version string, blocks ...string) *env {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces and veths")
	if len(blocks) == 0 {
		blocks = []string{"10.244.0.0/24"}
	}
	e := &env{stateDir: filepath.Join(t.TempDir(), "state")}
	for _, b := range blocks {
		e.blocks = append(e.blocks, netip.MustParsePrefix(b))
	}
	node, err := netnstest.NewNode(nsPrefix+"node-"+randHex(t), []string{pluginDir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Close(); err != nil {
			t.Errorf("removing node netns: %v", err)
		}
	})
	e.node = node
	e.conf = netnstest.RouteletConf{Name: "e2e", CNIVersion: version, StateDir: e.stateDir, MTU: 1400, Blocks: blocks}
	e.list = mustList(t, e.conf)
	return e
}

func mustList(t *testing.T, c netnstest.RouteletConf) *libcni.NetworkConfigList {
	t.Helper()
	l, err := c.ConfList()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// randHex returns 8 random hex digits for unique namespace names.
func randHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// pod is one attachment: its namespace and the runtime config libcni gets.
type pod struct {
	ns   ns.NetNS
	rt   *libcni.RuntimeConf
	name string // Kubernetes pod name (namespace "e2e")
}

// newPod creates a pod namespace, removed when t ends.
func newPod(t *testing.T, name string) *pod {
	t.Helper()
	n := netnstest.NewFor(t, nsPrefix+"pod-")
	return &pod{ns: n, name: name, rt: &libcni.RuntimeConf{
		ContainerID: "ctr-" + name + "-" + netnstest.Name(n)[len(nsPrefix)+4:],
		NetNS:       n.Path(),
		IfName:      "eth0",
		// What containerd passes to every plugin.
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "e2e"}, {"K8S_POD_NAME", name}},
	}}
}

// wantHostIface is the host veth name docs/design.md fixes: "cali" + the first 11
// hex digits of sha1("<namespace>.<pod>").
func wantHostIface(podName string) string {
	sum := sha1.Sum([]byte("e2e." + podName))
	return "cali" + hex.EncodeToString(sum[:])[:11]
}

// attachment is what a successful ADD produced, as the tests see it.
type attachment struct {
	hostIface string
	ips       []netip.Addr
}

func (a attachment) ip(v6 bool) netip.Addr {
	for _, ip := range a.ips {
		if ip.Is6() == v6 {
			return ip
		}
	}
	return netip.Addr{}
}

// add runs ADD for p and checks everything a user would look at afterwards.
func (e *env) add(t *testing.T, p *pod) attachment {
	t.Helper()
	res, err := e.node.Add(context.Background(), e.list, p.rt)
	if err != nil {
		t.Fatalf("ADD %s: %v", p.name, err)
	}
	return e.checkAttached(t, p, res)
}

// checkAttached verifies the ADD result, the pod's interface and routes, the
// host veth, host route and sysctls, and the workload record.
func (e *env) checkAttached(t *testing.T, p *pod, raw types.Result) attachment {
	t.Helper()
	if got := raw.Version(); got != e.conf.CNIVersion {
		t.Errorf("result version %q, want %q", got, e.conf.CNIVersion)
	}
	res, err := types100.NewResultFromResult(raw)
	if err != nil {
		t.Fatalf("result of %s: %v", p.name, err)
	}
	var a attachment
	hostIdx, ctrIdx := -1, -1
	for i, ifc := range res.Interfaces {
		switch {
		case ifc.Sandbox == "" && strings.HasPrefix(ifc.Name, "cali"):
			hostIdx = i
		case ifc.Sandbox == p.rt.NetNS && ifc.Name == p.rt.IfName:
			ctrIdx = i
		}
	}
	if hostIdx < 0 || ctrIdx < 0 {
		t.Fatalf("result interfaces %+v: want a host cali* interface and %s in %s", res.Interfaces, p.rt.IfName, p.rt.NetNS)
	}
	a.hostIface = res.Interfaces[hostIdx].Name
	if want := wantHostIface(p.name); a.hostIface != want {
		t.Errorf("host interface %q, want %q", a.hostIface, want)
	}
	for _, ipc := range res.IPs {
		addr, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			t.Fatalf("result IP %v unparsable", ipc.Address)
		}
		addr = addr.Unmap()
		a.ips = append(a.ips, addr)
		if ipc.Interface == nil || *ipc.Interface != ctrIdx {
			t.Errorf("result IP %v: interface index %v, want %d (the container interface)", ipc.Address, ipc.Interface, ctrIdx)
		}
		e.checkInBlock(t, addr)
	}
	if len(a.ips) != len(e.blocks) {
		t.Fatalf("result IPs %v: want one per block %v", a.ips, e.blocks)
	}
	for _, fam := range []bool{false, true} {
		if !a.ip(fam).IsValid() {
			continue
		}
		dst := "0.0.0.0/0"
		if fam {
			dst = "::/0"
		}
		found := false
		for _, r := range res.Routes {
			found = found || r.Dst.String() == dst
		}
		if !found {
			t.Errorf("result routes %v: no default route %s", res.Routes, dst)
		}
	}

	e.checkPod(t, p, a)
	e.checkHost(t, p, a)
	e.checkRecord(t, p, a)
	return a
}

// checkInBlock fails unless addr lies in one of the blocks and is neither the
// block's first address (the node's tunnel address) nor, for IPv4, its last.
func (e *env) checkInBlock(t *testing.T, addr netip.Addr) {
	t.Helper()
	for _, b := range e.blocks {
		if !b.Contains(addr) {
			continue
		}
		if addr == b.Addr() {
			t.Errorf("address %s is block %s's reserved first address", addr, b)
		}
		if addr.Is4() && addr == lastAddr(b) {
			t.Errorf("address %s is block %s's broadcast address", addr, b)
		}
		return
	}
	t.Errorf("address %s is in none of the blocks %v", addr, e.blocks)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		bits := p.Bits() - i*8
		switch {
		case bits <= 0:
			b[i] = 0xff
		case bits < 8:
			b[i] |= 0xff >> bits
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// checkPod verifies the container side: interface up with the MTU and the
// addresses, and default routes via the link-local gateway.
func (e *env) checkPod(t *testing.T, p *pod, a attachment) {
	t.Helper()
	err := p.ns.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(p.rt.IfName)
		if err != nil {
			return fmt.Errorf("pod interface %s: %w", p.rt.IfName, err)
		}
		if link.Attrs().OperState != netlink.OperUp && link.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("pod interface %s is down", p.rt.IfName)
		}
		if got := link.Attrs().MTU; got != e.conf.MTU {
			t.Errorf("pod interface %s MTU %d, want %d", p.rt.IfName, got, e.conf.MTU)
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, ip := range a.ips {
			found := false
			for _, ad := range addrs {
				found = found || ad.IP.Equal(ip.AsSlice())
			}
			if !found {
				t.Errorf("pod interface %s lacks address %s (has %v)", p.rt.IfName, ip, addrs)
			}
		}
		if a.ip(false).IsValid() {
			routes, err := routeList(netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			ok := false
			for _, r := range routes {
				ok = ok || (isDefault(r) && r.Gw.String() == podGatewayV4)
			}
			if !ok {
				t.Errorf("pod has no IPv4 default route via %s: %v", podGatewayV4, routes)
			}
		}
		if a.ip(true).IsValid() {
			routes, err := routeList(netlink.FAMILY_V6)
			if err != nil {
				return err
			}
			ok := false
			for _, r := range routes {
				ok = ok || (isDefault(r) && r.Gw != nil)
			}
			if !ok {
				t.Errorf("pod has no IPv6 default route via a gateway: %v", routes)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
}

func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// routeList dumps routes of a family in the calling thread's namespace,
// retrying a dump interrupted by concurrent changes.
func routeList(family int) ([]netlink.Route, error) {
	return nlutil.Retry(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(family, &netlink.Route{Table: 0}, 0)
	})
}

// linkList is routeList for links.
func linkList() ([]netlink.Link, error) {
	return nlutil.Retry(netlink.LinkList)
}

// hostView is the node namespace as an operator sees it with `ip link` and
// `ip route show proto 80`.
type hostView struct {
	cali   map[string]netlink.Link // name → link, cali* only
	routes map[netip.Addr]netlink.Route
}

func (e *env) hostView(t *testing.T) hostView {
	t.Helper()
	v := hostView{cali: map[string]netlink.Link{}, routes: map[netip.Addr]netlink.Route{}}
	err := e.node.NS.Do(func(ns.NetNS) error {
		links, err := linkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, "cali") {
				v.cali[l.Attrs().Name] = l
			}
		}
		routes, err := routeList(netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Protocol != routeProto || r.Dst == nil {
				continue
			}
			ones, bits := r.Dst.Mask.Size()
			if ones != bits {
				continue
			}
			addr, _ := netip.AddrFromSlice(r.Dst.IP)
			v.routes[addr.Unmap()] = r
		}
		return nil
	})
	if err != nil {
		t.Fatalf("node view: %v", err)
	}
	return v
}

// checkHost verifies the node side: host veth up with the MTU and sysctls,
// and a host route per pod address on it with protocol 80.
func (e *env) checkHost(t *testing.T, p *pod, a attachment) {
	t.Helper()
	v := e.hostView(t)
	link, ok := v.cali[a.hostIface]
	if !ok {
		t.Fatalf("node has no host veth %s (has %v)", a.hostIface, keys(v.cali))
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("host veth %s is down", a.hostIface)
	}
	if got := link.Attrs().MTU; got != e.conf.MTU {
		t.Errorf("host veth %s MTU %d, want %d", a.hostIface, got, e.conf.MTU)
	}
	for _, ip := range a.ips {
		r, ok := v.routes[ip]
		if !ok {
			t.Errorf("node has no host route %s proto %d", ip, routeProto)
			continue
		}
		if r.LinkIndex != link.Attrs().Index {
			t.Errorf("host route %s: link index %d, want %d (%s)", ip, r.LinkIndex, link.Attrs().Index, a.hostIface)
		}
		if ip.Is4() && r.Scope != netlink.SCOPE_LINK {
			t.Errorf("host route %s: scope %v, want link", ip, r.Scope)
		}
	}
	sysctls := map[string]string{"net/ipv4/conf/" + a.hostIface + "/proxy_arp": "1"}
	if a.ip(true).IsValid() {
		sysctls["net/ipv6/conf/"+a.hostIface+"/proxy_ndp"] = "1"
	}
	for k, want := range sysctls {
		got, err := netnstest.Sysctl(e.node.NS, k, "")
		if err != nil {
			t.Errorf("%v", err)
		} else if got != want {
			t.Errorf("sysctl %s = %s, want %s", k, got, want)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// recordPath is where docs/design.md puts the workload record of an attachment.
func (e *env) recordPath(rt *libcni.RuntimeConf) string {
	return filepath.Join(e.stateDir, "workloads", rt.ContainerID+"_"+rt.IfName+".json")
}

// checkRecord verifies the workload record file the daemon will read.
func (e *env) checkRecord(t *testing.T, p *pod, a attachment) {
	t.Helper()
	b, err := os.ReadFile(e.recordPath(p.rt))
	if err != nil {
		t.Fatalf("workload record: %v", err)
	}
	var w state.Workload
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("workload record %s: %v", e.recordPath(p.rt), err)
	}
	if w.Version != state.RecordVersion || w.ContainerID != p.rt.ContainerID || w.IfName != p.rt.IfName ||
		w.HostIface != a.hostIface || w.Netns != p.rt.NetNS {
		t.Errorf("workload record %+v does not match the attachment (%s %s %s %s)",
			w, p.rt.ContainerID, p.rt.IfName, a.hostIface, p.rt.NetNS)
	}
	if w.PodNamespace != "e2e" || w.PodName != p.name {
		t.Errorf("workload record pod %s/%s, want e2e/%s", w.PodNamespace, w.PodName, p.name)
	}
	var got []netip.Addr
	for _, c := range w.IPs {
		pfx, err := netip.ParsePrefix(c)
		if err != nil {
			t.Errorf("workload record IP %q: %v", c, err)
			continue
		}
		got = append(got, pfx.Addr())
	}
	if fmt.Sprint(got) != fmt.Sprint(a.ips) {
		t.Errorf("workload record IPs %v, want %v", w.IPs, a.ips)
	}
}

// allocations returns what the IPAM store holds, keyed by container ID.
func (e *env) allocations(t *testing.T) map[ipam.Attachment][]ipam.Allocation {
	t.Helper()
	al, err := ipam.New(filepath.Join(e.stateDir, "ipam"), e.blocks, ipam.Options{})
	if err != nil {
		t.Fatalf("opening IPAM store: %v", err)
	}
	m, err := al.List(context.Background())
	if err != nil {
		t.Fatalf("listing IPAM allocations: %v", err)
	}
	return m
}

// checkDetached verifies that nothing of p's attachment a is left: no host
// veth, no host route, no record, no allocation.
func (e *env) checkDetached(t *testing.T, p *pod, a attachment) {
	t.Helper()
	v := e.hostView(t)
	if _, ok := v.cali[a.hostIface]; ok {
		t.Errorf("host veth %s still exists", a.hostIface)
	}
	for _, ip := range a.ips {
		if _, ok := v.routes[ip]; ok {
			t.Errorf("host route %s still exists", ip)
		}
	}
	if _, err := os.Lstat(e.recordPath(p.rt)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workload record %s still exists (%v)", e.recordPath(p.rt), err)
	}
	att := ipam.Attachment{ContainerID: p.rt.ContainerID, IfName: p.rt.IfName}
	if got := e.allocations(t)[att]; len(got) > 0 {
		t.Errorf("IPAM still holds %v for %s", got, p.rt.ContainerID)
	}
}
