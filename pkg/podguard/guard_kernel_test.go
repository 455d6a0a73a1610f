package podguard

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
)

// podPair makes a node namespace holding the host veth dev and a pod
// namespace holding its peer eth0, with the pod's own addresses 10.66.0.2
// and fd66::2 and a foreign one of each family (10.66.0.3, fd66::3); the
// node side has 10.66.0.1 and fd66::1.
func podPair(t *testing.T, dev string) (node, pod *netnstest.NS) {
	t.Helper()
	node, pod = netnstest.NewT(t), netnstest.NewT(t)
	la := netlink.NewLinkAttrs()
	la.Name = dev
	if err := node.Handle.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(pod.NetNS.Fd())}); err != nil {
		t.Fatalf("veth: %v", err)
	}
	ip := func(n *netnstest.NS, args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", n.Name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip(node, "addr", "add", "10.66.0.1/24", "dev", dev)
	ip(node, "addr", "add", "fd66::1/64", "dev", dev, "nodad")
	ip(node, "link", "set", dev, "up")
	for _, a := range []string{"10.66.0.2/24", "10.66.0.3/24"} {
		ip(pod, "addr", "add", a, "dev", "eth0")
	}
	for _, a := range []string{"fd66::2/64", "fd66::3/64"} {
		ip(pod, "addr", "add", a, "dev", "eth0", "nodad")
	}
	ip(pod, "link", "set", "eth0", "up")
	return node, pod
}

// guards opens Guards in n.
func guards(t *testing.T, n *netnstest.NS) *Guards {
	t.Helper()
	g, err := New(nftables.WithNetNSFd(int(n.NetNS.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// send sends one datagram (network "udp" to port, or "ip4:4" raw) from
// src to dst inside n.
func send(n *netnstest.NS, network, src, dst string) error {
	return n.Do(func() error {
		if network == "udp" {
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: net.ParseIP(dst), Port: DefaultVXLANPort})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("vxlan?"))
			return err
		}
		c, err := net.ListenPacket(network, src)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo(make([]byte, 20), &net.IPAddr{IP: net.ParseIP(dst)})
		return err
	})
}

// TestGuardTraffic: with the guard on the host veth the pod reaches the
// node from its own addresses (IPv6 neighbour discovery included), while
// a foreign source of either family, UDP to the VXLAN port and IPIP from
// its own address are dropped and counted.
func TestGuardTraffic(t *testing.T) {
	node, pod := podPair(t, "calipg00001")
	g := guards(t, node)
	spec := Spec{Device: "calipg00001", Addrs: []netip.Addr{netip.MustParseAddr("10.66.0.2"), netip.MustParseAddr("fd66::2")}}
	if st, err := g.Ensure(spec); err != nil || st != Missing {
		t.Fatalf("Ensure on a fresh namespace: %v, %v; want missing, nil", st, err)
	}
	if st, err := g.Read(spec, nil); err != nil || st != OK {
		t.Fatalf("Read after Ensure: %v, %v; want ok", st, err)
	}
	if st, err := g.Ensure(spec); err != nil || st != OK {
		t.Fatalf("second Ensure: %v, %v; want ok (nothing written)", st, err)
	}
	netnstest.WaitFor(t, 10*time.Second, "pod pings the node from 10.66.0.2", func() error {
		_, err := netnstest.Ping(t.Context(), pod.NetNS, "10.66.0.1", 1, "-I", "10.66.0.2")
		return err
	})
	netnstest.WaitFor(t, 10*time.Second, "pod pings the node from fd66::2", func() error {
		_, err := netnstest.Ping(t.Context(), pod.NetNS, "fd66::1", 1, "-I", "fd66::2")
		return err
	})
	if _, err := netnstest.Ping(t.Context(), pod.NetNS, "10.66.0.1", 1, "-I", "10.66.0.3"); err == nil {
		t.Errorf("ping from the foreign source 10.66.0.3 answered")
	}
	if _, err := netnstest.Ping(t.Context(), pod.NetNS, "fd66::1", 1, "-I", "fd66::3"); err == nil {
		t.Errorf("ping from the foreign source fd66::3 answered")
	}
	if err := send(pod, "udp", "10.66.0.2", "10.66.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := send(pod, "ip4:4", "10.66.0.2", "10.66.0.1"); err != nil {
		t.Fatal(err)
	}
	d, err := g.Drops(spec.Device)
	if err != nil {
		t.Fatal(err)
	}
	if d.Spoof4 == 0 || d.Spoof6 == 0 || d.VXLAN == 0 || d.IPIP == 0 {
		t.Errorf("drops %+v: want every counter above 0", d)
	}
}

// TestGuardDrift: a deleted chain, a rule deleted from it, a rule added
// to it and a chain of the name on another hook are each read as drift
// and put back by Ensure; another table is never touched.
func TestGuardDrift(t *testing.T) {
	node, _ := podPair(t, "calipg00002")
	g := guards(t, node)
	spec := Spec{Device: "calipg00002", Addrs: []netip.Addr{netip.MustParseAddr("10.66.0.2")}, VXLANPort: 8472}
	if _, err := g.Ensure(spec); err != nil {
		t.Fatal(err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(node.NetNS.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	other := c.AddTable(&nftables.Table{Name: "other", Family: nftables.TableFamilyNetdev})
	c.AddChain(&nftables.Chain{Name: "keep", Table: other})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	ch := &nftables.Chain{Name: spec.Device, Table: table()}
	tampers := []struct {
		name string
		do   func() error
		want State
	}{
		{"chain deleted", func() error { c.DelChain(ch); return c.Flush() }, Missing},
		{"rule deleted", func() error {
			rs, err := c.GetRules(table(), ch)
			if err != nil {
				return err
			}
			if err := c.DelRule(rs[len(rs)-1]); err != nil {
				return err
			}
			return c.Flush()
		}, WrongRules},
		{"rule added", func() error {
			c.AddRule(&nftables.Rule{Table: table(), Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
			return c.Flush()
		}, WrongRules},
		{"rule inserted first", func() error {
			c.InsertRule(&nftables.Rule{Table: table(), Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
			return c.Flush()
		}, WrongRules},
		{"other hook", func() error {
			c.DelChain(ch)
			policy := nftables.ChainPolicyAccept
			c.AddChain(&nftables.Chain{Name: spec.Device, Table: table(), Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookIngress,
				Priority: nftables.ChainPriorityRef(-100), Policy: &policy, Device: spec.Device})
			return c.Flush()
		}, WrongHook},
		{"regular chain", func() error {
			c.DelChain(ch)
			c.AddChain(&nftables.Chain{Name: spec.Device, Table: table()})
			return c.Flush()
		}, WrongHook},
	}
	for _, tc := range tampers {
		if err := tc.do(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if st, err := g.Read(spec, nil); err != nil || st != tc.want {
			t.Errorf("%s: Read %v, %v; want %v", tc.name, st, err, tc.want)
		}
		if st, err := g.Ensure(spec); err != nil || st != tc.want {
			t.Errorf("%s: Ensure %v, %v; want %v", tc.name, st, err, tc.want)
		}
		if st, err := g.Read(spec, nil); err != nil || st != OK {
			t.Errorf("%s: after Ensure %v, %v; want ok", tc.name, st, err)
		}
	}
	// Another spec for the same chain (an address more) is drift too.
	spec2 := spec
	spec2.Addrs = append(spec2.Addrs, netip.MustParseAddr("10.66.0.9"))
	if st, _ := g.Read(spec2, nil); st != WrongRules {
		t.Errorf("Read with another address: %v; want rules differ", st)
	}
	if err := g.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := g.Cleanup(); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
	if have, err := g.Chains(); err != nil || len(have) != 0 {
		t.Errorf("after Cleanup: chains %v, %v; want none", have, err)
	}
	if _, err := c.ListChain(other, "keep"); err != nil {
		t.Errorf("another table's chain after Cleanup: %v", err)
	}
}

// TestGuardDeviceDeleted: what the kernel does with a guard whose veth is
// deleted differs (6.1 releases the chain, newer kernels keep it
// detached); on either, Remove succeeds, Stale reports a kept chain, a
// veth made again under the name gets a correct guard from Ensure, and
// Remove leaves no chain.
func TestGuardDeviceDeleted(t *testing.T) {
	node, pod := podPair(t, "calipg00003")
	g := guards(t, node)
	spec := Spec{Device: "calipg00003", Addrs: []netip.Addr{netip.MustParseAddr("10.66.0.2")}}
	if _, err := g.Ensure(spec); err != nil {
		t.Fatal(err)
	}
	l, err := node.Handle.LinkByName(spec.Device)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Handle.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	have, err := g.Chains()
	if err != nil {
		t.Fatal(err)
	}
	_, kept := have[spec.Device]
	t.Logf("chain kept after its device was deleted: %v", kept)
	exists := func(name string) (bool, error) {
		_, err := node.Handle.LinkByName(name)
		if _, ok := err.(netlink.LinkNotFoundError); ok {
			return false, nil
		}
		return err == nil, err
	}
	stale, err := Stale(have, nil, exists)
	if err != nil {
		t.Fatal(err)
	}
	if kept != (len(stale) == 1) {
		t.Errorf("Stale %v with the chain kept %v", stale, kept)
	}
	if s, _ := Stale(have, map[string]bool{spec.Device: true}, exists); len(s) != 0 {
		t.Errorf("Stale lists a kept guard: %v", s)
	}
	// The name comes back (a new sandbox of the pod): Ensure makes the
	// guard right whatever the kernel kept.
	la := netlink.NewLinkAttrs()
	la.Name = spec.Device
	if err := node.Handle.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth1", PeerNamespace: netlink.NsFd(pod.NetNS.Fd())}); err != nil {
		t.Fatal(err)
	}
	if s, _ := Stale(mustChains(t, g), nil, exists); len(s) != 0 {
		t.Errorf("Stale lists the guard of an existing veth: %v", s)
	}
	spec.Addrs = []netip.Addr{netip.MustParseAddr("10.66.0.4")}
	if _, err := g.Ensure(spec); err != nil {
		t.Fatal(err)
	}
	if st, err := g.Read(spec, nil); err != nil || st != OK {
		t.Fatalf("Read after Ensure on the new veth: %v, %v", st, err)
	}
	if err := g.Remove(spec.Device); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(spec.Device); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, ok := mustChains(t, g)[spec.Device]; ok {
		t.Errorf("chain %s left after Remove", spec.Device)
	}
}

// mustChains is g.Chains or a fatal error.
func mustChains(t *testing.T, g *Guards) map[string]*nftables.Chain {
	t.Helper()
	have, err := g.Chains()
	if err != nil {
		t.Fatal(fmt.Errorf("chains: %w", err))
	}
	return have
}
