package main

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/podnet"
)

// metricValue returns a counter or gauge line's value (e.g.
// `routelet_repairs_total{object="link"}`), 0 when absent.
func (tn *testNode) metricValue(name string) float64 {
	v, err := strconv.ParseFloat(tn.metric(name), 64)
	if err != nil {
		return 0
	}
	return v
}

// ipIn runs "ip args..." in the node namespace.
func (tn *testNode) ipIn(args ...string) {
	tn.t.Helper()
	if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", args...); err != nil {
		tn.t.Fatalf("ip %v: %v %s", args, err, out)
	}
}

// waitRepair waits until fixed holds and the repair counter of object went
// past before, and logs how long the repair took.
func (tn *testNode) waitRepair(t *testing.T, object, what string, before float64, fixed func() bool) {
	t.Helper()
	start := time.Now()
	netnstest.Eventually(t, 10*time.Second, what+" repaired", fixed)
	took := time.Since(start)
	name := `routelet_repairs_total{object="` + object + `"}`
	netnstest.Eventually(t, 10*time.Second, name+" counting the repair", func() bool { return tn.metricValue(name) > before })
	t.Logf("%s repaired after %s", what, took.Round(time.Millisecond))
}

// TestDaemonKeepsPodSettings: with a pod attached by the real plugin, every
// setting ADD made on the node side and every overlay device setting below
// is flipped as an operator or a stray tool would, and routeletd puts it
// back and counts it in routelet_repairs_total: each per-veth sysctl of the
// plugin's table and node forwarding (sysctl), the veth's admin state
// (link), the pod's permanent IPv6 neighbour (neigh), and vxlan.calico
// enslaved to a bridge (master).
func TestDaemonKeepsPodSettings(t *testing.T) {
	tn := newTestNode(t, true)
	var err error
	tn.conf, err = netnstest.RouteletConf{Name: "routelet", CNIVersion: "1.1.0", StateDir: tn.stateDir,
		Blocks: []string{tn.podCIDR, "fd00:7::/120"}}.ConfList()
	if err != nil {
		t.Fatal(err)
	}
	tn.startDaemon("--pod-cidr=fd00:7::/120", "--encapsulation=vxlan")
	tn.waitReady()
	p := tn.addPod("keep1")
	netnstest.Eventually(t, 5*time.Second, "daemon serving the pod", func() bool { return tn.metric("routelet_workloads") == "1" })
	w, err := tn.store.GetWorkload("keep1", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	var v6 netip.Addr
	for _, s := range w.IPs {
		if pf := netip.MustParsePrefix(s); pf.Addr().Is6() {
			v6 = pf.Addr()
		}
	}
	if !v6.IsValid() {
		t.Fatalf("pod got no IPv6 address: %v", w.IPs)
	}
	mac, err := net.ParseMAC(w.ContainerMAC)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("sysctls", func(t *testing.T) {
		settings := append(podnet.HostSysctls(p.iface, true), podnet.NodeSysctls(true)...)
		for _, s := range settings {
			read := func() string {
				v, err := netnstest.Sysctl(tn.node.NS, s.Key, "")
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			if got := read(); got != s.Value {
				t.Fatalf("%s = %s after ADD, want %s", s.Key, got, s.Value)
			}
			flip := "0"
			switch {
			case strings.HasSuffix(s.Key, "/proxy_delay"):
				flip = "80" // the kernel's default; in jiffies, so "1" would read back as 0
			case s.Value == "0":
				flip = "1"
			}
			before := tn.metricValue(`routelet_repairs_total{object="sysctl"}`)
			if _, err := netnstest.Sysctl(tn.node.NS, s.Key, flip); err != nil {
				t.Fatal(err)
			}
			tn.waitRepair(t, "sysctl", s.Key, before, func() bool { return read() == s.Value })
		}
	})

	t.Run("veth admin state", func(t *testing.T) {
		before := tn.metricValue(`routelet_repairs_total{object="link"}`)
		tn.ipIn("link", "set", p.iface, "down")
		tn.waitRepair(t, "link", p.iface+" up", before, func() bool {
			l, err := tn.nl.LinkByName(p.iface)
			return err == nil && l.Attrs().Flags&net.FlagUp != 0
		})
		netnstest.Eventually(t, 10*time.Second, "pod route back", func() bool { return tn.hasRoute(v4, p.ip+" "+p.iface+" proto 80") })
	})

	t.Run("IPv6 neighbour", func(t *testing.T) {
		permanent := func() bool {
			l, err := tn.nl.LinkByName(p.iface)
			if err != nil {
				return false
			}
			ns, _ := tn.nl.NeighList(l.Attrs().Index, netlink.FAMILY_V6)
			for _, n := range ns {
				if a, _ := netip.AddrFromSlice(n.IP); a == v6 && n.State&netlink.NUD_PERMANENT != 0 && n.HardwareAddr.String() == mac.String() {
					return true
				}
			}
			return false
		}
		netnstest.Eventually(t, 10*time.Second, "permanent neighbour "+v6.String(), permanent)
		before := tn.metricValue(`routelet_repairs_total{object="neigh"}`)
		tn.ipIn("-6", "neigh", "del", v6.String(), "dev", p.iface)
		tn.waitRepair(t, "neigh", "permanent neighbour "+v6.String(), before, permanent)
	})

	t.Run("vxlan device out of a bridge", func(t *testing.T) {
		tn.ipIn("link", "add", "br0", "type", "bridge")
		netnstest.Eventually(t, 10*time.Second, "vxlan.calico", func() bool { _, err := tn.nl.LinkByName("vxlan.calico"); return err == nil })
		before := tn.metricValue(`routelet_repairs_total{object="master"}`)
		tn.ipIn("link", "set", "vxlan.calico", "master", "br0")
		tn.waitRepair(t, "master", "vxlan.calico nomaster", before, func() bool {
			l, err := tn.nl.LinkByName("vxlan.calico")
			return err == nil && l.Attrs().MasterIndex == 0
		})
	})

	t.Run("only prefixed veths", func(t *testing.T) {
		// A veth of someone else, named by a record, is never touched.
		tn.addVeth("other0", "other1")
		tn.addRecord("stranger", "other0", "/var/run/netns/does-not-matter", "10.244.7.201/32")
		if _, err := netnstest.Sysctl(tn.node.NS, "net/ipv4/conf/other0/proxy_arp", "0"); err != nil {
			t.Fatal(err)
		}
		tn.ipIn("link", "set", "other0", "down")
		netnstest.Eventually(t, 5*time.Second, "daemon reading the record", func() bool { return tn.metric("routelet_workloads") == "2" })
		// Wait for several keep periods (200ms) through something the
		// loop does on each of them: a repair of the pod's veth.
		before := tn.metricValue(`routelet_repairs_total{object="sysctl"}`)
		if _, err := netnstest.Sysctl(tn.node.NS, "net/ipv4/conf/"+p.iface+"/proxy_arp", "0"); err != nil {
			t.Fatal(err)
		}
		netnstest.Eventually(t, 10*time.Second, "a later keep pass", func() bool {
			return tn.metricValue(`routelet_repairs_total{object="sysctl"}`) > before
		})
		if v, _ := netnstest.Sysctl(tn.node.NS, "net/ipv4/conf/other0/proxy_arp", ""); v != "0" {
			t.Errorf("proxy_arp of other0 changed to %s", v)
		}
		if l, err := tn.nl.LinkByName("other0"); err != nil || l.Attrs().Flags&net.FlagUp != 0 {
			t.Errorf("other0 was set up (err %v)", err)
		}
	})
}

// TestDaemonLeavesForeignRoutes: the node's default and connected routes,
// and static routes an operator made for the local block and for a pod's
// /32, are never replaced by the block's blackhole or the pod route; the
// conflicts are counted, and once the operator removes a static route
// routeletd programs its own.
func TestDaemonLeavesForeignRoutes(t *testing.T) {
	tn := newTestNode(t, true)
	tn.ipIn("route", "add", "10.244.7.0/24", "via", "192.0.2.1", "proto", "static")
	tn.ipIn("route", "add", "10.244.7.50/32", "via", "192.0.2.1", "proto", "static")
	tn.addVeth("calistatic0", "pstatic0")
	tn.addRecord("st", "calistatic0", "/var/run/netns/does-not-matter", "10.244.7.50/32")
	tn.startDaemon()
	tn.waitReady()
	netnstest.Eventually(t, 5*time.Second, "daemon serving the record", func() bool { return tn.metric("routelet_workloads") == "1" })

	admin := []string{"10.244.7.0/24 up0 proto 4", "10.244.7.50/32 up0 proto 4", "192.0.2.0/24 up0 proto 2"}
	check := func(when string) {
		t.Helper()
		rs := tn.routes(v4)
		for _, r := range admin {
			if !rs[r] {
				t.Fatalf("%s: %q replaced; routes: %v", when, r, rs)
			}
		}
		if rs["10.244.7.0/24 blackhole proto 80"] || rs["10.244.7.50/32 calistatic0 proto 80"] {
			t.Fatalf("%s: routelet route under an operator's key: %v", when, rs)
		}
		def, err := tn.nl.RouteGet(net.ParseIP("198.51.100.1"))
		if err != nil || len(def) == 0 || !def[0].Gw.Equal(net.ParseIP("192.0.2.1")) {
			t.Fatalf("%s: default route gone: %v %v", when, def, err)
		}
	}
	check("after the first sync")
	name := `routelet_route_conflicts_total{table="ipv4"}`
	netnstest.Eventually(t, 10*time.Second, name+" = 2", func() bool { return tn.metricValue(name) == 2 })
	// Retries and the tamper path (a route event on the block) change nothing.
	tn.ipIn("route", "add", "blackhole", "10.244.7.0/25", "proto", "static")
	tn.ipIn("route", "del", "blackhole", "10.244.7.0/25")
	check("after retries")
	if v := tn.metricValue(name); v != 2 {
		t.Fatalf("%s = %v after retries, want the two conflicts counted once", name, v)
	}

	tn.ipIn("route", "del", "10.244.7.50/32")
	netnstest.Eventually(t, 30*time.Second, "pod route once the static /32 is gone", func() bool {
		return tn.hasRoute(v4, "10.244.7.50/32 calistatic0 proto 80")
	})
	tn.ipIn("route", "del", "10.244.7.0/24")
	netnstest.Eventually(t, 30*time.Second, "blackhole once the static block route is gone", func() bool {
		return tn.hasRoute(v4, "10.244.7.0/24 blackhole proto 80")
	})
	if !tn.hasRoute(v4, "192.0.2.0/24 up0 proto 2") || !strings.Contains(tn.metric(name), "2") {
		t.Fatalf("connected route or conflict count changed: %v, %s", tn.routes(v4), tn.metric(name))
	}
}

// TestDaemonRepairsSysctlsOnEventsAndPolls: with the default
// device-check-period (10s, the poll of the sysctls without change events)
// and no full resync during the test, a pod veth's proxy_arp and IPv4
// forwarding changed by hand are put back on their netconf events, well
// within one poll period, and its accept_ra, which changes silently, within
// the poll period (docs/daemon.md, "Upkeep of what ADD set up").
func TestDaemonRepairsSysctlsOnEventsAndPolls(t *testing.T) {
	tn := newTestNode(t, true)
	tn.startDaemon("--device-check-period=10s", "--resync-period=10m")
	tn.waitReady()
	p := tn.addPod("keep2")
	netnstest.Eventually(t, 5*time.Second, "daemon serving the pod", func() bool { return tn.metric("routelet_workloads") == "1" })
	for _, tc := range []struct {
		key, flip, want string
		within          time.Duration
	}{
		// An event is handled in milliseconds; 5s is half a poll period.
		{"net/ipv4/conf/" + p.iface + "/proxy_arp", "0", "1", 5 * time.Second},
		{"net/ipv4/conf/" + p.iface + "/forwarding", "0", "1", 5 * time.Second},
		// One poll period, the time to the first poll after start-up, and slack.
		{"net/ipv6/conf/" + p.iface + "/accept_ra", "1", "0", 25 * time.Second},
	} {
		if got, err := netnstest.Sysctl(tn.node.NS, tc.key, ""); err != nil || got != tc.want {
			t.Fatalf("%s = %q (%v) after ADD, want %s", tc.key, got, err, tc.want)
		}
		before := tn.metricValue(`routelet_repairs_total{object="sysctl"}`)
		if _, err := netnstest.Sysctl(tn.node.NS, tc.key, tc.flip); err != nil {
			t.Fatal(err)
		}
		took := netnstest.Eventually(t, tc.within, tc.key+" repaired", func() bool {
			v, err := netnstest.Sysctl(tn.node.NS, tc.key, "")
			return err == nil && v == tc.want
		})
		netnstest.Eventually(t, 10*time.Second, "the repair counted", func() bool {
			return tn.metricValue(`routelet_repairs_total{object="sysctl"}`) > before
		})
		t.Logf("%s repaired after %s", tc.key, took.Round(time.Millisecond))
	}
}
