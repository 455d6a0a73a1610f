package main

import (
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/podguard"
)

// guardsIn opens the pod guards of n's namespace.
func (n *node) guardsIn() *podguard.Guards {
	n.t.Helper()
	g, err := podguard.New(nftables.WithNetNSFd(int(n.ns.Fd())))
	if err != nil {
		n.t.Fatal(err)
	}
	return g
}

// guardChains lists the chains of routelet's netdev table in n.
func (n *node) guardChains() []string {
	n.t.Helper()
	have, err := n.guardsIn().Chains()
	if err != nil {
		n.t.Fatalf("pod guard chains: %v", err)
	}
	var out []string
	for name := range have {
		out = append(out, name)
	}
	return out
}

// TestPodGuard: ADD puts the source check on the pod's host veth (read
// back as written, for the result's addresses), CHECK names a guard
// deleted or rewritten, a pod sending from a second pod's address is
// dropped and counted at its own veth, and DEL leaves no chain.
func TestPodGuard(t *testing.T) {
	n := newNode(t)
	podA, podB := newNetNS(t), newNetNS(t)
	conf := n.conf("1.0.0", nil)
	resA := n.run(call{cmd: "ADD", containerID: "guard-a", netns: podA.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD a")
	resB := n.run(call{cmd: "ADD", containerID: "guard-b", netns: podB.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD b")
	hostA, a, b := hostIfOf(t, resA.stdout), addrsOf(t, resA.stdout), addrsOf(t, resB.stdout)
	g := n.guardsIn()
	spec := podguard.Spec{Device: hostA, Addrs: a}
	if st, err := g.Read(spec, nil); err != nil || st != podguard.OK {
		t.Fatalf("guard of %s after ADD: %v, %v; want ok", hostA, st, err)
	}
	check := call{cmd: "CHECK", containerID: "guard-a", netns: podA.Path(), ifName: "eth0", conf: withPrev(t, conf, resA.stdout)}
	n.run(check).mustOK(t, "CHECK")

	// Pod a takes pod b's IPv4 address as a source: dropped at a's veth.
	before, err := g.Drops(hostA)
	if err != nil {
		t.Fatal(err)
	}
	var bv4 netip.Addr
	for _, x := range b {
		if x.Is4() {
			bv4 = x
		}
	}
	err = podA.Do(func(ns.NetNS) error {
		if out, err := exec.Command("ip", "addr", "add", bv4.String()+"/32", "dev", "eth0").CombinedOutput(); err != nil {
			t.Fatalf("ip addr add: %v: %s", err, out)
		}
		// Any destination: the packet only has to reach a's host veth.
		return exec.Command("ping", "-c", "2", "-W", "1", "-I", bv4.String(), "10.90.0.250").Run()
	})
	if err == nil {
		t.Errorf("pod a got an answer from b's own address %s", bv4)
	}
	if after, err := g.Drops(hostA); err != nil || after.Spoof4 < before.Spoof4+2 {
		t.Errorf("IPv4 source drops on %s: %d before, %d after (%v); want 2 more", hostA, before.Spoof4, after.Spoof4, err)
	}

	if err := g.Remove(hostA); err != nil {
		t.Fatal(err)
	}
	o := n.run(check)
	if o.exitCode == 0 || !strings.Contains(o.cniErr.Msg, "pod source check on "+hostA+": missing") {
		t.Errorf("CHECK without the guard: exit %d, %v; want it named missing", o.exitCode, o.cniErr)
	}
	if err := g.Repair(podguard.Spec{Device: hostA, Addrs: a[:1]}, podguard.Missing); err != nil {
		t.Fatal(err)
	}
	o = n.run(check)
	if o.exitCode == 0 || !strings.Contains(o.cniErr.Msg, "pod source check on "+hostA+": rules differ") {
		t.Errorf("CHECK with a guard for one address: exit %d, %v; want rules differ", o.exitCode, o.cniErr)
	}

	for id, pod := range map[string]ns.NetNS{"guard-a": podA, "guard-b": podB} {
		n.run(call{cmd: "DEL", containerID: id, netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "DEL "+id)
	}
	n.assertEmpty("after DEL")
	n.run(call{cmd: "DEL", containerID: "guard-a", netns: podA.Path(), ifName: "eth0", conf: conf}).mustOK(t, "second DEL")
}

// TestPodGuardFailsClosed: an ADD whose guard cannot be written (routelet's
// table is held by another process with the owner flag, so the kernel
// refuses every change to it) fails naming the check and leaves nothing:
// no veth, address, record or route.
func TestPodGuardFailsClosed(t *testing.T) {
	netnstest.SkipUnlessInstalled(t, "nftables", "nft")
	n := newNode(t)
	pod := newNetNS(t)
	var stdin io.WriteCloser
	var holder *exec.Cmd
	err := n.ns.Do(func(ns.NetNS) error {
		holder = exec.Command("nft", "-i")
		var err error
		if stdin, err = holder.StdinPipe(); err != nil {
			return err
		}
		if err := holder.Start(); err != nil {
			return err
		}
		_, err = io.WriteString(stdin, "add table netdev "+podguard.TableName+" { flags owner; }\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); holder.Wait() })
	netnstest.Eventually(t, 10*time.Second, "the owner table exists", func() bool {
		return exec.Command("ip", "netns", "exec", netnstest.Name(n.ns), "nft", "list", "table", "netdev", podguard.TableName).Run() == nil
	})
	o := n.run(call{cmd: "ADD", containerID: "closed", netns: pod.Path(), ifName: "eth0", conf: n.conf("1.0.0", nil)})
	if o.exitCode == 0 {
		t.Fatalf("ADD succeeded without its guard: %s", o.stdout)
	}
	mustContain(t, "error", o.cniErr.Msg, "pod source check")
	n.assertEmpty("after the failed ADD")
}
