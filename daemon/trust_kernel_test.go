package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/state"
)

// nodeRoutes returns every main-table route of the node (both families,
// default routes included, the kernel's IPv6 link-local routes not) as "dst dev proto type" strings, sorted; what the
// node's own connectivity depends on.
func (tn *testNode) nodeRoutes() []string {
	tn.t.Helper()
	var out []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := tn.nl.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			tn.t.Fatal(err)
		}
		for _, r := range rs {
			if r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast() && r.Protocol == unix.RTPROT_KERNEL {
				continue // fe80::/64 of each link, which the kernel adds when it likes
			}
			dst := "default"
			if r.Dst != nil {
				dst = r.Dst.String()
			}
			dev := "-"
			if l, err := tn.nl.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			out = append(out, fmt.Sprintf("%s dev %s proto %d type %d via %v", dst, dev, r.Protocol, r.Type, r.Gw))
		}
	}
	slices.Sort(out)
	return out
}

// foreignRoutes is nodeRoutes without routelet's own (protocol 80).
func (tn *testNode) foreignRoutes() []string {
	var out []string
	for _, r := range tn.nodeRoutes() {
		if !strings.Contains(r, " proto 80 ") {
			out = append(out, r)
		}
	}
	return out
}

// runDaemonArgs starts routeletd in the node with exactly args and env
// added to the environment, and waits up to timeout for it to exit. It
// returns the exit code and output; exited is false (and the daemon is
// killed) when it was still running then.
func (tn *testNode) runDaemonArgs(timeout time.Duration, env []string, args ...string) (code int, out string, exited bool) {
	tn.t.Helper()
	log := &netnstest.Buffer{}
	bin := filepath.Join(binDir, "routeletd")
	name, full := bin, args
	if len(env) > 0 {
		name, full = "env", append(append(append([]string{}, env...), bin), args...)
	}
	p, err := netnstest.StartIn(tn.node.NS, log, name, full...)
	if err != nil {
		tn.t.Fatal(err)
	}
	select {
	case <-p.Done():
		return exitCode(p.Err()), log.String(), true
	case <-time.After(timeout):
		p.Kill()
		return -1, log.String(), false
	}
}

// wantRefused runs routeletd in the node with exactly args (and env) and
// checks that it refuses to start: exit 2 within 10s, a message holding
// each of wants, and the node's routes as they were. what names the case in
// failures.
func (tn *testNode) wantRefused(what string, wants, env []string, args ...string) {
	tn.t.Helper()
	before := tn.nodeRoutes()
	code, out, exited := tn.runDaemonArgs(10*time.Second, env, args...)
	if !exited || code != 2 {
		tn.t.Errorf("%s: exited %v with %d, want exit 2\n%s", what, exited, code, out)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			tn.t.Errorf("%s: message lacks %q:\n%s", what, w, out)
		}
	}
	if after := tn.nodeRoutes(); !slices.Equal(before, after) {
		tn.t.Errorf("%s changed the node's routes:\nbefore %q\nafter  %q", what, before, after)
	}
}

// addLink adds a link of kind (bridge, vxlan) to the node, up; a vxlan
// link gets VNI 77 on a port of its own.
func (tn *testNode) addLink(name, kind string) {
	tn.t.Helper()
	args := []string{"link", "add", name, "type", kind}
	if kind == "vxlan" {
		args = append(args, "id", "77", "dstport", "4777")
	}
	if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", args...); err != nil {
		tn.t.Fatalf("%v %s", err, out)
	}
	if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", "link", "set", name, "up"); err != nil {
		tn.t.Fatalf("%v %s", err, out)
	}
}

// ip runs ip(8) in the node and fails the test on error.
func (tn *testNode) ip(args ...string) {
	tn.t.Helper()
	if out, err := netnstest.Exec(context.Background(), tn.node.NS, "ip", args...); err != nil {
		tn.t.Fatalf("%v %s", err, out)
	}
}

// TestPodCIDRRefused: a pod CIDR that is /0, overlaps the node's addresses
// or connected subnets, loopback, link-local, multicast, or is too small for
// a pod makes routeletd exit 2 naming the key, its source and the value,
// before it touches any route.
func TestPodCIDRRefused(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	for _, tc := range []struct {
		name  string
		cidr  string
		src   string // flag, env or file
		wants []string
	}{
		{"default route", "0.0.0.0/0", "flag", []string{"flag --pod-cidr", "every address"}},
		{"v6 default route", "::/0", "env", []string{"env ROUTELET_POD_CIDR", "every address"}},
		{"connected subnet", "192.0.2.128/25", "file", []string{"(file)", "connected subnet 192.0.2.0/24"}},
		{"holds the node address", "192.0.0.0/16", "flag", []string{"address 192.0.2.10"}},
		{"static on-link route", "172.31.4.0/24", "flag", []string{"connected route 172.31.0.0/16"}},
		{"v6 connected subnet", "2001:db8:7::1:0/120", "flag", []string{"connected subnet 2001:db8:7::/64"}},
		{"loopback", "127.0.0.0/24", "flag", []string{"loopback"}},
		{"pod gateway", "169.254.1.0/24", "flag", []string{"169.254.1.1"}},
		{"multicast", "224.0.0.0/24", "flag", []string{"multicast"}},
		{"v6 link-local", "fe80::/64", "flag", []string{"link-local"}},
		{"too small", "10.244.0.0/31", "flag", []string{"too small"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTestNode(t, true)
			tn.ip("addr", "add", "2001:db8:7::10/64", "dev", "up0", "nodad")
			tn.ip("route", "add", "172.31.0.0/16", "dev", "up0", "proto", "static", "scope", "link")
			args := []string{"--node-name=node-a", "--state-dir=" + tn.stateDir, "--encapsulation=none", "--health-addr=", "--grace-period=0s"}
			var env []string
			switch tc.src {
			case "flag":
				args = append(args, "--pod-cidr="+tc.cidr)
			case "env":
				env = []string{"ROUTELET_POD_CIDR=" + tc.cidr}
			case "file":
				path := filepath.Join(t.TempDir(), "routeletd.yaml")
				if err := os.WriteFile(path, []byte("pod-cidr: "+tc.cidr+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config="+path)
			}
			tn.wantRefused("pod-cidr "+tc.cidr, append([]string{`"pod-cidr"`, tc.cidr}, tc.wants...), env, args...)
		})
	}
}

// TestInterfacePrefixRefused: an interface prefix that names the uplink, an
// existing link that is not a veth, or routelet's own overlay devices makes
// routeletd exit 2 before it touches any route.
func TestInterfacePrefixRefused(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	for _, tc := range []struct {
		prefix string
		setup  func(tn *testNode)
		want   string
	}{
		{prefix: "up", want: "uplink up0"},
		{prefix: "lo", want: "link lo"},
		{prefix: "br", setup: func(tn *testNode) { tn.addLink("br-rt0", "bridge") }, want: "bridge link br-rt0"},
		{prefix: "flannel", setup: func(tn *testNode) { tn.addLink("flannel.1", "vxlan") }, want: "vxlan link flannel.1"},
		{prefix: "vxlan", want: "vxlan.calico"},
		{prefix: "tun", want: "tunl0"},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			tn := newTestNode(t, true)
			if tc.setup != nil {
				tc.setup(tn)
			}
			tn.wantRefused("interface-prefix "+tc.prefix,
				[]string{`"interface-prefix"`, "flag --interface-prefix", `"` + tc.prefix + `"`, tc.want}, nil,
				"--node-name=node-a", "--state-dir="+tn.stateDir, "--pod-cidr="+tn.podCIDR, "--encapsulation=none",
				"--health-addr=", "--grace-period=0s", "--interface-prefix="+tc.prefix)
		})
	}
}

// TestNodeIPNeverLoopbackOrOwnDevice: cidr: and interface: node-ip settings
// skip loopback and routelet's own devices (the VXLAN device with its tunnel
// address, pod veths); when nothing else matches the daemon stays not ready
// and says why.
func TestNodeIPNeverLoopbackOrOwnDevice(t *testing.T) {
	netnstest.SkipUnlessRoot(t, whyRoot)
	for _, tc := range []struct {
		spec   string
		want   string // chosen host IPv4, or "" for none
		reason []string
	}{
		{spec: "cidr:0.0.0.0/0", want: "192.0.2.10"},
		{spec: "cidr:10.244.7.0/24", reason: []string{"cidr:10.244.7.0/24", "vxlan.calico"}},
		{spec: "cidr:10.250.0.0/24", reason: []string{"cidr:10.250.0.0/24", "calipod0"}},
		{spec: "interface:vxlan.*", reason: []string{"interface:vxlan.*", "vxlan.calico"}},
		{spec: "interface:cali.*", reason: []string{"interface:cali.*", "calipod0"}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			tn := newTestNode(t, true)
			// routelet's VXLAN device from an earlier run, with its tunnel
			// address (the first address of the pod block), and a pod veth
			// that carries an address.
			tn.ip("link", "add", "vxlan.calico", "type", "vxlan", "id", "4096", "dstport", "4789", "nolearning")
			tn.ip("addr", "add", "10.244.7.0/32", "dev", "vxlan.calico")
			tn.ip("link", "set", "vxlan.calico", "up")
			tn.addVeth("calipod0", "ppod0")
			tn.ip("addr", "add", "10.250.0.1/24", "dev", "calipod0")
			tn.startDaemon("--node-ip=" + tc.spec)
			if tc.want != "" {
				tn.waitReady()
				self, err := tn.store.GetNode("node-a")
				if err != nil || self.HostIPv4 != tc.want {
					t.Fatalf("node-ip %s: own record %+v, %v; want host IP %s", tc.spec, self, err, tc.want)
				}
				return
			}
			netnstest.Eventually(t, 10*time.Second, "daemon.json saying why it is not ready", func() bool {
				st, err := tn.store.ReadDaemonStatus()
				if err != nil || st.Ready {
					return false
				}
				for _, r := range tc.reason {
					if !strings.Contains(st.Reason, r) {
						return false
					}
				}
				return true
			})
			if code, body, _ := tn.get("/readyz"); code != 503 || !strings.Contains(body, tc.spec) {
				t.Errorf("/readyz = %d %q, want 503 naming %s", code, body, tc.spec)
			}
			if n, err := tn.store.GetNode("node-a"); err == nil {
				t.Errorf("node-ip %s: own record written with %+v", tc.spec, n)
			}
		})
	}
}

// TestWorkloadRecordLimits: a workload record makes routelet program routes
// only on veths with the interface prefix and only for addresses inside the
// node's blocks. Refused records are logged and counted in
// routelet_bad_records, also when they arrive through file events; the
// node's own routes are never touched.
func TestWorkloadRecordLimits(t *testing.T) {
	tn := newTestNode(t, true)
	d := tn.startDaemon()
	tn.waitReady()
	before := tn.foreignRoutes()
	tn.addVeth("caligood0", "pgood0")
	tn.addRecord("good", "caligood0", "/var/run/netns/x", "10.244.7.10/32")
	type badRecord struct {
		cid, iface, kind, ip string
		want                 string // in the log line
	}
	bad := []badRecord{
		{"peerhost", "calipeer0", "veth", "192.0.2.20/32", "192.0.2.20"},
		{"everything", "calidef0", "veth", "0.0.0.0/0", "0.0.0.0"},
		{"outside", "caliout0", "veth", "10.99.0.5/32", "10.99.0.5"},
		{"gateway", "caligw0", "veth", "169.254.1.1/32", "169.254.1.1"},
		{"bridge", "calibr0", "bridge", "10.244.7.11/32", "calibr0"},
		{"vxlan", "calivx0", "vxlan", "10.244.7.12/32", "calivx0"},
		{"noprefix", "up1", "", "10.244.7.13/32", "up1"},
	}
	for i, b := range bad {
		switch b.kind {
		case "veth":
			tn.addVeth(b.iface, fmt.Sprintf("pbad%d", i))
		case "bridge", "vxlan":
			tn.addLink(b.iface, b.kind)
		}
		tn.addRecord(b.cid, b.iface, "/var/run/netns/x", b.ip)
	}
	netnstest.Eventually(t, 5*time.Second, "good record served", func() bool { return tn.hasRoute(v4, "10.244.7.10/32 caligood0 proto 80") })
	want := fmt.Sprint(len(bad))
	netnstest.Eventually(t, 5*time.Second, "routelet_bad_records = "+want+" through file events", func() bool { return tn.metric("routelet_bad_records") == want })
	checkRefused := func() {
		t.Helper()
		for _, b := range bad {
			dst := b.ip
			if dst == "0.0.0.0/0" {
				dst = "0.0.0.0/32"
			}
			for r := range tn.routes(v4) {
				if strings.HasPrefix(r, dst+" ") || strings.Contains(r, " "+b.iface+" ") {
					t.Errorf("record %s: route %s programmed", b.cid, r)
				}
			}
			if !logHas(d.log.String(), "refusing workload record", b.cid) {
				t.Errorf("record %s: no log line refusing it", b.cid)
			}
		}
		for _, r := range tn.nodeRoutes() {
			if strings.HasPrefix(r, "default") && strings.Contains(r, "proto 80") {
				t.Errorf("default route taken: %s", r)
			}
		}
		if after := tn.foreignRoutes(); !slices.Equal(before, after) {
			t.Errorf("the node's own routes changed:\nbefore %q\nafter  %q", before, after)
		}
	}
	checkRefused()
	for _, b := range bad {
		if !logHas(d.log.String(), "refusing workload record", b.cid, b.want) {
			t.Errorf("record %s: log names no %q", b.cid, b.want)
		}
	}

	// A corrupt file counts too, and stops counting when it is removed.
	corrupt := filepath.Join(tn.store.WorkloadsDir(), "corrupt_eth0.json")
	if err := os.WriteFile(corrupt, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	plus := fmt.Sprint(len(bad) + 1)
	netnstest.Eventually(t, 5*time.Second, "routelet_bad_records = "+plus, func() bool { return tn.metric("routelet_bad_records") == plus })
	os.Remove(corrupt)
	netnstest.Eventually(t, 5*time.Second, "routelet_bad_records back to "+want, func() bool { return tn.metric("routelet_bad_records") == want })

	// After a restart (a full read) the same records are refused. A link
	// with the prefix that is not a veth makes the daemon refuse to start,
	// so those two go first.
	d.kill9(t)
	for _, b := range bad {
		if b.kind == "bridge" || b.kind == "vxlan" {
			tn.ip("link", "del", b.iface)
			tn.store.DeleteWorkload(b.cid, "eth0")
		}
	}
	bad = slices.DeleteFunc(bad, func(b badRecord) bool { return b.kind == "bridge" || b.kind == "vxlan" })
	want = fmt.Sprint(len(bad))
	d = tn.startDaemon()
	tn.waitReady()
	netnstest.Eventually(t, 5*time.Second, "routelet_bad_records = "+want+" after restart", func() bool { return tn.metric("routelet_bad_records") == want })
	checkRefused()
	for _, b := range bad {
		tn.store.DeleteWorkload(b.cid, "eth0")
	}
	netnstest.Eventually(t, 5*time.Second, "routelet_bad_records = 0", func() bool { return tn.metric("routelet_bad_records") == "0" })
	if !tn.hasRoute(v4, "10.244.7.10/32 caligood0 proto 80") {
		t.Error("good record no longer served")
	}
}

// TestLeakCollectionNeedsOwnVeth: a record whose netns is gone and whose
// host interface is not one of routelet's veths (a bridge with the prefix, a
// veth without it) is collected after the grace period like any leak; the
// link itself is never touched.
func TestLeakCollectionNeedsOwnVeth(t *testing.T) {
	tn := newTestNode(t, true)
	tn.addRecord("onuplinkpeer", "up1", "/var/run/netns/gone-"+fmt.Sprint(os.Getpid()), "10.244.7.31/32")
	tn.startDaemon("--leak-grace-period=1s")
	tn.waitReady()
	// Made after the start: a bridge with the prefix refuses the start.
	tn.addLink("calibr0", "bridge")
	tn.addRecord("onbridge", "calibr0", "/var/run/netns/gone-"+fmt.Sprint(os.Getpid()), "10.244.7.30/32")
	for _, cid := range []string{"onbridge", "onuplinkpeer"} {
		netnstest.Eventually(t, 10*time.Second, cid+" collected", func() bool {
			_, err := tn.store.GetWorkload(cid, "eth0")
			return err != nil
		})
	}
	for _, n := range []string{"calibr0", "up1"} {
		if _, err := tn.nl.LinkByName(n); err != nil {
			t.Errorf("link %s touched: %v", n, err)
		}
	}
}

// TestCleanupOnlyOwnVeths: `routeletd cleanup` deletes the host veths named
// in workload records only when they have the prefix and are veths; a
// bridge or vxlan link with the prefix and a veth without it stay.
func TestCleanupOnlyOwnVeths(t *testing.T) {
	tn := newTestNode(t, true)
	tn.addVeth("calivic0", "pvic0")
	tn.addLink("calibr0", "bridge")
	tn.addLink("calivx0", "vxlan")
	tn.addRecord("pod", "calivic0", "/var/run/netns/x", "10.244.7.40/32")
	tn.addRecord("bridge", "calibr0", "/var/run/netns/x", "10.244.7.41/32")
	tn.addRecord("vxlan", "calivx0", "/var/run/netns/x", "10.244.7.42/32")
	tn.addRecord("uplink", "up0", "/var/run/netns/x", "10.244.7.43/32")
	before := tn.foreignRoutes()
	out, err := netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
		"--state-dir="+tn.stateDir, "--node-name=node-a")
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	if _, err := tn.nl.LinkByName("calivic0"); err == nil {
		t.Error("routelet's veth calivic0 left behind")
	}
	for _, n := range []string{"calibr0", "calivx0", "up0"} {
		if _, err := tn.nl.LinkByName(n); err != nil {
			t.Errorf("cleanup deleted %s, which is not routelet's veth: %v\n%s", n, err, out)
		}
	}
	if after := tn.foreignRoutes(); !slices.Equal(before, after) {
		t.Errorf("cleanup changed the node's own routes:\nbefore %q\nafter  %q", before, after)
	}
}

// TestStaleRecordNeverStealsLiveRoute: when several records claim one
// address, a record whose host veth exists beats one whose veth is absent;
// among live ones the newest record wins, then the lowest container ID. The
// outcome is the same after every restart.
func TestStaleRecordNeverStealsLiveRoute(t *testing.T) {
	tn := newTestNode(t, true)
	old := time.Now().Add(-time.Hour)
	put := func(cid, iface, ip string, created time.Time) {
		t.Helper()
		err := tn.store.PutWorkload(&state.Workload{ContainerID: cid, IfName: "eth0", HostIface: iface, Netns: "/var/run/netns/x",
			IPs: []string{ip}, ContainerMAC: "02:00:00:00:00:01", Created: created})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A live pod and a newer stale record of an absent veth for one address.
	tn.addVeth("calilive0", "plive0")
	put("live", "calilive0", "10.244.7.60/32", old)
	put("stale", "calistale0", "10.244.7.60/32", time.Now())
	// Two live pods: the newer wins.
	tn.addVeth("caliolder0", "polder0")
	tn.addVeth("calinewer0", "pnewer0")
	put("older", "caliolder0", "10.244.7.61/32", old)
	put("newer", "calinewer0", "10.244.7.61/32", old.Add(time.Minute))
	// Two live pods created at the same time: the lower container ID wins.
	tn.addVeth("calitiea0", "ptiea0")
	tn.addVeth("calitieb0", "ptieb0")
	put("tie-b", "calitieb0", "10.244.7.62/32", old)
	put("tie-a", "calitiea0", "10.244.7.62/32", old)
	want := []string{"10.244.7.60/32 calilive0 proto 80", "10.244.7.61/32 calinewer0 proto 80", "10.244.7.62/32 calitiea0 proto 80"}
	for i := range 6 {
		d := tn.startDaemon()
		tn.waitReady()
		netnstest.Eventually(t, 5*time.Second, fmt.Sprintf("start %d: every address on its winner", i+1), func() bool {
			rs := tn.routes(v4)
			for _, w := range want {
				if !rs[w] {
					return false
				}
			}
			return true
		})
		// Stay a moment past the grace period: no flapping afterwards.
		time.Sleep(1200 * time.Millisecond)
		rs := tn.routes(v4)
		for _, w := range want {
			if !rs[w] {
				t.Fatalf("start %d: %s lost after the grace period: %v", i+1, w, rs)
			}
		}
		d.kill9(t)
		// Forget the kernel's state, so that each start decides afresh.
		for _, w := range want {
			tn.ip("route", "del", strings.Fields(w)[0])
		}
	}
}

// TestOneDaemonPerNetns: a second routeletd in the same network namespace
// refuses to start whatever its state directory, and so does cleanup; the
// first daemon's routes stay.
func TestOneDaemonPerNetns(t *testing.T) {
	tn := newTestNode(t, true)
	tn.addVeth("calione0", "pone0")
	tn.addRecord("one", "calione0", "/var/run/netns/x", "10.244.7.70/32")
	tn.startDaemon()
	tn.waitReady()
	netnstest.Eventually(t, 2*time.Second, "first daemon's route", func() bool { return tn.hasRoute(v4, "10.244.7.70/32 calione0 proto 80") })
	other := filepath.Join(t.TempDir(), "other-state")
	code, out, exited := tn.runDaemonArgs(10*time.Second, nil, "--node-name=node-b", "--state-dir="+other,
		"--pod-cidr=10.244.8.0/24", "--encapsulation=none", "--health-addr=127.0.0.1:9098")
	if !exited || code == 0 || !strings.Contains(out, "another routeletd is running in this network namespace") {
		t.Errorf("second daemon with another state dir: exited %v with %d:\n%s", exited, code, out)
	}
	out, err := netnstest.Exec(context.Background(), tn.node.NS, filepath.Join(binDir, "routeletd"), "cleanup",
		"--state-dir="+other, "--node-name=node-b")
	if err == nil || !strings.Contains(out, "stop routeletd first") {
		t.Errorf("cleanup with another state dir while a daemon runs: %v\n%s", err, out)
	}
	if !tn.hasRoute(v4, "10.244.7.70/32 calione0 proto 80") || !tn.hasRoute(v4, "10.244.7.0/24 blackhole proto 80") {
		t.Errorf("first daemon's routes gone: %v", tn.routes(v4))
	}
	if code, _, err := tn.get("/readyz"); err != nil || code != 200 {
		t.Errorf("first daemon /readyz = %d, %v", code, err)
	}
}

// TestStaleTempFilesRemovedAtStart: temp files that killed writers left in
// the state directory are removed when the daemon starts; a temp file a
// live writer holds, symlinks and names outside the writers' pattern stay.
func TestStaleTempFilesRemovedAtStart(t *testing.T) {
	tn := newTestNode(t, true)
	wdir, ndir := tn.store.WorkloadsDir(), tn.store.NodesDir()
	old := time.Now().Add(-time.Minute)
	mk := func(path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(`{"version":1,"containerID":"half`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	stale := []string{filepath.Join(wdir, ".tmp-1234567"), filepath.Join(ndir, ".tmp-89"), filepath.Join(tn.stateDir, ".tmp-4242")}
	for _, p := range stale {
		mk(p)
	}
	// A live writer holds its temp file locked.
	live := filepath.Join(wdir, ".tmp-777")
	mk(live)
	f, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// A symlink with the pattern's name pointing elsewhere, and names that
	// are not writers' temp files.
	target := filepath.Join(t.TempDir(), "precious")
	mk(target)
	link := filepath.Join(wdir, ".tmp-555")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	keep := []string{live, link, target, filepath.Join(wdir, ".tmp-notes"), filepath.Join(ndir, "x.tmp-1")}
	mk(keep[3])
	mk(keep[4])

	d := tn.startDaemon()
	tn.waitReady()
	for _, p := range stale {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("stale temp file %s left", p)
		}
	}
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if !strings.Contains(d.log.String(), ".tmp-1234567") {
		t.Error("removal of a stale temp file not logged")
	}
}

// logHas reports whether one line of log contains every one of words.
func logHas(log string, words ...string) bool {
	for _, l := range strings.Split(log, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			return true
		}
	}
	return false
}

// TestPeerBlockOverHostSpaceAddedLater: a peer's block is routed until the
// node gains an address in it (a link of its own added later), then it is
// refused at once — no peer record changed and the resync is far off — and
// routed again when the address goes. The same for a connected route of
// another protocol over the block.
func TestPeerBlockOverHostSpaceAddedLater(t *testing.T) {
	tn := newTestNode(t, true)
	if err := tn.store.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.20", Blocks: []string{"10.250.5.0/24", "10.250.6.0/24"},
		Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d := tn.startDaemon("--resync-period=10m")
	tn.waitReady()
	routed := func(block string) bool { return tn.hasRoute(v4, block+" up0 proto 80") }
	refused := func(block string) bool {
		return tn.metric(`routelet_peer_values_refused{field="block",node="node-b",value="`+block+`"}`) == "1"
	}
	netnstest.Eventually(t, 10*time.Second, "node-b's blocks routed", func() bool { return routed("10.250.5.0/24") && routed("10.250.6.0/24") })

	tn.addVeth("own0", "own1")
	tn.ip("addr", "add", "10.250.5.1/32", "dev", "own0")
	netnstest.Eventually(t, 20*time.Second, "10.250.5.0/24 refused once the node has 10.250.5.1", func() bool {
		return !routed("10.250.5.0/24") && refused("10.250.5.0/24")
	})
	if !routed("10.250.6.0/24") {
		t.Errorf("node-b's other block lost its route: %v", tn.routes(v4))
	}
	if !logHas(d.log.String(), "refusing a node record value", "10.250.5.0/24", "10.250.5.1") {
		t.Errorf("no log line names the refused block and the node's address:\n%s", d.log.String())
	}

	tn.ip("addr", "del", "10.250.5.1/32", "dev", "own0")
	netnstest.Eventually(t, 20*time.Second, "10.250.5.0/24 routed again once the address is gone", func() bool {
		return routed("10.250.5.0/24") && !refused("10.250.5.0/24")
	})

	tn.ip("route", "add", "10.250.6.0/25", "dev", "own0", "proto", "static")
	netnstest.Eventually(t, 20*time.Second, "10.250.6.0/24 refused under a static connected route", func() bool {
		return !routed("10.250.6.0/24") && refused("10.250.6.0/24")
	})
}
