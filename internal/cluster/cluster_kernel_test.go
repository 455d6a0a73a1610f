package cluster

import (
	"context"
	"fmt"
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

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/defaults"
)

// fakeDatapathEnv makes the test binary, started as `routeletd
// wireguard-datapath`, just wait to be killed: a process DatapathPIDs must
// find and StopDatapaths end.
const fakeDatapathEnv = "ROUTELET_CLUSTER_TEST_FAKE_DATAPATH"

func TestMain(m *testing.M) {
	if os.Getenv(fakeDatapathEnv) == "1" {
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPrivateWireGuardRun: with PrivateWireGuardRun the PID the harness
// holds is routeletd's own, in a mount namespace other than ours that
// shows the node's directory on /var/run/wireguard; a killed daemon is
// started again with the same directory and reported ready by its own
// daemon.json; Close ends the node's datapath processes and only those.
func TestPrivateWireGuardRun(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "creates network namespaces and runs routeletd in them")
	bin := netnstest.Bins(t, netnstest.Routelet, netnstest.Routeletd)
	c, err := New(Options{Prefix: netnstest.OwnedPrefix("routelet-cltest-"), PluginDir: bin, Daemon: filepath.Join(bin, "routeletd"),
		WorkDir: t.TempDir(), PrivateWireGuardRun: true,
		DaemonArgs: []string{"--encapsulation=none", "--health-addr="},
		Nodes: []NodeSpec{{Name: "a", Host4: "10.0.1.10/24", Gw4: "10.0.1.1", Block4: "10.244.1.0/24",
			DaemonArgs: []string{"--log-level=debug"}}}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			c.Close()
		}
	})
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0]
	if n.WireGuardRunDir == "" {
		t.Fatal("node has no WireGuardRunDir with PrivateWireGuardRun")
	}
	if err := os.WriteFile(filepath.Join(n.WireGuardRunDir, "marker"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	runDir, err := filepath.EvalSymlinks(filepath.Dir(netnstest.WireGuardRunDir))
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) int {
		t.Helper()
		pid := n.DaemonPID()
		proc := filepath.Join("/proc", strconv.Itoa(pid))
		b, err := os.ReadFile(filepath.Join(proc, "cmdline"))
		if err != nil || filepath.Base(strings.Split(string(b), "\x00")[0]) != "routeletd" {
			t.Fatalf("%s: PID %d runs %q (%v), want routeletd itself", when, pid, b, err)
		}
		if !strings.Contains(string(b), "--log-level=debug") {
			t.Errorf("%s: routeletd %q lacks the node's own flag", when, b)
		}
		mine, _ := os.Readlink("/proc/self/ns/mnt")
		its, _ := os.Readlink(filepath.Join(proc, "ns", "mnt"))
		if mine == its {
			t.Errorf("%s: routeletd shares our mount namespace %s", when, mine)
		}
		if _, err := os.Stat(filepath.Join(proc, "root", runDir, filepath.Base(netnstest.WireGuardRunDir), "marker")); err != nil {
			t.Errorf("%s: routeletd does not see the node's directory on %s: %v", when, netnstest.WireGuardRunDir, err)
		}
		return pid
	}
	first := check("after Start")
	if _, err := os.Stat(filepath.Join(netnstest.WireGuardRunDir, "marker")); err == nil {
		t.Fatalf("the node's directory is mounted on %s in our own mount namespace", netnstest.WireGuardRunDir)
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAfterKill(ctx, n); err != nil {
		t.Fatal(err)
	}
	if second := check("after StartAfterKill"); second == first {
		t.Errorf("the restarted routeletd has the killed one's PID %d", first)
	}

	// Subcommands run through the same wrapper.
	if out, err := c.Routeletd(ctx, n, "version"); err != nil || !strings.Contains(out, "routeletd") {
		t.Errorf("routeletd version on a: %q, %v", out, err)
	}

	// Ping streams count what a user would: a pod answering itself loses
	// nothing; an address nobody has answers none.
	pod, err := c.AddPod(ctx, n, "p0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := pod.StartPingStream(pod.IPv4, 20*time.Millisecond, 1000)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if r, err := s.Stop(); err != nil || r.Sent < 10 || r.Received != r.Sent || len(r.Lost) > 0 {
		t.Errorf("stream to the pod itself: %s, %v; want at least 10 sent, all answered", r, err)
	}
	s, err = pod.StartPingStream(netip.MustParseAddr("192.0.2.1"), 20*time.Millisecond, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Wait(); err != nil || r.Sent != 3 || r.Received != 0 || !slices.Equal(r.Lost, []int{1, 2, 3}) {
		t.Errorf("stream to 192.0.2.1: %s, %v; want 3 sent, icmp_seq 1-3 lost", r, err)
	}

	// A process in the node's namespace that looks like a datapath, and
	// one that does not.
	fake := filepath.Join(t.TempDir(), "routeletd")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, fake); err != nil {
		t.Fatal(err)
	}
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command("ip", append([]string{"netns", "exec", netnstest.Name(n.CNI.NS)}, args...)...)
		cmd.Env = append(os.Environ(), fakeDatapathEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd
	}
	dp := start(fake, defaults.WireGuardDatapathCommand, "--device", "wireguard.cali", "--mtu", "1440")
	other := start(fake, "status")
	netnstest.WaitFor(t, 5*time.Second, "the datapath found", func() error {
		pids, err := n.DatapathPIDs()
		if err != nil || !slices.Equal(pids, []int{dp.Process.Pid}) {
			return fmt.Errorf("DatapathPIDs = %v, %v; want [%d]", pids, err, dp.Process.Pid)
		}
		return nil
	})
	if err := n.StopDatapaths(); err != nil {
		t.Errorf("StopDatapaths: %v", err)
	}
	if alive(dp.Process.Pid) {
		t.Errorf("datapath %d still running after StopDatapaths", dp.Process.Pid)
	}
	if !alive(other.Process.Pid) {
		t.Errorf("StopDatapaths killed %d, which is no datapath", other.Process.Pid)
	}
	// Close removes the namespaces, and with them whatever still runs in
	// them (netnstest.Remove).
	closed = true
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if alive(other.Process.Pid) {
		t.Errorf("process %d still running in node %s's namespace after Close", other.Process.Pid, n.Spec.Name)
	}
}
