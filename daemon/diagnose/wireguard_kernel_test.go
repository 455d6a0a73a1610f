package diagnose

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
	"github.com/routelet/routelet/pkg/wireguard"
)

// TestWireGuardStepsRealDevice: in a namespace of its own, a userspace
// WireGuard device (this test binary as its datapath) with a peer and
// the route to the peer's block as routeletd programs them; diagnose
// towards a pod of the peer reads the device through wgctrl and passes
// every WireGuard step but the handshake, which fails (nothing answers
// at the peer's endpoint). Taking the peer off the device fails
// wireguard-peer.
func TestWireGuardStepsRealDevice(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates a network namespace, a TUN device and a datapath process")
	n := netnstest.NewT(t)
	// wgctrl finds userspace devices in /var/run/wireguard whatever the
	// namespace: the name is this process's.
	name := fmt.Sprintf("wgdiag%d", os.Getpid()%100000)
	runDir := filepath.Join(t.TempDir(), "wireguard")
	t.Cleanup(func() { stopDatapath(t, runDir, name) }) // before the namespace goes

	if _, err := netnstest.AddVeth(n.Handle, "ul", "ul-peer"); err != nil {
		t.Fatal(err)
	}
	ul, err := n.Handle.LinkByName("ul")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Handle.LinkSetUp(ul); err != nil {
		t.Fatal(err)
	}
	if err := n.Handle.AddrAdd(ul, &netlink.Addr{IPNet: netlinkNet("192.0.2.1/24")}); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	peerKey, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	block := netip.MustParsePrefix("10.100.1.0/24")
	var dev *wireguard.Device
	if err := n.NetNS.Do(func(ns.NetNS) error {
		dev, err = wireguard.New(wireguard.Config{Name: name, MTU: 1430, Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.1.1/32")},
			Impl: wireguard.ImplUserspace, RunDir: runDir, Datapath: []string{self, defaults.WireGuardDatapathCommand, "--device", name, "--mtu", "1430"},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, key)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	withPeer := []wireguard.Peer{{PublicKey: peerKey.PublicKey(), Endpoint: netip.MustParseAddrPort("192.0.2.2:51820"), AllowedIPs: []netip.Prefix{block}}}
	dev.SetPeers(withPeer)
	if err := dev.Apply(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	link, err := n.Handle.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Handle.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: netlinkNet(block.String()), Scope: netlink.SCOPE_LINK, Protocol: routes.DefaultProtocol}); err != nil {
		t.Fatal(err)
	}

	cfg := Config{NodeName: "a", StateDir: "/run/routelet", IfacePrefix: "cali", RouteProtocol: routes.DefaultProtocol, Now: time.Now(),
		Encrypted: true, WireGuardDevice: name, WireGuardPort: defaults.WireGuardPort}
	st := &fakeState{running: true, wl: map[string]*state.Workload{},
		status: &state.DaemonStatus{Ready: true, PodMTU: 1430, Blocks: []string{"10.244.1.0/24"}, RouteProtocol: routes.DefaultProtocol},
		nodes: []peers.Record{
			{Name: "a", HostIPv4: "192.0.2.1", Blocks: []string{"10.244.1.0/24"}, WireGuardPublicKey: key.PublicKey().String()},
			{Name: "b", HostIPv4: "192.0.2.2", Blocks: []string{block.String()}, WireGuardPublicKey: peerKey.PublicKey().String()},
		}}
	diagnose := func() map[string]Step {
		t.Helper()
		var rep *Report
		if err := n.NetNS.Do(func(ns.NetNS) error {
			k, closeK, err := NewKernel(KernelOptions{RouteProtocol: routes.DefaultProtocol})
			if err != nil {
				return err
			}
			defer closeK()
			rep, err = Run(cfg, st, k, "a", "10.100.1.5", Options{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got := map[string]Step{}
		for _, s := range rep.Steps {
			got[s.ID] = s
		}
		return got
	}
	steps := diagnose()
	for _, id := range []string{StepWGDevice, StepWGKey, StepWGPeer, StepWGEndpoint, StepWGAllowedIPs, StepWGRoute} {
		if s, ok := steps[id]; !ok || s.Status != Pass {
			t.Errorf("step %s: %+v, want it passed", id, s)
		}
	}
	if s := steps[StepWGDevice]; !strings.Contains(s.Fact, "tun (userspace), up, mtu 1430, port 51820, 1 peers") {
		t.Errorf("wireguard-device reads %q", s.Fact)
	}
	if s := steps[StepWGHandshake]; s.Status != Fail || !strings.Contains(s.Fact, "no handshake with node b yet") {
		t.Errorf("wireguard-handshake: %+v, want no handshake yet", s)
	}

	dev.SetPeers(nil)
	if err := dev.Apply(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	steps = diagnose()
	if s := steps[StepWGPeer]; s.Status != Fail || !strings.Contains(s.Problem, "the device has no peer for node b") {
		t.Errorf("wireguard-peer without the peer on the device: %+v", s)
	}
}

// netlinkNet parses a CIDR for netlink.
func netlinkNet(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// stopDatapath ends the datapath this test started (its pid file's, when
// its command line is the datapath's for name) and waits for it.
func stopDatapath(t *testing.T, runDir, name string) {
	b, err := os.ReadFile(filepath.Join(runDir, name+".pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !wireguard.IsDatapath(pid, name) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	netnstest.Eventually(t, 5*time.Second, "the datapath to exit", func() bool { return !wireguard.IsDatapath(pid, name) })
	_ = os.Remove(filepath.Join(wireguard.SocketDir, name+".sock"))
}
