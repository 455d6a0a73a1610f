package netnstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const testPrefix = "routelet-nstest-"

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestNewRemove: a namespace is new (not the caller's), named, has lo up,
// and is gone after Remove; a second Remove is success.
func TestNewRemove(t *testing.T) {
	SkipUnlessRoot(t, "creates network namespaces")
	n, err := New(OwnedPrefix(testPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(n) })
	if inode(t, n.Path()) == inode(t, "/proc/self/ns/net") {
		t.Fatal("new namespace is the caller's own")
	}
	if filepath.Dir(n.Path()) != RunDir || Name(n)[:len(testPrefix)] != testPrefix {
		t.Errorf("namespace path %s, want %s/%s…", n.Path(), RunDir, testPrefix)
	}
	err = n.Do(func(ns.NetNS) error {
		lo, err := net.InterfaceByName("lo")
		if err == nil && lo.Flags&net.FlagUp == 0 {
			t.Error("loopback is down")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewNamed(Name(n)); err == nil {
		t.Errorf("NewNamed(%s) succeeded for a taken name", Name(n))
	}
	path := n.Path()
	if err := Remove(n); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after Remove: %v", path, err)
	}
	if err := Remove(n); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestRemoveStale removes namespaces of dead processes and nothing else.
func TestRemoveStale(t *testing.T) {
	SkipUnlessRoot(t, "creates network namespaces")
	// A PID that is certainly gone: a child that has exited and been reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead, err := NewNamed(fmt.Sprintf("%s%d-x", testPrefix, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := New(OwnedPrefix(testPrefix))
	if err != nil {
		t.Fatal(err)
	}
	odd, err := New(testPrefix + "nopid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(dead); Remove(mine); Remove(odd) })
	removed, err := RemoveStale(testPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != Name(dead) {
		t.Errorf("removed %v, want [%s]", removed, Name(dead))
	}
	for _, n := range []ns.NetNS{mine, odd} {
		if _, err := os.Stat(n.Path()); err != nil {
			t.Errorf("%s was removed: %v", Name(n), err)
		}
	}
	if _, err := RemoveStale(""); err == nil {
		t.Error("RemoveStale(\"\") succeeded; it must refuse an empty prefix")
	}
}

// TestNodeRunsPluginInNodeNamespace attaches two pods with the reference ptp
// plugin through a Node and pings between them: the plugin ran in the node
// namespace (its host veths are there, not in the caller's) and Exec/Ping run
// inside a pod namespace.
func TestNodeRunsPluginInNodeNamespace(t *testing.T) {
	SkipUnlessRoot(t, "creates network namespaces")
	ctx := context.Background()
	bin := t.TempDir()
	if err := BuildReference(ctx, bin, PTPPackage, HostLocalPackage); err != nil {
		t.Fatal(err)
	}
	node, err := NewNode(OwnedPrefix(testPrefix)+"node", []string{bin}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	if got, err := Sysctl(node.NS, "net/ipv4/ip_forward", ""); err != nil || got != "1" {
		t.Errorf("node ip_forward = %q (%v), want 1", got, err)
	}
	list, err := PTPConf{Name: "t", CNIVersion: "1.0.0", DataDir: t.TempDir(), MTU: 1400, Subnet: "10.99.0.0/24"}.ConfList()
	if err != nil {
		t.Fatal(err)
	}
	var pods []ns.NetNS
	var ips []string
	for _, id := range []string{"a", "b"} {
		p, err := New(OwnedPrefix(testPrefix) + "pod-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Remove(p) })
		pods = append(pods, p)
		rt := &libcni.RuntimeConf{ContainerID: id, NetNS: p.Path(), IfName: "eth0"}
		raw, err := node.Add(ctx, list, rt)
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		res, err := types100.NewResultFromResult(raw)
		if err != nil || len(res.IPs) != 1 {
			t.Fatalf("ADD %s result %v: %v", id, raw, err)
		}
		ips = append(ips, res.IPs[0].Address.IP.String())
		for _, ifc := range res.Interfaces {
			if ifc.Sandbox == "" {
				if _, err := os.Stat("/sys/class/net/" + ifc.Name); err == nil {
					t.Errorf("host veth %s is in the caller's namespace, not the node's", ifc.Name)
				}
			}
		}
		t.Cleanup(func() { node.Del(ctx, list, rt) })
	}
	if out, err := Ping(ctx, pods[0], ips[1], 1); err != nil {
		t.Errorf("ping a → b: %v\n%s", err, out)
	}
	if _, err := Exec(ctx, pods[0], "false"); err == nil {
		t.Error("Exec of a failing command returned no error")
	}
}

// TestNewT: the namespace is named for this process, has lo up, its handle
// and Do work inside it and not in the caller's namespace, and it is gone
// once the (sub)test that made it has ended.
func TestNewT(t *testing.T) {
	SkipUnlessRoot(t, "creates network namespaces")
	var path string
	t.Run("use", func(t *testing.T) {
		n := NewT(t)
		path = n.NetNS.Path()
		if n.Name != Name(n.NetNS) || !strings.HasPrefix(n.Name, OwnedPrefix(TestPrefix)) {
			t.Errorf("name %q for %s, want %s…", n.Name, path, OwnedPrefix(TestPrefix))
		}
		lo, err := n.Handle.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if lo.Attrs().Flags&net.FlagUp == 0 {
			t.Error("loopback is down")
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nstest0"}, PeerName: "nstest1"}
		if err := n.Handle.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat("/sys/class/net/nstest0"); err == nil {
			t.Error("link added through Handle is in the caller's namespace")
		}
		err = n.Do(func() error {
			_, err := net.InterfaceByName("nstest0")
			return err
		})
		if err != nil {
			t.Errorf("Do does not see the link added through Handle: %v", err)
		}
	})
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after the test ended: %v", path, err)
	}
}
