package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// withUplink gives the node an uplink: veth name (peer name+"p") with
// 192.168.77.2/24, a default route via 192.168.77.1 and a static on-link
// route 172.31.0.0/16, as a real node has.
func (n *node) withUplink(name string) {
	n.t.Helper()
	for _, args := range [][]string{
		{"ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"},
		{"ip", "link", "set", name, "up"},
		{"ip", "link", "set", name + "p", "up"},
		{"ip", "addr", "add", "192.168.77.2/24", "dev", name},
		{"ip", "route", "add", "default", "via", "192.168.77.1", "dev", name},
		{"ip", "route", "add", "172.31.0.0/16", "dev", name, "proto", "static", "scope", "link"},
	} {
		if out, err := execInNS(n.ns.Path(), args...); err != nil {
			n.t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
}

// routesOf lists the node's main-table IPv4 routes as `ip route` prints them.
func (n *node) routesOf() string {
	n.t.Helper()
	out, err := execInNS(n.ns.Path(), "ip", "-4", "route", "show")
	if err != nil {
		n.t.Fatalf("ip route: %v\n%s", err, out)
	}
	return string(out)
}

// linkNames lists the node's links, sorted.
func (n *node) linkNames() []string {
	l := n.hostLinks()
	slices.Sort(l)
	return l
}

// TestIPAMTypeIsSelf: an ipam.type that is the plugin's own type, or that
// resolves in CNI_PATH to the plugin's executable through a symlink, a
// chain of symlinks or a hard link, is a config error naming the value for
// every command; the plugin never calls itself.
func TestIPAMTypeIsSelf(t *testing.T) {
	n := newNode(t)
	self := filepath.Join(n.bin, "routelet")
	extra := t.TempDir()
	if err := os.Symlink(self, filepath.Join(extra, "self-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(extra, "self-link"), filepath.Join(extra, "self-chain")); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(filepath.Dir(n.bin), filepath.Base(n.bin)+"-hard")
	if err := os.MkdirAll(hard, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hard) })
	if err := os.Link(self, filepath.Join(hard, "self-hard")); err != nil {
		t.Fatalf("hard link next to the binary: %v", err)
	}
	cniPath := strings.Join([]string{extra, hard, n.bin}, string(os.PathListSeparator))
	for _, typ := range []string{"routelet", "self-link", "self-chain", "self-hard"} {
		for _, cmd := range []string{"ADD", "DEL", "CHECK", "GC", "STATUS"} {
			t.Run(typ+"/"+cmd, func(t *testing.T) {
				pod := newNetNS(t)
				version := "1.1.0"
				conf := n.conf(version, map[string]any{"ipam": map[string]any{"type": typ}, "cni.dev/valid-attachments": []any{}})
				const limit = 20 * time.Second
				o := n.run(call{cmd: cmd, containerID: "self", netns: pod.Path(), ifName: "eth0", conf: conf,
					env: map[string]string{"CNI_PATH": cniPath}, timeout: limit})
				if o.timedOut {
					t.Fatalf("%s with ipam.type %q still running after %s (the plugin calls itself)", cmd, typ, limit)
				}
				if o.exitCode == 0 || o.cniErr.Code != types.ErrInvalidNetworkConfig {
					t.Fatalf("%s with ipam.type %q: exit %d %s, want code 7", cmd, typ, o.exitCode, o.stdout)
				}
				mustContain(t, "error message", o.cniErr.Msg, fmt.Sprintf("%q", typ), "own")
			})
		}
	}
	n.assertEmpty("after refused configs")
}

// TestBlocksRefused: conflist ipam.blocks that overlap the node's own
// address space (its addresses, connected subnets and on-link routes, read
// in the node namespace) or special space (/0, loopback, link-local with the
// pod gateway, multicast), or that cannot hold a pod, are refused with code
// 7 naming the block and what it overlaps; ADD leaves nothing behind. The
// tunnel address on vxlan.calico and routelet's own routes do not count.
func TestBlocksRefused(t *testing.T) {
	n := newNode(t)
	n.withUplink("up0")
	mustRun(t, n, "ip", "link", "add", "vxlan.calico", "type", "vxlan", "id", "4096", "dstport", "4789", "dev", "up0")
	mustRun(t, n, "ip", "addr", "add", "10.95.1.0/32", "dev", "vxlan.calico")
	mustRun(t, n, "ip", "route", "add", "10.96.0.0/24", "dev", "up0", "proto", "80", "scope", "link")
	st, err := state.Open(n.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true, Blocks: []string{"10.95.1.0/26"}}); err != nil {
		t.Fatal(err)
	}
	links := n.linkNames()
	for _, tc := range []struct {
		block string
		want  []string // in the message besides the block; nil: accepted
	}{
		{"0.0.0.0/0", []string{"every address"}},
		{"::/0", []string{"every address"}},
		{"192.168.77.128/26", []string{"connected subnet 192.168.77.0/24"}},
		{"192.168.0.0/16", []string{"address 192.168.77.2"}},
		{"172.31.5.0/24", []string{"connected route 172.31.0.0/16"}},
		{"127.0.0.0/24", []string{"loopback"}},
		{"169.254.1.0/24", []string{"169.254.1.1"}},
		{"fe80::/64", []string{"link-local"}},
		{"224.0.0.0/24", []string{"multicast"}},
		{"ff02::/120", []string{"multicast"}},
		{"240.0.0.0/24", []string{"240.0.0.0/4"}},
		{"10.97.0.0/31", []string{"/30 or larger"}},
		{"10.95.0.0/23", nil}, // holds the daemon's block and its tunnel address
		{"10.96.0.0/26", nil}, // only a route routelet itself programmed
	} {
		t.Run(tc.block, func(t *testing.T) {
			pod := newNetNS(t)
			conf := n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{tc.block}}})
			o := n.run(call{cmd: "ADD", containerID: "blocks", netns: pod.Path(), ifName: "eth0", conf: conf})
			if tc.want == nil {
				o.mustOK(t, "ADD with block "+tc.block)
				n.run(call{cmd: "DEL", containerID: "blocks", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "DEL")
				return
			}
			if o.exitCode == 0 || o.cniErr.Code != types.ErrInvalidNetworkConfig {
				t.Fatalf("ADD with block %s: exit %d %s, want code 7", tc.block, o.exitCode, o.stdout)
			}
			mustContain(t, "error message", o.cniErr.Msg, append([]string{tc.block}, tc.want...)...)
			if pv, err := podnet.InspectPod(pod.Path(), "eth0"); err != nil || pv.Exists {
				t.Errorf("pod has eth0 after a refused ADD (err %v)", err)
			}
		})
	}
	if got := n.linkNames(); !slices.Equal(got, links) {
		t.Errorf("node links %v, want %v as before", got, links)
	}
	if r := n.records(); len(r) != 0 {
		t.Errorf("%d records left", len(r))
	}
	if a := n.allocations(); len(a) != 0 {
		t.Errorf("allocations left: %v", a)
	}
}

// TestInterfacePrefixRefused: an interfacePrefix matching the node's uplink
// or an existing link that is not a veth is a config error (code 7) naming
// the link, for ADD, DEL and GC; a DEL whose record names the uplink under
// such a prefix leaves the uplink and the node's routes alone.
func TestInterfacePrefixRefused(t *testing.T) {
	n := newNode(t)
	n.withUplink("rtu0")
	mustRun(t, n, "ip", "link", "add", "brx0", "type", "bridge")
	routes := n.routesOf()
	links := n.linkNames()
	st, err := state.Open(n.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ prefix, want string }{
		{"rtu", "uplink rtu0"},
		{"rt", "uplink rtu0"},
		{"brx", "bridge link brx0"},
	} {
		conf := n.conf("1.1.0", map[string]any{"interfacePrefix": tc.prefix, "cni.dev/valid-attachments": []any{}})
		// A record (planted, or from before the prefix changed) naming the uplink.
		if err := st.PutWorkload(&state.Workload{ContainerID: "prefix", IfName: "eth0", HostIface: "rtu0", Netns: "/x",
			IPs: []string{"10.90.0.5/32"}, ContainerMAC: "02:00:00:00:00:01", Network: "routelet-test"}); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"ADD", "DEL", "GC"} {
			t.Run(tc.prefix+"/"+cmd, func(t *testing.T) {
				pod := newNetNS(t)
				o := n.run(call{cmd: cmd, containerID: "prefix", netns: pod.Path(), ifName: "eth0", conf: conf})
				if o.exitCode == 0 || o.cniErr.Code != types.ErrInvalidNetworkConfig {
					t.Fatalf("%s with interfacePrefix %q: exit %d %s, want code 7", cmd, tc.prefix, o.exitCode, o.stdout)
				}
				mustContain(t, "error message", o.cniErr.Msg, fmt.Sprintf("%q", tc.prefix), tc.want)
			})
		}
		if err := st.DeleteWorkload("prefix", "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.linkNames(); !slices.Equal(got, links) {
		t.Errorf("node links %v, want %v as before", got, links)
	}
	if got := n.routesOf(); got != routes {
		t.Errorf("node routes changed:\n%s\nwant\n%s", got, routes)
	}
	if a := n.allocations(); len(a) != 0 {
		t.Errorf("allocations left: %v", a)
	}
}

// TestReservedWhateverTheBlock: with daemon.json publishing the daemon's
// blocks, a wider conflist block never hands out the tunnel address (first
// address of the daemon's first IPv4 block) nor the first or last address
// of any daemon block — neither when asked for through CNI_ARGS IP= or
// runtimeConfig.ips (code 7 naming it) nor by automatic allocation — and
// never the pod gateway.
func TestReservedWhateverTheBlock(t *testing.T) {
	n := newNode(t)
	st, err := state.Open(n.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true, Blocks: []string{"10.94.1.0/26", "10.94.2.4/30", "fd94::/122"}}); err != nil {
		t.Fatal(err)
	}
	wide := n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{"10.94.0.0/23", "fd94::/120"}}})
	for _, tc := range []struct{ name, args, ip string }{
		{"tunnel address by IP=", "IgnoreUnknown=1;IP=10.94.1.0", "10.94.1.0"},
		{"last of daemon block by IP=", "IgnoreUnknown=1;IP=10.94.1.63", "10.94.1.63"},
		{"first of second daemon block by IP=", "IgnoreUnknown=1;IP=10.94.2.4", ""},
		{"IPv6 first of daemon block by IP=", "IgnoreUnknown=1;IP=fd94::", "fd94::"},
		{"tunnel address by runtimeConfig", "", "10.94.1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := wide
			if tc.args == "" {
				conf = n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{"10.94.0.0/23"}},
					"runtimeConfig": map[string]any{"ips": []string{tc.ip}}})
			}
			if tc.ip == "" {
				return // 10.94.2.4 lies outside the /23: covered by the allocation below
			}
			o := n.run(call{cmd: "ADD", containerID: "reserved", netns: newNetNS(t).Path(), ifName: "eth0", args: tc.args, conf: conf})
			if o.exitCode == 0 || o.cniErr.Code != types.ErrInvalidNetworkConfig {
				t.Fatalf("ADD asking for %s: exit %d %s, want code 7", tc.ip, o.exitCode, o.stdout)
			}
			mustContain(t, "error message", o.cniErr.Msg, tc.ip, "reserved")
		})
	}
	// A non-reserved address of the daemon's block is still fine.
	pod := newNetNS(t)
	o := n.run(call{cmd: "ADD", containerID: "ok", netns: pod.Path(), ifName: "eth0", args: "IgnoreUnknown=1;IP=10.94.1.1", conf: wide}).mustOK(t, "ADD of 10.94.1.1")
	if a := addrsOf(t, o.stdout); len(a) == 0 || a[0].String() != "10.94.1.1" {
		t.Errorf("addresses %v, want 10.94.1.1 first", a)
	}
	n.run(call{cmd: "DEL", containerID: "ok", netns: pod.Path(), ifName: "eth0", conf: wide}).mustOK(t, "DEL")

	// Automatic allocation from a /28 holding the daemon's 10.94.2.4/30: its
	// 14 usable addresses minus the /30's first and last are handed out, then
	// the block is full.
	small := n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{"10.94.2.0/28"}}})
	got := map[string]bool{}
	for i := 0; ; i++ {
		id := fmt.Sprintf("fill-%d", i)
		o := n.run(call{cmd: "ADD", containerID: id, netns: newNetNS(t).Path(), ifName: "eth0", conf: small})
		if o.exitCode != 0 {
			if o.cniErr.Code != types.ErrTryAgainLater {
				t.Errorf("ADD into the full block: code %d %q, want 11", o.cniErr.Code, o.cniErr.Msg)
			}
			mustContain(t, "exhaustion message", o.cniErr.Msg, "no addresses left in block 10.94.2.0/28")
			break
		}
		for _, a := range addrsOf(t, o.stdout) {
			got[a.String()] = true
		}
		if i > 20 {
			t.Fatal("a /28 never filled up")
		}
	}
	for _, r := range []string{"10.94.2.0", "10.94.2.4", "10.94.2.7", "10.94.2.15"} {
		if got[r] {
			t.Errorf("reserved address %s handed out", r)
		}
	}
	if len(got) != 12 {
		t.Errorf("%d addresses handed out (%v), want 12", len(got), got)
	}
	gcConf := n.conf("1.1.0", map[string]any{"ipam": map[string]any{"blocks": []string{"10.94.2.0/28"}}, "cni.dev/valid-attachments": []any{}})
	n.run(call{cmd: "GC", conf: gcConf}).mustOK(t, "GC")
	n.assertEmpty("after GC")

	// The gateway itself is reserved even where a block would hold it.
	if !slices.Contains(reservedAddrs(nil), podnet.GatewayV4) {
		t.Errorf("reserved addresses %v lack the pod gateway", reservedAddrs(nil))
	}
	o = n.run(call{cmd: "ADD", containerID: "gw", netns: newNetNS(t).Path(), ifName: "eth0",
		conf: n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{"169.254.1.0/24"}}})})
	if o.exitCode == 0 || o.cniErr.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("ADD with block 169.254.1.0/24: exit %d %s, want code 7", o.exitCode, o.stdout)
	}
}

// tamper points the workload record of containerID/eth0 at hostIface.
func (n *node) tamper(containerID, hostIface string) {
	n.t.Helper()
	st, err := state.Open(n.stateDir)
	if err != nil {
		n.t.Fatal(err)
	}
	rec, err := st.GetWorkload(containerID, "eth0")
	if err != nil {
		n.t.Fatal(err)
	}
	rec.HostIface = hostIface
	if err := st.PutWorkload(rec); err != nil {
		n.t.Fatal(err)
	}
}

// TestDelGCLeaveForeignLinks: a workload record tampered to name a link
// routelet did not make — a bridge, the uplink, a veth without the prefix,
// a VXLAN device — makes neither DEL nor GC delete it; both still
// release the address and the record and say on stderr which link they
// left alone. The node's routes survive.
func TestDelGCLeaveForeignLinks(t *testing.T) {
	n := newNode(t)
	n.withUplink("eth0")
	mustRun(t, n, "ip", "link", "add", "br-tamper", "type", "bridge")
	mustRun(t, n, "ip", "link", "add", "plain0", "type", "veth", "peer", "name", "plain0p")
	mustRun(t, n, "ip", "link", "add", "vx-tamper", "type", "vxlan", "id", "77", "dstport", "4790", "dev", "eth0")
	routes := n.routesOf()
	conf := n.conf("1.1.0", nil)
	gcConf := n.conf("1.1.0", map[string]any{"cni.dev/valid-attachments": []any{}})
	for _, target := range []string{"br-tamper", "eth0", "plain0", "vx-tamper"} {
		for _, cmd := range []string{"DEL", "GC"} {
			t.Run(target+"/"+cmd, func(t *testing.T) {
				pod := newNetNS(t)
				id := "tamper-" + cmd
				res := n.run(call{cmd: "ADD", containerID: id, netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD")
				podVeth := hostIfOf(t, res.stdout)
				n.tamper(id, target)
				var o outcome
				if cmd == "DEL" {
					o = n.run(call{cmd: "DEL", containerID: id, netns: pod.Path(), ifName: "eth0", conf: conf})
				} else {
					o = n.run(call{cmd: "GC", conf: gcConf})
				}
				o.mustOK(t, cmd+" of a record naming "+target)
				mustContain(t, cmd+" stderr", string(o.stderr), "iface="+target, "not deleting")
				if !slices.Contains(n.hostLinks(), target) {
					t.Errorf("%s deleted %s, which the tampered record named", cmd, target)
				}
				if r := n.records(); len(r) != 0 {
					t.Errorf("%s left %d records", cmd, len(r))
				}
				if a := n.allocations(); len(a) != 0 {
					t.Errorf("%s left allocations %v", cmd, a)
				}
				mustRun(t, n, "ip", "link", "del", podVeth) // the pod's own veth, which the record no longer named
			})
		}
	}
	if got := n.routesOf(); got != routes {
		t.Errorf("node routes changed:\n%s\nwant\n%s", got, routes)
	}
}

// TestConcurrentAddsSamePod: two ADDs for one pod (same K8S namespace and
// name, two sandboxes, as a runtime retry produces) run at the same moment,
// many times. They share the host veth name, so at most one can own it: an
// ADD either fails with code 11 leaving nothing of its own, or succeeds and
// its pod has the interface — unless a later ADD (newer record) of the same
// pod replaced it. The host veth always leads to the surviving pod, with
// exactly that pod's host routes.
func TestConcurrentAddsSamePod(t *testing.T) {
	n := newNode(t)
	conf := n.conf("1.0.0", nil)
	const rounds = 25
	var bothOK, oneFailed int
	for round := range rounds {
		args := fmt.Sprintf("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-%d;IgnoreUnknown=1", round)
		ids := []string{fmt.Sprintf("a-%d", round), fmt.Sprintf("b-%d", round)}
		pods := []string{newNetNS(t).Path(), newNetNS(t).Path()}
		outs := make([]outcome, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outs[i] = n.run(call{cmd: "ADD", containerID: ids[i], netns: pods[i], ifName: "eth0", args: args, conf: conf})
			}()
		}
		close(start)
		wg.Wait()

		hostIf := podnet.VethName("cali", "ns", fmt.Sprintf("web-%d", round), "", "eth0")
		st, err := state.Open(n.stateDir)
		if err != nil {
			t.Fatal(err)
		}
		var ok []int
		for i, o := range outs {
			if o.exitCode == 0 {
				ok = append(ok, i)
				continue
			}
			if o.cniErr.Code != types.ErrTryAgainLater || !strings.Contains(o.cniErr.Msg, hostIf) {
				t.Errorf("round %d: ADD %s failed with code %d %q, want 11 naming %s", round, ids[i], o.cniErr.Code, o.cniErr.Msg, hostIf)
			}
			if _, err := st.GetWorkload(ids[i], "eth0"); err == nil {
				t.Errorf("round %d: failed ADD %s left its record", round, ids[i])
			}
			if a := n.allocations()[ipam.Attachment{ContainerID: ids[i], IfName: "eth0"}]; len(a) != 0 {
				t.Errorf("round %d: failed ADD %s left allocation %v", round, ids[i], a)
			}
		}
		if len(ok) == 0 {
			t.Errorf("round %d: both ADDs failed", round)
		}
		// The survivor: a successful ADD whose pod has eth0.
		survivor := -1
		for _, i := range ok {
			pv, err := podnet.InspectPod(pods[i], "eth0")
			if err != nil {
				t.Fatal(err)
			}
			if pv.Exists {
				if survivor >= 0 {
					t.Errorf("round %d: both pods have eth0 although they share host veth %s", round, hostIf)
				}
				survivor = i
			}
		}
		if survivor < 0 && len(ok) > 0 {
			t.Errorf("round %d: ADDs %v succeeded, but no pod has an interface", round, ok)
		}
		if len(ok) == 2 && survivor >= 0 {
			bothOK++
			other := 1 - survivor
			rs, err1 := st.GetWorkload(ids[survivor], "eth0")
			ro, err2 := st.GetWorkload(ids[other], "eth0")
			if err1 != nil || err2 != nil || !rs.Created.After(ro.Created) {
				t.Errorf("round %d: ADD %s succeeded but its pod has no interface, and it was not replaced by a later ADD (records %v %v)", round, ids[other], err1, err2)
			}
		} else if len(ok) == 1 {
			oneFailed++
		}
		if survivor >= 0 {
			want := addrsOf(t, outs[survivor].stdout)
			var hv *podnet.HostView
			if err := n.ns.Do(func(ns.NetNS) error {
				var err error
				hv, err = podnet.InspectHost(hostIf)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			var have []netip.Addr
			for _, r := range hv.Routes {
				if r.Dst.IsSingleIP() {
					have = append(have, r.Dst.Addr())
				}
			}
			slices.SortFunc(have, netip.Addr.Compare)
			slices.SortFunc(want, netip.Addr.Compare)
			if !hv.Exists || !slices.Equal(have, want) {
				t.Errorf("round %d: host veth %s (exists %v) has host routes %v, want the surviving pod's %v", round, hostIf, hv.Exists, have, want)
			}
		}
		for i := range 2 {
			n.run(call{cmd: "DEL", containerID: ids[i], netns: pods[i], ifName: "eth0", args: args, conf: conf}).mustOK(t, "DEL "+ids[i])
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d rounds: %d with one ADD refused (code 11), %d with both succeeding one after the other", rounds, oneFailed, bothOK)
	n.assertEmpty("after DELs")
	if entries, err := os.ReadDir(filepath.Join(n.stateDir, vethLocksDir)); err == nil && len(entries) != 0 {
		t.Errorf("lock files left after every DEL: %d", len(entries))
	}
}

// TestGCNeedsKeepList: GC without cni.dev/valid-attachments (and without
// the older cni.dev/attachments) removes nothing and says so on stderr; an
// explicit empty list makes every attachment of the network garbage.
func TestGCNeedsKeepList(t *testing.T) {
	n := newNode(t)
	conf := n.conf("1.1.0", nil)
	for _, id := range []string{"gc-1", "gc-2"} {
		n.run(call{cmd: "ADD", containerID: id, netns: newNetNS(t).Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD "+id)
	}
	o := n.run(call{cmd: "GC", conf: conf}).mustOK(t, "GC without a keep list")
	mustContain(t, "GC stderr", string(o.stderr), "cni.dev/valid-attachments", "removing nothing")
	if r, a, l := len(n.records()), len(n.allocations()), len(n.hostLinks()); r != 2 || a != 2 || l != 2 {
		t.Errorf("after GC without a keep list: %d records, %d allocations, %d links; want 2 each", r, a, l)
	}
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m["cni.dev/valid-attachments"] = []any{}
	empty, _ := json.Marshal(m)
	n.run(call{cmd: "GC", conf: empty}).mustOK(t, "GC with an empty keep list")
	n.assertEmpty("after GC with an empty keep list")
}

// TestBadIfName: CNI_IFNAME values the kernel would not take literally are
// refused with code 4 naming the value, for ADD and DEL.
func TestBadIfName(t *testing.T) {
	n := newNode(t)
	for _, name := range []string{"eth%d", "%", "e%0", "a/b", "a:b", "a b", "a\tb", "eth0123456789abc", ".", ".."} {
		for _, cmd := range []string{"ADD", "DEL", "CHECK"} {
			t.Run(fmt.Sprintf("%q/%s", name, cmd), func(t *testing.T) {
				pod := newNetNS(t)
				o := n.run(call{cmd: cmd, containerID: "ifname", netns: pod.Path(), ifName: name, conf: n.conf("1.0.0", nil)})
				if o.exitCode == 0 || o.cniErr.Code != types.ErrInvalidEnvironmentVariables {
					t.Fatalf("%s with CNI_IFNAME %q: exit %d %s, want code 4", cmd, name, o.exitCode, o.stdout)
				}
				mustContain(t, "error message", o.cniErr.Msg, "CNI_IFNAME", fmt.Sprintf("%q", name))
			})
		}
	}
	n.assertEmpty("after refused ADDs")
}

// TestHostRouteNeverReplacesForeign: when the operator already routes a pod
// address elsewhere (a static /32 via a gateway), ADD fails naming that
// route and rolls back instead of replacing it with the pod's host route;
// a stale host route of routelet's own protocol is still replaced.
func TestHostRouteNeverReplacesForeign(t *testing.T) {
	n := newNode(t)
	n.withUplink("up0")
	conf := n.conf("1.0.0", map[string]any{"ipam": map[string]any{"blocks": []string{"10.98.0.0/30"}}})
	mustRun(t, n, "ip", "route", "add", "10.98.0.1/32", "via", "192.168.77.1", "dev", "up0", "proto", "static")
	mustRun(t, n, "ip", "route", "add", "10.98.0.2/32", "via", "192.168.77.1", "dev", "up0", "proto", "static")
	before := n.routesOf()
	pod := newNetNS(t)
	o := n.run(call{cmd: "ADD", containerID: "foreign", netns: pod.Path(), ifName: "eth0", conf: conf})
	if o.exitCode == 0 {
		t.Fatalf("ADD succeeded although the operator routes the pod address elsewhere:\n%s", n.routesOf())
	}
	mustContain(t, "error message", o.cniErr.Msg, "protocol 4", "does not replace")
	if got := n.routesOf(); got != before {
		t.Errorf("routes changed by a failed ADD:\nbefore:\n%s\nafter:\n%s", before, got)
	}
	if r := n.records(); len(r) != 0 {
		t.Errorf("%d records left after a failed ADD", len(r))
	}
	if a := n.allocations(); len(a) != 0 {
		t.Errorf("allocations left after a failed ADD: %v", a)
	}

	// Our own protocol's stale route for the address is taken over.
	mustRun(t, n, "ip", "route", "del", "10.98.0.1/32")
	mustRun(t, n, "ip", "route", "del", "10.98.0.2/32")
	mustRun(t, n, "ip", "route", "add", "10.98.0.1/32", "dev", "up0", "proto", "80", "scope", "link")
	mustRun(t, n, "ip", "route", "add", "10.98.0.2/32", "dev", "up0", "proto", "80", "scope", "link")
	n.run(call{cmd: "ADD", containerID: "own", netns: pod.Path(), ifName: "eth0", conf: conf}).mustOK(t, "ADD over a stale routelet route")
	if got := n.routesOf(); !strings.Contains(got, "dev cali") {
		t.Errorf("no host route on the pod's veth after ADD:\n%s", got)
	}
}
