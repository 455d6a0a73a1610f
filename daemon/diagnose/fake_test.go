package diagnose

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
	"github.com/routelet/routelet/pkg/wireguard"
)

// fakeKernel is a node's kernel as maps; what a test breaks it edits.
type fakeKernel struct {
	links    []Link
	routes   map[int][]Route
	neighs   map[string][]Neigh // "dev/v"
	fdb      map[string][]FDB
	sysctls  map[string]string // overrides of the wanted values
	sets     map[string][]netip.Prefix
	podLinks map[string]Link // "netns/ifname" overrides (default: mtu podMTU)
	flows    []Flow
	host     nodespace.Host
	parents  map[netip.Addr]overlay.Underlay
	podMTU   int
	// wg are the WireGuard devices wgctrl answers for, by name.
	wg map[string]wireguard.Status
}

func (k *fakeKernel) WireGuard(name string) (wireguard.Status, error) {
	if d, ok := k.wg[name]; ok {
		return d, nil
	}
	return wireguard.Status{}, fmt.Errorf("no WireGuard device %s answers: %w", name, os.ErrNotExist)
}

func (k *fakeKernel) Links() ([]Link, error) { return slices.Clone(k.links), nil }

func (k *fakeKernel) Routes(v int) ([]Route, error) { return k.routes[v], nil }

func (k *fakeKernel) Neighs(index, v int) ([]Neigh, error) {
	return k.neighs[fmt.Sprintf("%s/%d", k.name(index), v)], nil
}

func (k *fakeKernel) FDB(index int) ([]FDB, error) { return k.fdb[k.name(index)], nil }

// name returns the name of link index ("" when there is none).
func (k *fakeKernel) name(index int) string {
	for _, l := range k.links {
		if l.Index == index {
			return l.Name
		}
	}
	return ""
}

// Sysctl answers what routelet wants unless the test set another value.
func (k *fakeKernel) Sysctl(key string) (string, error) {
	if v, ok := k.sysctls[key]; ok {
		return v, nil
	}
	switch key[strings.LastIndex(key, "/")+1:] {
	case "proxy_delay", "accept_ra", "accept_dad":
		return "0", nil
	}
	return "1", nil
}

func (k *fakeKernel) SetMembers(name string) ([]netip.Prefix, bool, error) {
	m, ok := k.sets[name]
	return m, ok, nil
}

func (k *fakeKernel) PodLink(netnsPath, ifName string) (Link, error) {
	if l, ok := k.podLinks[netnsPath+"/"+ifName]; ok {
		return l, nil
	}
	return Link{Name: ifName, Kind: "veth", Up: true, LowerUp: true, MTU: k.podMTU}, nil
}

func (k *fakeKernel) Conntrack(a, b netip.Addr) ([]Flow, error) {
	var out []Flow
	for _, f := range k.flows {
		if f.Src == a && f.Dst == b || f.Src == b && f.Dst == a {
			out = append(out, f)
		}
	}
	return out, nil
}

func (k *fakeKernel) NodeSpace() (nodespace.Host, error) { return k.host, nil }

func (k *fakeKernel) Parent(ip netip.Addr) (overlay.Underlay, error) {
	if u, ok := k.parents[ip]; ok {
		return u, nil
	}
	return overlay.Underlay{}, fmt.Errorf("find parent: no link holds host IP %s", ip)
}

// fakeState is a state directory as values.
type fakeState struct {
	status  *state.DaemonStatus
	running bool
	wl      map[string]*state.Workload
	nodes   []peers.Record
	// nodesErr, when set, is what reading nodes/ fails with (a datastore
	// other than file has no nodes/ to read).
	nodesErr error
}

func (s *fakeState) DaemonStatus() (*state.DaemonStatus, error) { return s.status, nil }
func (s *fakeState) DaemonRunning() (bool, error)               { return s.running, nil }
func (s *fakeState) Workloads() (map[string]*state.Workload, map[string]string, error) {
	return s.wl, map[string]string{}, nil
}
func (s *fakeState) Nodes() ([]peers.Record, []error, error) {
	if s.nodesErr != nil {
		return nil, nil, s.nodesErr
	}
	return s.nodes, nil, nil
}
func (s *fakeState) Ledger() (map[peers.Claim]peers.Sighting, error) {
	return map[peers.Claim]peers.Sighting{}, nil
}

// fakeNode is node "a" (10.0.1.10 on eth0, blocks 10.244.1.0/24 and
// fd00:244:1::/120, VXLAN) with pods pods and peers peers, everything
// programmed as routeletd programs it.
type fakeNode struct {
	cfg Config
	st  *fakeState
	k   *fakeKernel
	// daemon is what the running daemon's state endpoint answers (nil:
	// not asked).
	daemon *statusapi.State
}

// the fake node's constants.
var (
	fakeHost4   = netip.MustParseAddr("10.0.1.10")
	fakeHost6   = netip.MustParseAddr("fd00:1::10")
	fakeBlock4  = netip.MustParsePrefix("10.244.1.0/24")
	fakeBlock6  = netip.MustParsePrefix("fd00:244:1::/120")
	fakeNow     = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fakePodMTU  = 1430
	fakeVXLAN4  = 1450
	fakeVXLAN6  = 1430
	fakeProto   = routes.DefaultProtocol
	fakeCIDRs   = []netip.Prefix{fakeBlock4, fakeBlock6}
	fakeParentU = overlay.Underlay{Name: "eth0", Index: 2, MTU: 1500}
)

// fakePeerName is the name of peer i.
func fakePeerName(i int) string { return fmt.Sprintf("node-%04d", i) }

// fakePeer returns peer i's host IPs and blocks: hosts 10.1.x.y and
// fd00:2::x:y on another subnet, blocks 10.(100+i/256).(i%256).0/24 and
// fd00:245:i::/120.
func fakePeer(i int) (h4, h6 netip.Addr, b4, b6 netip.Prefix) {
	h4 = netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i%250 + 1)})
	h6 = netip.MustParseAddr(fmt.Sprintf("fd00:2::%x:%x", i/250, i%250+1))
	b4 = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i/256), byte(i % 256), 0}), 24)
	b6 = netip.MustParsePrefix(fmt.Sprintf("fd00:245:%x::/120", i))
	return
}

// fakePod returns pod i's name, container ID, veth and addresses.
func fakePod(i int) (name, id, veth string, a4, a6 netip.Addr) {
	name = fmt.Sprintf("pod-%d", i)
	id = fmt.Sprintf("%08x%s", i+1, strings.Repeat("c", 56))
	veth = fmt.Sprintf("cali%011x", i+1)
	a4 = netip.AddrFrom4([4]byte{10, 244, 1, byte(i + 1)})
	a6 = netip.MustParseAddr(fmt.Sprintf("fd00:244:1::%x", i+1))
	return
}

// newFakeNode builds node a with the given pods and peers.
func newFakeNode(pods, npeers int) *fakeNode {
	cfg := Config{NodeName: "a", StateDir: "/run/routelet", IfacePrefix: "cali", RouteProtocol: fakeProto, Mode: overlay.ModeVXLAN,
		VXLANDevice: overlay.DeviceVXLAN, VNI: overlay.DefaultVNI, Port: overlay.DefaultPort, PodCIDRs: fakeCIDRs, Now: fakeNow}
	st := &fakeState{running: true, wl: map[string]*state.Workload{},
		status: &state.DaemonStatus{Ready: true, PodMTU: fakePodMTU, Blocks: []string{fakeBlock4.String(), fakeBlock6.String()}, RouteProtocol: fakeProto}}
	st.nodes = append(st.nodes, peers.Record{Name: "a", HostIPv4: fakeHost4.String(), HostIPv6: fakeHost6.String(),
		Blocks:  []string{fakeBlock4.String(), fakeBlock6.String()},
		VTEPMAC: overlay.VTEPMAC("a", 4).String(), VTEPMACv6: overlay.VTEPMAC("a", 6).String(), TunnelIPv4: "10.244.1.0", TunnelIPv6: "fd00:244:1::", Updated: fakeNow})
	p4, p6 := fakeParentU, fakeParentU
	p4.Prefix, p6.Prefix = netip.PrefixFrom(fakeHost4, 24), netip.PrefixFrom(fakeHost6, 64)
	k := &fakeKernel{routes: map[int][]Route{}, neighs: map[string][]Neigh{}, fdb: map[string][]FDB{}, sysctls: map[string]string{},
		sets: map[string][]netip.Prefix{}, podLinks: map[string]Link{}, podMTU: fakePodMTU,
		parents: map[netip.Addr]overlay.Underlay{fakeHost4: p4, fakeHost6: p6},
		host:    nodespace.Host{Addrs: []netip.Prefix{p4.Prefix, p6.Prefix, netip.MustParsePrefix("127.0.0.1/8")}, Uplinks: []string{"eth0"}}}
	k.links = []Link{
		{Name: "lo", Index: 1, Kind: "device", Up: true, LowerUp: true, MTU: 65536},
		{Name: "eth0", Index: 2, Kind: "veth", Up: true, LowerUp: true, MTU: 1500},
		{Name: overlay.DeviceVXLAN, Index: 3, Kind: "vxlan", Up: true, LowerUp: true, MTU: fakeVXLAN4, MAC: overlay.VTEPMAC("a", 4).String(), VNI: overlay.DefaultVNI, Port: overlay.DefaultPort},
		{Name: overlay.DeviceVXLANv6, Index: 4, Kind: "vxlan", Up: true, LowerUp: true, MTU: fakeVXLAN6, MAC: overlay.VTEPMAC("a", 6).String(), VNI: overlay.DefaultVNI, Port: overlay.DefaultPort},
	}
	for v, b := range map[int]netip.Prefix{4: fakeBlock4, 6: fakeBlock6} {
		k.routes[v] = append(k.routes[v], Route{Dst: b, Type: routes.TypeBlackhole.KernelType(), Protocol: fakeProto})
	}
	for i := range pods {
		name, id, veth, a4, a6 := fakePod(i)
		key := state.AttachmentName(id, "eth0") + ".json"
		mac := fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256)
		st.wl[key] = &state.Workload{Version: 1, ContainerID: id, IfName: "eth0", HostIface: veth, Netns: "/var/run/netns/" + name,
			IPs: []string{a4.String() + "/32", a6.String() + "/128"}, ContainerMAC: mac, PodNamespace: "demo", PodName: name, Created: fakeNow}
		k.links = append(k.links, Link{Name: veth, Index: 100 + i, Kind: "veth", Up: true, LowerUp: true, MTU: fakePodMTU})
		k.routes[4] = append(k.routes[4], Route{Dst: netip.PrefixFrom(a4, 32), Iface: veth, Type: routes.TypeLink.KernelType(), Scope: unix.RT_SCOPE_LINK, Protocol: fakeProto})
		k.routes[6] = append(k.routes[6], Route{Dst: netip.PrefixFrom(a6, 128), Iface: veth, Type: routes.TypeLink.KernelType(), Protocol: fakeProto})
		k.neighs[veth+"/4"] = []Neigh{{IP: a4, MAC: mac, State: unix.NUD_PERMANENT}}
	}
	vx4, vx6 := ipset.Name(ipset.VXLANPeers, ipset.IPv4), ipset.Name(ipset.VXLANPeers, ipset.IPv6)
	k.sets[vx4], k.sets[vx6] = []netip.Prefix{}, []netip.Prefix{}
	for i := range npeers {
		name := fakePeerName(i)
		h4, h6, b4, b6 := fakePeer(i)
		m4, m6 := overlay.VTEPMAC(name, 4), overlay.VTEPMAC(name, 6)
		st.nodes = append(st.nodes, peers.Record{Name: name, HostIPv4: h4.String(), HostIPv6: h6.String(), Blocks: []string{b4.String(), b6.String()},
			VTEPMAC: m4.String(), VTEPMACv6: m6.String(), TunnelIPv4: b4.Addr().String(), TunnelIPv6: b6.Addr().String(), Updated: fakeNow})
		k.routes[4] = append(k.routes[4], Route{Dst: b4, Iface: overlay.DeviceVXLAN, Type: routes.TypeGateway.KernelType(), Gateway: b4.Addr(), OnLink: true, MTU: fakeVXLAN4, Protocol: fakeProto})
		k.routes[6] = append(k.routes[6], Route{Dst: b6, Iface: overlay.DeviceVXLANv6, Type: routes.TypeGateway.KernelType(), Gateway: b6.Addr(), OnLink: true, MTU: fakeVXLAN6, Protocol: fakeProto})
		k.neighs[overlay.DeviceVXLAN+"/4"] = append(k.neighs[overlay.DeviceVXLAN+"/4"], Neigh{IP: b4.Addr(), MAC: m4.String(), State: unix.NUD_PERMANENT})
		k.neighs[overlay.DeviceVXLANv6+"/6"] = append(k.neighs[overlay.DeviceVXLANv6+"/6"], Neigh{IP: b6.Addr(), MAC: m6.String(), State: unix.NUD_PERMANENT})
		k.fdb[overlay.DeviceVXLAN] = append(k.fdb[overlay.DeviceVXLAN], FDB{MAC: m4.String(), Dst: h4, State: unix.NUD_PERMANENT})
		k.fdb[overlay.DeviceVXLANv6] = append(k.fdb[overlay.DeviceVXLANv6], FDB{MAC: m6.String(), Dst: h6, State: unix.NUD_PERMANENT})
		k.sets[vx4] = append(k.sets[vx4], netip.PrefixFrom(h4, 32))
		k.sets[vx6] = append(k.sets[vx6], netip.PrefixFrom(h6, 128))
	}
	return &fakeNode{cfg: cfg, st: st, k: k}
}
