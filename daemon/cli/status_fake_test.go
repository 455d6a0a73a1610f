package cli

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/inspect/inspecttest"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/overlay/overlaytest"
	"github.com/routelet/routelet/pkg/state"
)

// statusNow is the fixed "now" of the fake nodes.
var statusNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fakeStatusNode is a state directory with pods and peers written as the
// plugin and the peers' daemons would, and a fake kernel that holds what
// a daemon programmed for them.
type fakeStatusNode struct {
	cfg    *config.Config
	store  *state.Store
	kernel *inspecttest.Fake
	pods   int
	peers  []string
}

// newFakeStatusNode writes node-a's state directory with pods workload
// records (IPAM claims included) and peers peer records, the last one
// with a refused VTEP MAC when bad is set.
func newFakeStatusNode(t testing.TB, pods, peers int) *fakeStatusNode {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	cfg := testConfig(t, "--node-name=node-a", "--state-dir="+dir, "--pod-cidr=10.244.7.0/24", "--encapsulation=vxlan")
	store, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeStatusNode{cfg: cfg, store: store, pods: pods}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(store.WriteDaemonStatus(&state.DaemonStatus{Ready: true, PodMTU: 1450, Blocks: []string{"10.244.7.0/24"}, RouteProtocol: 80,
		DaemonVersion: "v1.2.3", Updated: statusNow.Add(-time.Minute)}))
	must(store.PutNode(&state.Node{Name: "node-a", HostIPv4: "192.0.2.10", Blocks: []string{"10.244.7.0/24"},
		VTEPMAC: overlay.VTEPMAC("node-a", 4).String(), TunnelIPv4: "10.244.7.0", Updated: statusNow.Add(-time.Hour)}))
	must(os.MkdirAll(filepath.Join(dir, "ipam", "addrs"), 0o700))
	for i := range pods {
		ip := fmt.Sprintf("10.244.7.%d", i+1)
		must(store.PutWorkload(&state.Workload{ContainerID: fmt.Sprintf("c%04d", i), IfName: "eth0", HostIface: fmt.Sprintf("cali%04d", i),
			Netns: "/var/run/netns/p", IPs: []string{ip + "/32"}, ContainerMAC: "02:00:00:00:00:01",
			PodNamespace: "default", PodName: fmt.Sprintf("pod-%d", i), Created: statusNow.Add(-time.Hour)}))
		must(os.WriteFile(filepath.Join(dir, "ipam", "addrs", ip), []byte(fmt.Sprintf("c%04d\neth0\n", i)), 0o600))
	}
	n.peers = writePeerRecords(t, store, peers, statusNow)
	return n
}

// writePeerRecords writes n VXLAN peers' records as their daemons would:
// node-0000… with host IPs in 172.16.0.0/16, one /26 block each in
// 10.100.0.0/16, VTEP MACs 66:00:00:00:… The j-th was updated j+1
// minutes before now. It returns their names.
func writePeerRecords(t testing.TB, store *state.Store, n int, now time.Time) []string {
	t.Helper()
	var names []string
	for j := range n {
		name := fmt.Sprintf("node-%04d", j)
		block := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(j / 4), byte(j % 4 * 64)}), 26)
		if err := store.PutNode(&state.Node{Name: name, HostIPv4: fmt.Sprintf("172.16.%d.%d", j/250, j%250+1), Blocks: []string{block.String()},
			VTEPMAC: fmt.Sprintf("66:00:00:00:%02x:%02x", j>>8, j&255), TunnelIPv4: block.Addr().String(),
			Updated: now.Add(-time.Duration(j+1) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// testConfig loads the daemon's configuration from flags alone.
func testConfig(t testing.TB, args ...string) *config.Config {
	t.Helper()
	cfg, err := config.Load(args, func(string) (string, bool) { return "", false }, os.ReadFile, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// underlay is the fake overlay netlink: up0 holding the node IP.
func (n *fakeStatusNode) underlay() overlay.Netlink {
	f := overlaytest.NewFakeNetlink()
	f.AddUnderlay("up0", 1500, netip.MustParsePrefix("192.0.2.10/24"))
	return f
}

// status runs the offline status on the fake kernel (reads counted by r
// when given).
func (n *fakeStatusNode) status(t testing.TB, r inspect.Reader) *statusapi.State {
	t.Helper()
	if r == nil {
		r = n.kernel
	}
	st, err := OfflineStatus(n.cfg, "routeletd is not running", r, n.underlay(), nodespace.Host{}, statusNow)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// program makes the fake kernel hold what the daemon would have
// programmed: the links, every desired route of st, each peer's ARP and
// FDB entry and allowlist member.
func (n *fakeStatusNode) program(t testing.TB) {
	t.Helper()
	n.kernel = &inspecttest.Fake{
		LinkList: []inspect.Link{{Index: 1, Name: "lo", Kind: "device", Up: true, MTU: 65536},
			{Index: 2, Name: "up0", Kind: "veth", Up: true, MTU: 1500, MAC: "02:00:00:00:0a:01"},
			{Index: 3, Name: "vxlan.calico", Kind: "vxlan", Up: true, MTU: 1450, MAC: overlay.VTEPMAC("node-a", 4).String()}},
		NeighList: map[int][]inspect.Neigh{}, FDBList: map[int][]inspect.FDBEntry{}, SetList: map[string][]netip.Prefix{},
	}
	for i := range n.pods {
		n.kernel.LinkList = append(n.kernel.LinkList, inspect.Link{Index: 10 + i, Name: fmt.Sprintf("cali%04d", i), Kind: "veth", Up: true, MTU: 1450})
	}
	st := n.status(t, nil)
	for _, tb := range st.Tables {
		fam := 0
		if tb.Name == statusapi.TableWorkloadsV6 || tb.Name == statusapi.TableOverlayV6 {
			fam = 1
		}
		for _, r := range tb.Routes {
			if !r.Desired {
				continue
			}
			kr := inspect.Route{Iface: r.Iface, Dst: netip.MustParsePrefix(r.CIDR), Type: unix.RTN_UNICAST, Protocol: 80, MTU: r.MTU}
			if r.Iface == "" {
				kr.Iface, kr.Type = "*none*", unix.RTN_BLACKHOLE
			}
			if r.Via != "" {
				kr.Gateway = netip.MustParseAddr(r.Via)
			}
			// As the route table writes them: IPv4 pod routes scope link,
			// the VXLAN device's routes onlink.
			if r.Type == "link" && fam == 0 {
				kr.Scope = unix.RT_SCOPE_LINK
			}
			kr.OnLink = r.Iface == "vxlan.calico"
			n.kernel.RouteList[fam] = append(n.kernel.RouteList[fam], kr)
		}
	}
	nodes, _ := n.store.ListNodes()
	for _, nd := range nodes {
		if nd.Name == "node-a" || nd.VTEPMAC == "" {
			continue
		}
		n.kernel.NeighList[3] = append(n.kernel.NeighList[3], inspect.Neigh{IP: netip.MustParseAddr(nd.TunnelIPv4), MAC: nd.VTEPMAC, State: unix.NUD_PERMANENT})
		n.kernel.FDBList[3] = append(n.kernel.FDBList[3], inspect.FDBEntry{MAC: nd.VTEPMAC, Dst: netip.MustParseAddr(nd.HostIPv4)})
		n.kernel.SetList[ipset.VXLANPeers] = append(n.kernel.SetList[ipset.VXLANPeers], netip.MustParsePrefix(nd.HostIPv4+"/32"))
	}
}

// brokenStatusNode is three pods and three peers with things wrong: pod 1's
// route deleted, a static route on pod 2's veth, node-0001's FDB entry
// gone and its host IP missing from the allowlist, node-0002's ARP entry
// left dynamic, and node-0003's record with a VTEP MAC the daemon refuses.
func brokenStatusNode(t *testing.T) *fakeStatusNode {
	n := newFakeStatusNode(t, 3, 3)
	n.program(t)
	if err := n.store.PutNode(&state.Node{Name: "node-0003", HostIPv4: "172.16.0.99", Blocks: []string{"10.100.9.0/26"},
		VTEPMAC: "01:00:5e:00:00:01", TunnelIPv4: "10.100.9.0", Updated: statusNow.Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	k := n.kernel
	var rs []inspect.Route
	for _, r := range k.RouteList[0] {
		if r.Dst.String() != "10.244.7.2/32" {
			rs = append(rs, r)
		}
	}
	k.RouteList[0] = append(rs, inspect.Route{Iface: "cali0002", Dst: netip.MustParsePrefix("192.168.50.0/24"), Type: unix.RTN_UNICAST, Protocol: unix.RTPROT_STATIC})
	k.FDBList[3] = k.FDBList[3][:0:0]
	nodes, _ := n.store.ListNodes()
	for _, nd := range nodes {
		if nd.Name == "node-0000" || nd.Name == "node-0002" {
			k.FDBList[3] = append(k.FDBList[3], inspect.FDBEntry{MAC: nd.VTEPMAC, Dst: netip.MustParseAddr(nd.HostIPv4)})
		}
	}
	k.SetList[ipset.VXLANPeers] = slicesWithout(k.SetList[ipset.VXLANPeers], netip.MustParsePrefix("172.16.0.2/32"))
	for i, ne := range k.NeighList[3] {
		if ne.IP == netip.MustParseAddr("10.100.0.128") {
			k.NeighList[3][i].State = unix.NUD_REACHABLE
		}
	}
	return n
}

// slicesWithout returns ps without p.
func slicesWithout(ps []netip.Prefix, p netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, q := range ps {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}
