package cleanup

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/wireguard"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startDevice starts a userspace WireGuard device name (this test binary
// as its datapath) in n, its pid file and log in <stateDir>/wireguard; it
// returns the datapath's pid. The datapath is killed when the test ends
// if it still runs.
func startDevice(t *testing.T, n *netnstest.NS, stateDir, name string) int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(stateDir, wireguard.KeyDir)
	var dev *wireguard.Device
	if err := n.NetNS.Do(func(ns.NetNS) error {
		dev, err = wireguard.New(wireguard.Config{Name: name, MTU: 1420, Addrs: []netip.Prefix{netip.MustParsePrefix("10.244.1.1/32")},
			Impl: wireguard.ImplUserspace, RunDir: runDir, Datapath: []string{self, defaults.WireGuardDatapathCommand, "--device", name, "--mtu", "1420"},
			Logger: quiet}, key)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Apply(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	dev.Close() // the device and its datapath stay, as when routeletd stops
	b, err := os.ReadFile(filepath.Join(runDir, name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !wireguard.IsDatapath(pid, name) {
		t.Fatalf("pid file %q: not a running datapath of %s", b, name)
	}
	t.Cleanup(func() {
		if wireguard.IsDatapath(pid, name) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			netnstest.Eventually(t, 5*time.Second, "the datapath to exit", func() bool { return !wireguard.IsDatapath(pid, name) })
			_ = os.Remove(filepath.Join(wireguard.SocketDir, name+".sock"))
		}
	})
	return pid
}

// TestCleanupRemovesWireGuard: cleanup deletes the userspace WireGuard
// device and its datapath stops, the socket with it; then the WireGuard
// directory's files routelet wrote (key, pid file, log) go and the
// directory with them.
func TestCleanupRemovesWireGuard(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates a network namespace, a TUN device and a datapath process")
	n := netnstest.NewT(t)
	name := fmt.Sprintf("wgcl%d", os.Getpid()%100000)
	stateDir := filepath.Join(t.TempDir(), "state")
	write(t, stateDir, map[string]string{"routeletd.lock": ""})
	if _, _, err := wireguard.LoadOrCreateKey(stateDir); err != nil {
		t.Fatal(err)
	}
	pid := startDevice(t, n, stateDir, name)

	var rep Report
	if err := n.NetNS.Do(func(ns.NetNS) error { return removeWireGuard(stateDir, name, &rep, quiet) }); err != nil {
		t.Fatalf("removeWireGuard: %v", err)
	}
	if !slices.Contains(rep.Links, name) {
		t.Errorf("links removed %q, want %s", rep.Links, name)
	}
	if _, err := n.Handle.LinkByName(name); err == nil {
		t.Errorf("link %s still there", name)
	}
	if wireguard.IsDatapath(pid, name) {
		t.Errorf("the datapath (pid %d) still runs", pid)
	}
	if _, err := os.Lstat(filepath.Join(wireguard.SocketDir, name+".sock")); err == nil {
		t.Errorf("the datapath's socket is still there")
	}

	p, err := scanStateDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	left, err := p.removeState(&rep)
	p.close()
	if err != nil || len(left) != 0 {
		t.Fatalf("left %q, %v", left, err)
	}
	if _, err := os.Lstat(filepath.Join(stateDir, wireguard.KeyDir)); err == nil {
		t.Errorf("%s/%s still there", stateDir, wireguard.KeyDir)
	}
}

// TestCleanupLeavesOthersWireGuard: a pid file naming a process that is
// not the datapath of the device (a sleep) does not get it signalled; a
// link of another kind under the device's name stays.
func TestCleanupLeavesOthersWireGuard(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates a network namespace and links")
	n := netnstest.NewT(t)
	name := fmt.Sprintf("wgcx%d", os.Getpid()%100000)
	stateDir := filepath.Join(t.TempDir(), "state")
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Skipf("sleep: %v", err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	write(t, stateDir, map[string]string{"routeletd.lock": "", "wireguard/" + name + ".pid": strconv.Itoa(sleep.Process.Pid) + "\n"})
	if _, err := netnstest.AddVeth(n.Handle, name, "other"); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := n.NetNS.Do(func(ns.NetNS) error { return removeWireGuard(stateDir, name, &rep, quiet) }); err != nil {
		t.Fatalf("removeWireGuard: %v", err)
	}
	if len(rep.Links) != 0 {
		t.Errorf("links removed %q, want none", rep.Links)
	}
	if _, err := n.Handle.LinkByName(name); err != nil {
		t.Errorf("the veth %s was removed: %v", name, err)
	}
	// Killed, it would be a zombie (this test's child, not reaped).
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sleep.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) == 0 || f[0] == "Z" || f[0] == "X" {
		t.Errorf("the process the pid file names was signalled: /proc/%d/stat %q", sleep.Process.Pid, stat)
	}
}
