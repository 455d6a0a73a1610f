package allowlist

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/firewall"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/state"
)

// nsBase starts every namespace name of these tests; nsPrefix adds the
// test process's PID, so leftovers of a crashed run can be found.
const nsBase = "rl-allow-"

var nsPrefix = netnstest.OwnedPrefix(nsBase)

// binDir holds routeletd and the routelet plugin, built by TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(netnstest.Privileged{
		Stale: nsBase, Bins: []string{netnstest.Routelet, netnstest.Routeletd},
		Built: func(dir string) { binDir = dir },
	}.Main(m))
}

// backends are the iptables backends every scenario runs with.
var backends = []string{firewall.BackendNFT, firewall.BackendLegacy}

// eachBackend runs test once per iptables backend, as a subtest named for
// the backend.
func eachBackend(t *testing.T, test func(t *testing.T, backend string)) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { test(t, backend) })
	}
}

// eachBackendAndEncap runs test once per iptables backend and overlay
// encapsulation (vxlan, ipip), as subtests named backend/encap.
func eachBackendAndEncap(t *testing.T, test func(t *testing.T, backend, encap string)) {
	for _, backend := range backends {
		for _, encap := range []string{"vxlan", "ipip"} {
			t.Run(backend+"/"+encap, func(t *testing.T) { test(t, backend, encap) })
		}
	}
}

func randHex() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Underlay addresses: one /24 on a bridge.
const (
	nodeIP      = "192.0.2.10"
	peerIP      = "192.0.2.11"
	attackerIP  = "192.0.2.66"
	outsideIP   = "192.0.2.99"
	nodeIP6     = "2001:db8::10"
	peerIP6     = "2001:db8::11"
	attackerIP6 = "2001:db8::66"
	nodeBlock   = "10.244.1.0/24"
	peerBlock   = "10.244.2.0/24"
)

// lan is the node under test and the hosts that talk to it (a peer, an
// attacker, a host outside the cluster), each with eth0 on one underlay
// bridge. Only the node runs routeletd (startDaemon); the others are bare
// namespaces.
type lan struct {
	t        *testing.T
	backend  string
	node     *netnstest.Node
	peer     ns.NetNS // a real peer: its address is in a node record
	attacker ns.NetNS // on the underlay, but no node
	outside  ns.NetNS // a host outside the cluster
	stateDir string
	store    *state.Store
	ipt      *firewall.IPTables // backend's iptables, used inside the node
	ipt6     *firewall.IPTables // and its ip6tables
}

// newLAN builds the namespaces: a "lan" namespace with bridge br0, and
// the node, peer, attacker and outside hosts each with eth0 on it.
func newLAN(t *testing.T, backend string) *lan {
	t.Helper()
	netnstest.SkipUnlessRoot(t, "creates network namespaces, iptables rules and ipsets, and runs routeletd")
	netnstest.SkipUnlessInstalled(t, "ipset, iptables", "ipset", "iptables-"+backend, "ip6tables-"+backend)
	c := &lan{t: t, backend: backend, stateDir: filepath.Join(t.TempDir(), "state")}
	id := randHex()
	var err error
	c.node, err = netnstest.NewNode(nsPrefix+"node-"+id, []string{binDir}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.node.Close(); err != nil {
			t.Errorf("remove node netns: %v", err)
		}
	})
	bridge := newNS(t, "lan-"+id)
	c.peer, c.attacker, c.outside = newNS(t, "peer-"+id), newNS(t, "atk-"+id), newNS(t, "out-"+id)
	sh(t, bridge, "ip link add br0 type bridge")
	sh(t, bridge, "ip link set br0 up")
	for i, h := range []struct {
		n       ns.NetNS
		ip, ip6 string
	}{{c.node.NS, nodeIP, nodeIP6}, {c.peer, peerIP, peerIP6}, {c.attacker, attackerIP, attackerIP6}, {c.outside, outsideIP, "2001:db8::99"}} {
		port := fmt.Sprintf("p%d", i)
		sh(t, h.n, "ip link add eth0 type veth peer name "+port+" netns "+netnstest.Name(bridge))
		sh(t, h.n, "ip addr add "+h.ip+"/24 dev eth0")
		sh(t, h.n, "ip addr add "+h.ip6+"/64 dev eth0 nodad")
		sh(t, h.n, "ip link set eth0 up")
		sh(t, bridge, "ip link set "+port+" master br0 up")
	}
	// The node's default route leads outside, as on a real host.
	sh(t, c.node.NS, "ip route add default via "+outsideIP)
	c.store, err = state.Open(c.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	c.ipt, err = firewall.NewIPTables(ipset.IPv4, backend)
	if err != nil {
		t.Fatal(err)
	}
	c.ipt6, err = firewall.NewIPTables(ipset.IPv6, backend)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newNS creates a namespace removed when t ends.
func newNS(t *testing.T, role string) ns.NetNS {
	t.Helper()
	return netnstest.NewNamedFor(t, nsPrefix+role)
}

// sh runs a command (split on spaces) inside n and returns its output.
func sh(t *testing.T, n ns.NetNS, cmd string) string {
	t.Helper()
	f := strings.Fields(cmd)
	out, err := netnstest.Exec(context.Background(), n, f[0], f[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// iptables runs the backend's iptables (or ip6tables with v6) in the node.
func (c *lan) iptables(v6 bool, args ...string) (string, error) {
	bin := "iptables-" + c.backend
	if v6 {
		bin = "ip6tables-" + c.backend
	}
	return netnstest.Exec(context.Background(), c.node.NS, bin, args...)
}

// mustIptables is iptables failing the test on error.
func (c *lan) mustIptables(args ...string) string {
	c.t.Helper()
	out, err := c.iptables(false, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// chain returns `iptables -S chain` in table of the node, "" when the chain
// does not exist.
func (c *lan) chain(table, chain string) string {
	out, err := c.iptables(false, "-t", table, "-S", chain)
	if err != nil {
		return ""
	}
	return out
}

// setMembers returns the members of an ipset in the node, as `ipset list`
// prints them; ok is false when the set does not exist.
func (c *lan) setMembers(name string) (members []string, ok bool) {
	listed, err := netnstest.IPSetMembers(c.node.NS, name)
	if err != nil {
		return nil, false
	}
	for _, l := range listed {
		switch {
		case !strings.Contains(l, "/") && strings.Contains(l, ":"):
			l += "/128" // ipset prints host entries without their length
		case !strings.Contains(l, "/"):
			l += "/32"
		}
		members = append(members, l)
	}
	slices.Sort(members)
	return members, true
}

// setNames returns `ipset list -n` of the node, sorted.
func (c *lan) setNames() []string {
	c.t.Helper()
	out := sh(c.t, c.node.NS, "ipset list -n")
	names := strings.Fields(out)
	slices.Sort(names)
	return names
}

// dropAcceptCounts returns the packet counters of the first ACCEPT and
// the first DROP rule of ROUTELET-INPUT (IPv4).
func (c *lan) dropAcceptCounts() (accept, drop uint64, err error) {
	return c.dropAcceptCountsOf(c.ipt)
}

// dropAcceptCountsOf is dropAcceptCounts through ipt (iptables or ip6tables).
func (c *lan) dropAcceptCountsOf(ipt *firewall.IPTables) (accept, drop uint64, err error) {
	err = c.node.NS.Do(func(ns.NetNS) error {
		stats, err := ipt.StructuredStats("filter", firewall.InputChain)
		if err != nil {
			return err
		}
		seenA, seenD := false, false
		for _, s := range stats {
			switch {
			case s.Target == "ACCEPT" && !seenA:
				accept, seenA = s.Packets, true
			case s.Target == "DROP" && !seenD:
				drop, seenD = s.Packets, true
			}
		}
		if !seenA || !seenD {
			return fmt.Errorf("%s has no ACCEPT and DROP rule: %+v", firewall.InputChain, stats)
		}
		return nil
	})
	return accept, drop, err
}

// writeNode writes a node record into the node's nodes/ directory, as
// copying another node's record there would.
func (c *lan) writeNode(name, hostIP, block string) {
	c.t.Helper()
	if err := c.store.PutNode(&state.Node{Version: 1, Name: name, HostIPv4: hostIP, Blocks: []string{block}, Updated: time.Now().UTC()}); err != nil {
		c.t.Fatal(err)
	}
}

// daemon is a routeletd running in the node.
type daemon struct {
	proc *netnstest.Proc
	log  *netnstest.Buffer
}

// routeletdArgs are the flags every test daemon gets; extra ones follow
// and win.
func (c *lan) routeletdArgs(extra ...string) []string {
	return append([]string{"--node-name=node-a", "--state-dir=" + c.stateDir, "--pod-cidr=" + nodeBlock,
		"--node-ip=" + nodeIP, "--iptables-backend=" + c.backend, "--log-level=debug"}, extra...)
}

// startDaemon runs routeletd in the node and waits until daemon.json says
// it is ready. It is killed when the test ends; its log is printed if the
// test failed.
func (c *lan) startDaemon(extra ...string) *daemon {
	c.t.Helper()
	return c.startDaemonUntil("routeletd ready (daemon.json)", func(st *state.DaemonStatus) bool { return st.Ready }, extra...)
}

// startDaemonEncap starts routeletd with --encapsulation=encap and waits
// for it to be ready. On a kernel without ipip the daemon stays not ready
// for ipip (it cannot make tunl0) while its allowlist and firewall rules
// work all the same (the IPIP drop rule guards the node whatever the
// device), so for ipip that reason counts as started.
func (c *lan) startDaemonEncap(encap string, extra ...string) *daemon {
	args := append([]string{"--encapsulation=" + encap}, extra...)
	if encap != "ipip" {
		return c.startDaemon(args...)
	}
	return c.startDaemonUntil("routeletd ready, or not ready for want of ipip", func(st *state.DaemonStatus) bool {
		return st.Ready || strings.Contains(st.Reason, "kernel cannot create ipip links")
	}, args...)
}

// startDaemonUntil is startDaemon waiting for settled(daemon.json) instead
// of readiness.
func (c *lan) startDaemonUntil(what string, settled func(*state.DaemonStatus) bool, extra ...string) *daemon {
	c.t.Helper()
	d := &daemon{log: &netnstest.Buffer{}}
	var err error
	if d.proc, err = netnstest.StartIn(c.node.NS, d.log, filepath.Join(binDir, "routeletd"), c.routeletdArgs(extra...)...); err != nil {
		c.t.Fatal(err)
	}
	t := c.t
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("routeletd log:\n%s", d.log.String())
		}
	})
	netnstest.Eventually(t, netnstest.ReadyTimeout, what, func() bool {
		select {
		case <-d.proc.Done():
			t.Fatalf("routeletd exited: %v\n%s", d.proc.Err(), d.log.String())
		default:
		}
		st, err := c.store.ReadDaemonStatus()
		return err == nil && settled(st)
	})
	return d
}

// kill9 kills the daemon outright, as a crash or OOM kill would.
func (d *daemon) kill9() { _ = d.proc.Kill() }

// stop sends SIGTERM, waits for the exit (SIGKILL after 10 s) and returns
// the exit error. Stopping a stopped daemon returns its exit status again.
func (d *daemon) stop() error { return d.proc.StopOrKill(10 * time.Second) }

// rawListener is a raw IPv4 socket for one IP protocol inside a namespace.
// The kernel hands raw sockets a copy of each packet after the INPUT hook
// and before the protocol's own handler, so it sees exactly the packets
// the firewall let through to the host, whether or not a VXLAN or IPIP
// device then consumes them.
type rawListener struct {
	c *net.IPConn
}

func listenRaw(t *testing.T, n ns.NetNS, proto string) *rawListener {
	return listenRawNet(t, n, "ip4:"+proto)
}

// listenRawNet opens a raw socket for network ("ip4:17", "ip6:17"…) in n.
func listenRawNet(t *testing.T, n ns.NetNS, network string) *rawListener {
	t.Helper()
	var c *net.IPConn
	err := n.Do(func(ns.NetNS) error {
		var err error
		c, err = net.ListenIP(network, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawListener{c: c}
}

// sawFrom reads for up to wait and reports whether a packet from src
// whose payload (after the IPv4 header) contains marker arrived.
func (r *rawListener) sawFrom(t *testing.T, src, marker string, wait time.Duration) bool {
	t.Helper()
	buf := make([]byte, 2048)
	deadline := time.Now().Add(wait)
	for {
		_ = r.c.SetReadDeadline(deadline)
		n, from, err := r.c.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if from.String() == src && bytes.Contains(buf[:n], []byte(marker)) {
			return true
		}
	}
}

// sendVXLAN sends one UDP datagram to the node's VXLAN port from n: a VXLAN
// header (VNI 4096) and marker, as a forged encapsulated frame would be.
func sendVXLAN(t *testing.T, n ns.NetNS, marker string) {
	t.Helper()
	sendVXLANTo(t, n, nodeIP, marker)
}

// sendVXLANTo is sendVXLAN to the node address dst (IPv4 or IPv6).
func sendVXLANTo(t *testing.T, n ns.NetNS, dst, marker string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		c, err := net.Dial("udp", net.JoinHostPort(dst, "4789"))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(append([]byte{0x08, 0, 0, 0, 0, 0x10, 0, 0}, marker...))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sendIPIP sends one IPIP packet (protocol 4) to the node from n: an inner
// IPv4/UDP header towards a pod address of the node, then marker.
func sendIPIP(t *testing.T, n ns.NetNS, marker string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		c, err := net.Dial("ip4:4", nodeIP)
		if err != nil {
			return err
		}
		defer c.Close()
		total := 20 + 8 + len(marker)
		inner := []byte{0x45, 0, byte(total >> 8), byte(total), 0, 0, 0, 0, 64, 17, 0, 0, 10, 244, 2, 9, 10, 244, 1, 2,
			0x30, 0x39, 0x30, 0x39, byte((8 + len(marker)) >> 8), byte(8 + len(marker)), 0, 0}
		_, err = c.Write(append(inner, marker...))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// metric returns the value of an unlabelled metric from the daemon's
// /metrics (health-addr default 127.0.0.1:9099 inside the node), dialled
// from a thread in the node namespace.
func (c *lan) metric(name string) float64 {
	c.t.Helper()
	v, ok := c.metricValue(name)
	if !ok {
		c.t.Fatalf("metric %s not served", name)
	}
	return v
}

// metricValue is metric without failing: ok is false when the daemon does
// not serve name (yet).
func (c *lan) metricValue(name string) (float64, bool) {
	c.t.Helper()
	_, body, err := netnstest.HTTPGet(c.node.NS, "http://127.0.0.1:9099/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	v, ok := netnstest.MetricValue(body, name)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		c.t.Fatalf("metric %s: %q: %v", name, v, err)
	}
	return f, true
}
