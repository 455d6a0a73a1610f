package diagnose

import (
	"bytes"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenCases are node a with three pods and three peers, healthy or
// broken one way, and the pair diagnosed.
var goldenCases = []struct {
	name     string
	src, dst string
	breakIt  func(n *fakeNode)
	failing  []string // the steps that must fail ("id" or "id/v")
	opts     Options  // what the daemon's state endpoint answered
}{
	{name: "healthy-remote", src: "demo/pod-0", dst: "10.100.1.5"},
	{name: "healthy-local", src: "demo/pod-0", dst: "demo/pod-1"},
	{name: "healthy-ingress", src: "fd00:245:2::9", dst: "demo/pod-2"},
	{name: "healthy-node", src: "demo/pod-1", dst: "node-0002"},
	{name: "fdb-missing-daemon-stopped", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"vtep-fdb/4"},
		breakIt: func(n *fakeNode) {
			n.st.running, n.st.status.Ready, n.st.status.Reason = false, false, "routeletd stopped"
			n.k.fdb[overlay.DeviceVXLAN] = slices.DeleteFunc(n.k.fdb[overlay.DeviceVXLAN], func(e FDB) bool { return e.Dst == netip.MustParseAddr("10.1.0.2") })
			n.k.flows = []Flow{{Proto: "icmp", Src: netip.MustParseAddr("10.244.1.1"), Dst: netip.MustParseAddr("10.100.1.5"), TimeoutS: 29}}
		}},
	{name: "stale-sandbox-record", src: "10.244.1.9", dst: "demo/pod-1", failing: []string{"src-record"},
		breakIt: func(n *fakeNode) {
			// The old sandbox of pod-0, whose veth pod-0's new sandbox
			// took over; its file name sorts after the new one's.
			_, _, veth, _, _ := fakePod(0)
			id := strings.Repeat("f", 64)
			n.st.wl[id+"_eth0.json"] = &state.Workload{Version: 1, ContainerID: id, IfName: "eth0", HostIface: veth, Netns: "/var/run/netns/old",
				IPs: []string{"10.244.1.9/32"}, ContainerMAC: "02:00:00:00:ff:ff", PodNamespace: "demo", PodName: "pod-0", Created: fakeNow.Add(-time.Hour)}
		}},
	{name: "peer-record-missing", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"peer-record/4"},
		breakIt: func(n *fakeNode) {
			n.st.nodes = slices.DeleteFunc(n.st.nodes, func(r peers.Record) bool { return r.Name == fakePeerName(1) })
		}},
	{name: "vtep-mac-wrong", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"vtep/4"},
		breakIt: func(n *fakeNode) {
			for i := range n.st.nodes {
				if n.st.nodes[i].Name == fakePeerName(1) {
					n.st.nodes[i].VTEPMAC = "02:00:00:00:0b:04"
				}
			}
			for i, e := range n.k.neighs[overlay.DeviceVXLAN+"/4"] {
				if e.IP == netip.MustParseAddr("10.100.1.0") {
					n.k.neighs[overlay.DeviceVXLAN+"/4"][i].MAC = "02:00:00:00:0b:04"
				}
			}
			for i, e := range n.k.fdb[overlay.DeviceVXLAN] {
				if e.Dst == netip.MustParseAddr("10.1.0.2") {
					n.k.fdb[overlay.DeviceVXLAN][i].MAC = "02:00:00:00:0b:04"
				}
			}
		}},
	{name: "no-vtep-mac", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"route/4"},
		breakIt: func(n *fakeNode) {
			for i := range n.st.nodes {
				if n.st.nodes[i].Name == fakePeerName(1) {
					n.st.nodes[i].VTEPMAC = ""
				}
			}
		}},
	{name: "allowlist-member-missing", src: "10.100.1.5", dst: "demo/pod-0", failing: []string{"allowlist/4"},
		breakIt: func(n *fakeNode) {
			n.k.sets["routelet-vxlan-peers"] = slices.DeleteFunc(n.k.sets["routelet-vxlan-peers"], func(p netip.Prefix) bool { return p.Addr() == netip.MustParseAddr("10.1.0.2") })
		}},
	{name: "pod-route-missing", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"src-host-route/4"},
		breakIt: func(n *fakeNode) {
			n.st.running = false
			n.k.routes[4] = slices.DeleteFunc(n.k.routes[4], func(r Route) bool { return r.Dst == netip.MustParsePrefix("10.244.1.1/32") })
		}},
	{name: "pod-route-foreign", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"src-host-route/4"},
		breakIt: func(n *fakeNode) {
			for i, r := range n.k.routes[4] {
				if r.Dst == netip.MustParsePrefix("10.244.1.1/32") {
					n.k.routes[4][i] = Route{Dst: r.Dst, Iface: "eth0", Type: routes.TypeLink.KernelType(), Protocol: 4}
				}
			}
		}},
	{name: "mtu-mismatch", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"src-pod-mtu"},
		breakIt: func(n *fakeNode) {
			n.k.podLinks["/var/run/netns/pod-0/eth0"] = Link{Name: "eth0", MTU: 1500}
		}},
	{name: "path-mtu", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"path-mtu/4"},
		breakIt: func(n *fakeNode) {
			n.st.status.PodMTU, n.k.podMTU = 1480, 1480
		}},
	{name: "overlapping-block-refused", src: "demo/pod-0", dst: "10.244.1.200", failing: []string{"route/4"},
		breakIt: func(n *fakeNode) {
			for i := range n.st.nodes {
				if n.st.nodes[i].Name == fakePeerName(1) {
					n.st.nodes[i].Blocks = append(n.st.nodes[i].Blocks, "10.244.1.128/25")
				}
			}
		}},
	{name: "veth-down", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"src-veth"},
		breakIt: func(n *fakeNode) {
			for i := range n.k.links {
				if n.k.links[i].Name == "cali00000000001" {
					n.k.links[i].Up, n.k.links[i].LowerUp = false, false
				}
			}
		}},
	{name: "sysctl-off", src: "demo/pod-0", dst: "demo/pod-1", failing: []string{"dst-sysctls"},
		breakIt: func(n *fakeNode) { n.k.sysctls["net/ipv4/conf/cali00000000002/proxy_arp"] = "0" }},
	{name: "overlay-device-down", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"overlay-device/4"},
		breakIt: func(n *fakeNode) {
			for i := range n.k.links {
				if n.k.links[i].Name == overlay.DeviceVXLAN {
					n.k.links[i].Up = false
				}
			}
		}},
	{name: "cross-subnet-direct", src: "demo/pod-0", dst: "10.100.1.5",
		breakIt: func(n *fakeNode) { crossSubnetPeer(n, true) }},
	{name: "cross-subnet-direct-route-missing", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"route/4"},
		breakIt: func(n *fakeNode) { crossSubnetPeer(n, false) }},
	{name: "route-shadowed", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"route/4"},
		breakIt: func(n *fakeNode) {
			n.k.routes[4] = append(n.k.routes[4], Route{Dst: netip.MustParsePrefix("10.100.1.0/28"), Iface: "eth0", Type: routes.TypeLink.KernelType(), Protocol: 4})
		}},
	{name: "wrong-mode-given", src: "demo/pod-0", dst: "demo/pod-1", failing: []string{"node"},
		breakIt: func(n *fakeNode) { n.cfg.Mode = overlay.ModeNone }},
	{name: "no-pod-at-address", src: "10.244.1.77", dst: "10.100.1.5", failing: []string{"src-record"}},
	{name: "daemon-down", src: "demo/pod-0", dst: "10.100.1.5", opts: Options{DaemonDown: "routeletd is not running"},
		breakIt: func(n *fakeNode) {
			n.st.running, n.st.status.Ready, n.st.status.Reason = false, false, "routeletd stopped"
		}},
	{name: "daemon-route-conflict", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"route/4"},
		opts: Options{Daemon: &statusapi.State{Source: statusapi.SourceDaemon, Errors: []statusapi.ObjectError{
			{Object: "readiness", Error: "waiting", Since: fakeNow},
			{Object: "apply", Since: fakeNow, Error: "routes: unreachable 10.244.9.0/24 not programmed: " + routes.ErrForeignRoute.Error() +
				"\nroutes: gateway 10.100.1.0/24 dev " + overlay.DeviceVXLAN + ` not programmed, the kernel has "10.100.1.0/24 dev eth0 proto static": ` +
				routes.ErrForeignRoute.Error()}}}},
		breakIt: func(n *fakeNode) {
			n.st.running = false // the lock probe is not asked when the endpoint answers
			for i, r := range n.k.routes[4] {
				if r.Dst == netip.MustParsePrefix("10.100.1.0/24") {
					n.k.routes[4][i] = Route{Dst: r.Dst, Iface: "eth0", Type: routes.TypeLink.KernelType(), Protocol: 4}
				}
			}
		}},
	{name: "kubernetes-daemon-healthy", src: "demo/pod-0", dst: "10.100.1.5", breakIt: func(n *fakeNode) { fromEndpoint(n, "kubernetes") }},
	{name: "kubernetes-daemon-node", src: "demo/pod-1", dst: "node-0002", breakIt: func(n *fakeNode) { fromEndpoint(n, "kubernetes") }},
	{name: "etcd-daemon-refused-block", src: "demo/pod-0", dst: "10.244.1.200", failing: []string{"route/4"},
		breakIt: func(n *fakeNode) {
			fromEndpoint(n, "etcd", statusapi.Refusal{Node: fakePeerName(1), Field: peers.FieldBlock, Value: "10.244.1.128/25",
				Reason: "overlaps this node's block 10.244.1.0/24"})
		}},
	{name: "etcd-daemon-no-record", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"peer-record/4"},
		breakIt: func(n *fakeNode) {
			fromEndpoint(n, "etcd")
			n.daemon.Peers = slices.DeleteFunc(n.daemon.Peers, func(p statusapi.Peer) bool { return p.Name == fakePeerName(1) })
		}},
	{name: "kubernetes-daemon-down", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"node", "peers", "peer-record/4"},
		opts: Options{DaemonDown: "routeletd is not running"},
		breakIt: func(n *fakeNode) {
			fromEndpoint(n, "kubernetes")
			n.daemon = nil
			n.st.running, n.st.status.Ready, n.st.status.Reason = false, false, "routeletd stopped"
		}},
	{name: "kubernetes-daemon-waiting", src: "demo/pod-0", dst: "10.100.1.5", failing: []string{"node", "peers", "peer-record/4"},
		breakIt: func(n *fakeNode) {
			fromEndpoint(n, "kubernetes")
			n.daemon = &statusapi.State{Source: statusapi.SourceDaemon, Readiness: statusapi.Readiness{Reason: "waiting for spec.podCIDRs on node a"}}
			n.st.status.Ready, n.st.status.Reason = false, "waiting for spec.podCIDRs on node a"
		}},
}

// fromEndpoint makes n's peers and own record live in datastore ds (no
// nodes/ to read) and the running daemon serve them on its state
// endpoint, validated, with the given refusals.
func fromEndpoint(n *fakeNode, ds string, refused ...statusapi.Refusal) {
	n.cfg.Datastore = ds
	n.st.nodesErr = errors.New("node records: open /run/routelet/nodes: no such file or directory")
	st := &statusapi.State{Source: statusapi.SourceDaemon, Loop: true, Errors: []statusapi.ObjectError{}}
	st.Datastore.Refusals = refused
	for _, r := range n.st.nodes {
		if r.Name == n.cfg.NodeName {
			st.Node = statusapi.Node{Name: r.Name, Datastore: ds, HostIPv4: r.HostIPv4, HostIPv6: r.HostIPv6, LocalBlocks: r.Blocks,
				VTEPMAC: r.VTEPMAC, VTEPMACv6: r.VTEPMACv6, TunnelIPv4: r.TunnelIPv4, TunnelIPv6: r.TunnelIPv6, PodMTU: fakePodMTU}
			continue
		}
		st.Peers = append(st.Peers, statusapi.Peer{Name: r.Name, HostIPv4: r.HostIPv4, HostIPv6: r.HostIPv6, Blocks: r.Blocks,
			VTEPMAC: r.VTEPMAC, VTEPMACv6: r.VTEPMACv6, TunnelIPv4: r.TunnelIPv4, TunnelIPv6: r.TunnelIPv6, LastChange: r.Updated})
	}
	n.st.nodes = nil
	n.daemon = st
}

// TestGolden: the text and JSON reports of each case match testdata/
// (go test -run TestGolden -update rewrites them), exactly the case's
// steps fail, and the report is OK only when none does.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(3, 3)
			if tc.breakIt != nil {
				tc.breakIt(n)
			}
			opts := tc.opts
			if n.daemon != nil {
				opts.Daemon = n.daemon
			}
			rep, err := Run(n.cfg, n.st, n.k, tc.src, tc.dst, opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range rep.Steps {
				if s.Status == Fail {
					id := s.ID
					if s.Family != 0 {
						id += "/" + string(rune('0'+s.Family))
					}
					got = append(got, id)
				}
			}
			if !slices.Equal(got, tc.failing) || rep.OK != (len(tc.failing) == 0) {
				t.Errorf("failing steps %v (ok %v), want %v", got, rep.OK, tc.failing)
			}
			var txt, js bytes.Buffer
			if err := WriteText(&txt, rep); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, rep); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".txt", txt.Bytes())
			golden(t, tc.name+".json", js.Bytes())
		})
	}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestBadArguments: what names nothing is an *ArgError naming the value.
func TestBadArguments(t *testing.T) {
	n := newFakeNode(3, 3)
	for _, tc := range []struct{ src, dst, bad string }{
		{"demo/nosuch", "demo/pod-1", `SRC "demo/nosuch"`},
		{"demo/pod-0", "nosuch-node", `DST "nosuch-node"`},
		{"demo/pod-0", "127.0.0.1", `DST "127.0.0.1"`},
		{"demo/pod-0", "", `DST ""`},
		{"demo/pod-0", "0000", `DST "0000": names 3 containers`},
		{"10.100.1.5", "10.100.2.5", `neither SRC nor DST`},
		{"demo/pod-0", "10.244.1.1", `is the same as SRC`},
	} {
		_, err := Run(n.cfg, n.st, n.k, tc.src, tc.dst, Options{})
		var aerr *ArgError
		if !errors.As(err, &aerr) || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("Run(%q, %q) = %v, want an ArgError containing %s", tc.src, tc.dst, err, tc.bad)
		}
	}
	// A container ID prefix that names one container is a pod.
	if _, err := Run(n.cfg, n.st, n.k, "00000001", "demo/pod-1", Options{}); err != nil {
		t.Errorf("container ID prefix: %v", err)
	}
}

// crossSubnetPeer puts peer 1 on our subnet (10.0.1.20) in cross-subnet
// VXLAN mode: its block is routed directly via its host IP on eth0, which
// the kernel holds when programmed is true.
func crossSubnetPeer(n *fakeNode, programmed bool) {
	n.cfg.Mode = overlay.ModeVXLANCrossSubnet
	for i := range n.st.nodes {
		if n.st.nodes[i].Name == fakePeerName(1) {
			n.st.nodes[i].HostIPv4 = "10.0.1.20"
		}
	}
	b := netip.MustParsePrefix("10.100.1.0/24")
	n.k.routes[4] = slices.DeleteFunc(n.k.routes[4], func(r Route) bool { return r.Dst == b })
	if programmed {
		n.k.routes[4] = append(n.k.routes[4], Route{Dst: b, Iface: "eth0", Type: routes.TypeGateway.KernelType(), Gateway: netip.MustParseAddr("10.0.1.20"), Protocol: fakeProto})
	}
}
