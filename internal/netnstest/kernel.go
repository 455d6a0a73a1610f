package netnstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/nlutil"
)

// RequireIPIPEnv names the environment variable that turns SkipUnlessIPIP's
// skip into a failure: set where the kernel is known to have IPIP (the VM
// lane on Debian's kernel), so an IPIP test can never pass by skipping.
const RequireIPIPEnv = "ROUTELET_REQUIRE_IPIP"

// FallbackDevices are the devices the kernel creates by itself in every new
// network namespace once a tunnel module is loaded (ipip → tunl0, ip_gre →
// gre0, gretap0, erspan0, sit → sit0, ip6_tunnel → ip6tnl0, ip6_gre →
// ip6gre0, ip_vti → ip_vti0, ip6_vti → ip6_vti0), unless the sysctl
// net.core.fb_tunnels_only_for_init_net says otherwise. A test that checks
// what is left in a namespace must not count them: they come and go with
// the kernel's modules, not with the code under test.
var FallbackDevices = []string{"tunl0", "gre0", "gretap0", "erspan0", "sit0", "ip6tnl0", "ip6gre0", "ip_vti0", "ip6_vti0"}

// IsFallbackDevice reports whether name is one of FallbackDevices.
func IsFallbackDevice(name string) bool { return slices.Contains(FallbackDevices, name) }

// IPIPLoaded reports whether the kernel's IPIP support is active now: the
// fallback tunl0 exists in a fresh namespace, or the ipip module (or the
// built-in code, which has parameters) shows in /sys/module.
func IPIPLoaded() (bool, error) {
	if _, err := os.Stat("/sys/module/ipip"); err == nil {
		return true, nil
	}
	has, err := freshNamespaceHas("tunl0")
	if err != nil {
		return false, err
	}
	return has, nil
}

// IPIPSupported reports nil when the kernel can make ipip links, without
// loading anything when it can tell: IPIP already active (IPIPLoaded), or
// the ipip module there for `modprobe` to load on first use. Otherwise it
// creates a probe ipip link in a scratch namespace. The probe has a local
// address, so it never collides with the fallback tunl0 (a parameterless
// ipip link has the fallback's parameters and gets EEXIST); EEXIST would
// still mean the kernel knows ipip.
func IPIPSupported() error {
	if loaded, err := IPIPLoaded(); err != nil || loaded {
		return err
	}
	if err := exec.Command("modprobe", "-n", "-q", "ipip").Run(); err == nil {
		return nil
	}
	n, err := New(OwnedPrefix(TestPrefix) + "ipip-probe-")
	if err != nil {
		return fmt.Errorf("ipip probe: %w", err)
	}
	defer Remove(n)
	return n.Do(func(ns.NetNS) error {
		probe := &netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: "rlipipprobe"}, Local: net.IPv4(192, 0, 2, 1)}
		err := netlink.LinkAdd(probe)
		if err == nil || errors.Is(err, unix.EEXIST) {
			return nil
		}
		return fmt.Errorf("create an ipip link: %w", err)
	})
}

// SkipUnlessIPIP skips t when the kernel cannot make ipip links (see
// IPIPSupported), and fails it instead when RequireIPIPEnv is set.
func SkipUnlessIPIP(t testing.TB) {
	t.Helper()
	err := IPIPSupported()
	if err == nil {
		return
	}
	if os.Getenv(RequireIPIPEnv) != "" {
		t.Fatalf("%s is set but the kernel cannot do IPIP: %v", RequireIPIPEnv, err)
	}
	t.Skipf("kernel cannot do IPIP (no CONFIG_NET_IPIP / ipip module): %v", err)
}

// freshNamespaceHas reports whether a new network namespace starts with a
// link named name.
func freshNamespaceHas(name string) (bool, error) {
	n, err := New(OwnedPrefix(TestPrefix) + "probe-")
	if err != nil {
		return false, fmt.Errorf("probe namespace: %w", err)
	}
	defer Remove(n)
	var has bool
	err = n.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName(name)
		switch {
		case err == nil:
			has = true
		case nlutil.LinkNotFound(err):
		default:
			return fmt.Errorf("look up %s in a fresh namespace: %w", name, err)
		}
		return nil
	})
	return has, err
}

// MadeLinks lists the names of the links in n other than lo and the
// kernel's FallbackDevices: the links something made there. A namespace
// fresh from New has none on any kernel.
func MadeLinks(n ns.NetNS) ([]string, error) {
	var names []string
	err := n.Do(func(ns.NetNS) error {
		links, err := nlutil.Retry(netlink.LinkList)
		if err != nil {
			return err
		}
		for _, l := range links {
			if name := l.Attrs().Name; name != "lo" && !IsFallbackDevice(name) {
				names = append(names, name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("links in netns %s: %w", Name(n), err)
	}
	return names, nil
}

// RequireKernelWireGuardEnv names the environment variable that makes
// WireGuard tests insist on the kernel's WireGuard: set where the kernel
// is known to have it (the VM lane on Debian's kernel), so a test meant to
// run on it cannot pass on the userspace fallback instead.
const RequireKernelWireGuardEnv = "ROUTELET_REQUIRE_KERNEL_WIREGUARD"

// KernelWireGuard reports nil when the kernel can make wireguard links
// (built in, loaded, or loadable on first use: the probe's link loads it,
// as routeletd's would), else why not. The probe runs in a namespace of
// its own.
func KernelWireGuard() error {
	n, err := New(OwnedPrefix(TestPrefix) + "wg-probe-")
	if err != nil {
		return fmt.Errorf("wireguard probe: %w", err)
	}
	defer Remove(n)
	return n.Do(func(ns.NetNS) error {
		probe := &netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: "rlwgprobe"}}
		err := netlink.LinkAdd(probe)
		if err == nil || errors.Is(err, unix.EEXIST) {
			return nil
		}
		return fmt.Errorf("create a wireguard link: %w", err)
	})
}
