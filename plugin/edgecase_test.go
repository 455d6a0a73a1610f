package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// TestCheckOddPrevResult: a prevResult with null entries or the wrong shapes
// is a CNI error naming the problem, never a panic.
func TestCheckOddPrevResult(t *testing.T) {
	for _, ver := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		for name, prev := range map[string]string{
			"null interface": `{"cniVersion":"V","interfaces":[null],"ips":[{"address":"10.90.0.1/32","interface":0}]}`,
			"null ip":        `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[null]}`,
			"null route":     `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.90.0.1/32","interface":0}],"routes":[null]}`,
			"route no dst":   `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.90.0.1/32","interface":0}],"routes":[{}]}`,
			"ip no address":  `{"cniVersion":"V","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"interface":0}]}`,
		} {
			t.Run(ver+"/"+name, func(t *testing.T) {
				useFake(t)
				n, _ := unitNode(t)
				// A live attachment, so that CHECK gets as far as the routes.
				if err := cmdAdd(&skel.CmdArgs{ContainerID: "odd", Netns: "/x", IfName: "eth0", StdinData: n.conf(ver, nil)}); err != nil {
					t.Fatal(err)
				}
				conf := withPrev(t, n.conf(ver, nil), []byte(strings.ReplaceAll(prev, `"V"`, `"`+ver+`"`)))
				err := func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("CHECK panicked: %v\n%s", r, debug.Stack())
						}
					}()
					return cmdCheck(&skel.CmdArgs{ContainerID: "odd", Netns: "/x", IfName: "eth0", StdinData: conf})
				}()
				if err == nil {
					t.Errorf("CHECK accepted prevResult %s", prev)
				}
			})
		}
	}
}

// TestDelWithBadDaemonBlocks: DEL and GC must still free an attachment when
// daemon.json (which DEL only reads to learn the blocks) now lists a block
// the IPAM refuses (host bits set, IPv4-mapped, overlapping).
func TestDelWithBadDaemonBlocks(t *testing.T) {
	for name, blocks := range map[string][]string{
		"host bits":   {"10.90.0.5/26"},
		"4in6":        {"::ffff:10.90.0.0/122"},
		"overlapping": {"10.90.0.0/26", "10.90.0.0/24"},
		"too small":   {"10.90.0.0/31"},
	} {
		t.Run(name, func(t *testing.T) {
			f, _ := useFake(t)
			n, _ := unitNode(t)
			conf := n.conf("1.0.0", map[string]any{"ipam": nil})
			st, err := state.Open(n.stateDir)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true, Blocks: []string{"10.90.0.0/26"}}); err != nil {
				t.Fatal(err)
			}
			args := &skel.CmdArgs{ContainerID: "badblocks", Netns: "/x", IfName: "eth0", StdinData: conf}
			if err := cmdAdd(args); err != nil {
				t.Fatal(err)
			}
			if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true, Blocks: blocks}); err != nil {
				t.Fatal(err)
			}
			if err := cmdDel(args); err != nil {
				t.Fatalf("DEL with daemon.json blocks %v: %v", blocks, err)
			}
			if len(f.veths) != 0 || len(n.records()) != 0 || len(n.allocations()) != 0 {
				t.Errorf("after DEL: veths %v, records %d, allocations %v", f.veths, len(n.records()), n.allocations())
			}
			// GC of a stale attachment too.
			if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true, Blocks: []string{"10.90.0.0/26"}}); err != nil {
				t.Fatal(err)
			}
			if err := cmdAdd(args); err != nil {
				t.Fatal(err)
			}
			if err := st.WriteDaemonStatus(&state.DaemonStatus{Ready: true, Blocks: blocks}); err != nil {
				t.Fatal(err)
			}
			gcConf := n.conf("1.0.0", map[string]any{"ipam": nil, "cni.dev/valid-attachments": []any{}})
			if err := cmdGC(&skel.CmdArgs{StdinData: gcConf}); err != nil {
				t.Fatalf("GC with daemon.json blocks %v: %v", blocks, err)
			}
			if len(n.records()) != 0 || len(n.allocations()) != 0 {
				t.Errorf("after GC: records %d, allocations %v", len(n.records()), n.allocations())
			}
		})
	}
}

// fakeIPAM installs an IPAM plugin script that answers ADD with result and
// logs every command it gets; it returns the log path.
func fakeIPAM(t *testing.T, result string) string {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := "#!/bin/sh\necho \"$CNI_COMMAND\" >> " + log + "\ncat >/dev/null\n" +
		"if [ \"$CNI_COMMAND\" = ADD ]; then echo '" + result + "'; fi\n"
	if err := os.WriteFile(filepath.Join(dir, "fakeipam"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CNI_PATH", dir)
	for k, v := range map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "deleg", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0"} {
		t.Setenv(k, v)
	}
	return log
}

// TestDelegatedIPAMUnusableResult: when the delegated IPAM plugin's ADD
// succeeds but its result is unusable (no addresses, null entries, an
// address that is not one), ADD fails with an error and without a panic,
// and the delegated plugin gets a DEL so its reservation does not leak.
func TestDelegatedIPAMUnusableResult(t *testing.T) {
	for name, result := range map[string]string{
		"no ips":      `{"cniVersion":"1.0.0","ips":[]}`,
		"null ip 1.0": `{"cniVersion":"1.0.0","ips":[null]}`,
		"null ip 0.4": `{"cniVersion":"0.4.0","ips":[null]}`,
		"null ip 0.3": `{"cniVersion":"0.3.1","ips":[null]}`,
		"null iface":  `{"cniVersion":"0.4.0","interfaces":[null],"ips":[{"version":"4","address":"10.1.0.5/24"}]}`,
		"null route":  `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.1.0.5/24"}],"routes":[null]}`,
	} {
		t.Run(name, func(t *testing.T) {
			f, out := useFake(t)
			log := fakeIPAM(t, result)
			n, _ := unitNode(t)
			conf := n.conf("1.0.0", map[string]any{"ipam": map[string]any{"type": "fakeipam"}})
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("ADD panicked on IPAM result %s: %v\n%s", result, r, debug.Stack())
					}
				}()
				err = cmdAdd(&skel.CmdArgs{ContainerID: "deleg", Netns: "/x", IfName: "eth0", StdinData: conf})
			}()
			if name == "null route" {
				// Routes of the IPAM result are not used: ADD may succeed.
				if err != nil {
					t.Logf("ADD: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ADD succeeded with IPAM result %s: %s", result, out)
			}
			calls, _ := os.ReadFile(log)
			if !strings.Contains(string(calls), "DEL") {
				t.Errorf("IPAM plugin saw %q: no DEL after its unusable result (reservation leaks)", calls)
			}
			if len(f.veths) != 0 || len(n.records()) != 0 {
				t.Errorf("veths %v records %d left", f.veths, len(n.records()))
			}
		})
	}
}

// TestAttachmentNameCollision: the record file name "<containerID>_<ifName>"
// is the same for (a, b_c) and (a_b, c). The second attachment must not
// overwrite, read or delete the first one's veth, record or allocation: a
// DEL after its failed ADD would otherwise tear down a live pod.
func TestAttachmentNameCollision(t *testing.T) {
	for _, delegate := range []bool{false, true} {
		t.Run(map[bool]string{false: "builtin", true: "delegated"}[delegate], func(t *testing.T) {
			f, _ := useFake(t)
			n, conf := unitNode(t)
			if delegate {
				fakeIPAM(t, `{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}]}`)
				conf = n.conf("1.0.0", map[string]any{"ipam": map[string]any{"type": "fakeipam"}})
			}
			first := &skel.CmdArgs{ContainerID: "a", Netns: "/x1", IfName: "b_c", StdinData: conf}
			second := &skel.CmdArgs{ContainerID: "a_b", Netns: "/x2", IfName: "c", StdinData: conf}
			if err := cmdAdd(first); err != nil {
				t.Fatal(err)
			}
			host := podnet.VethName("cali", "", "", "a", "b_c")
			held := n.allocations()
			_ = cmdAdd(second) // may fail: the names collide
			if err := cmdDel(second); err != nil {
				t.Errorf("DEL of the second attachment: %v", err)
			}
			if _, ok := f.veths[host]; !ok {
				t.Errorf("first attachment's veth %s deleted by the second's ADD/DEL", host)
			}
			st, err := state.Open(n.stateDir)
			if err != nil {
				t.Fatal(err)
			}
			if rec, err := st.GetWorkload("a", "b_c"); err != nil || rec.ContainerID != "a" || rec.HostIface != host {
				t.Errorf("first attachment's record after the second's ADD/DEL: %+v, %v", rec, err)
			}
			if !delegate {
				if got := n.allocations(); len(got[ipam.Attachment{ContainerID: "a", IfName: "b_c"}]) != 2 {
					t.Errorf("first attachment's allocation: before %v, after %v", held, got)
				}
			}
			if err := cmdDel(first); err != nil {
				t.Fatal(err)
			}
			if len(f.veths) != 0 || len(n.records()) != 0 || len(n.allocations()) != 0 {
				t.Errorf("after both DELs: veths %v records %d allocations %v", f.veths, len(n.records()), n.allocations())
			}
		})
	}
}

// TestVethNameCollisionBetweenPods: with a long interfacePrefix only a few
// hash digits remain, and two different pods can get the same host veth
// name. The second ADD must fail naming the clash instead of replacing (and
// so cutting off) the first pod's veth; a new sandbox of the same pod still
// replaces its predecessor's.
func TestVethNameCollisionBetweenPods(t *testing.T) {
	const prefix = "routeletpod" // 11 bytes: 4 hex digits of hash left
	seen := map[string]string{}
	var podA, podB string
	for i := 0; podB == ""; i++ {
		name := fmt.Sprintf("web-%d", i)
		v := podnet.VethName(prefix, "ns", name, "", "eth0")
		if other, ok := seen[v]; ok {
			podA, podB = other, name
		}
		seen[v] = name
	}
	f, _ := useFake(t)
	n, _ := unitNode(t)
	conf := n.conf("1.0.0", map[string]any{"interfacePrefix": prefix})
	a := &skel.CmdArgs{ContainerID: "sandbox-a", Netns: "/xa", IfName: "eth0", Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + podA, StdinData: conf}
	b := &skel.CmdArgs{ContainerID: "sandbox-b", Netns: "/xb", IfName: "eth0", Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + podB, StdinData: conf}
	if err := cmdAdd(a); err != nil {
		t.Fatal(err)
	}
	host := podnet.VethName(prefix, "ns", podA, "", "eth0")
	err := cmdAdd(b)
	if err == nil || !strings.Contains(err.Error(), host) {
		t.Errorf("ADD of pod %s whose veth name %s clashes with pod %s: %v, want an error naming it", podB, host, podA, err)
	}
	if s, ok := f.veths[host]; !ok || s.Netns != "/xa" {
		t.Errorf("pod %s's veth %s replaced by pod %s's ADD: %+v", podA, host, podB, f.veths)
	}
	if err := cmdDel(b); err != nil {
		t.Errorf("DEL after the failed ADD: %v", err)
	}
	if s, ok := f.veths[host]; !ok || s.Netns != "/xa" {
		t.Errorf("pod %s's veth %s gone after pod %s's DEL", podA, host, podB)
	}
	// The same without Kubernetes arguments: names from container IDs.
	seen = map[string]string{}
	var idA, idB string
	for i := 0; idB == ""; i++ {
		id := fmt.Sprintf("ctr-%d", i)
		v := podnet.VethName(prefix, "", "", id, "eth0")
		if other, ok := seen[v]; ok {
			idA, idB = other, id
		}
		seen[v] = id
	}
	plainA := &skel.CmdArgs{ContainerID: idA, Netns: "/pa", IfName: "eth0", StdinData: conf}
	plainB := &skel.CmdArgs{ContainerID: idB, Netns: "/pb", IfName: "eth0", StdinData: conf}
	if err := cmdAdd(plainA); err != nil {
		t.Fatal(err)
	}
	plainHost := podnet.VethName(prefix, "", "", idA, "eth0")
	if err := cmdAdd(plainB); err == nil {
		t.Errorf("ADD of %s whose veth name %s clashes with %s succeeded", idB, plainHost, idA)
	}
	if err := cmdDel(plainB); err != nil {
		t.Errorf("DEL after the failed ADD: %v", err)
	}
	if s, ok := f.veths[plainHost]; !ok || s.Netns != "/pa" {
		t.Errorf("%s's veth %s gone after %s's ADD/DEL: %+v", idA, plainHost, idB, f.veths)
	}

	// A new sandbox of pod A takes the name over, as before.
	a2 := &skel.CmdArgs{ContainerID: "sandbox-a2", Netns: "/xa2", IfName: "eth0", Args: a.Args, StdinData: conf}
	if err := cmdAdd(a2); err != nil {
		t.Errorf("ADD of a new sandbox of pod %s: %v", podA, err)
	}
}

// TestGCReleasesOrphanedAllocations: an ADD killed between IPAM and the
// workload record (a runtime timeout) leaves an allocation no record
// describes. GC must release it once it is older than any ADD can run, and
// must leave a fresh one (an ADD in progress) and the listed ones alone.
func TestGCReleasesOrphanedAllocations(t *testing.T) {
	useFake(t)
	n, conf := unitNode(t)
	conf = n.conf("1.1.0", nil)
	live := &skel.CmdArgs{ContainerID: "live", Netns: "/x", IfName: "eth0", StdinData: conf}
	if err := cmdAdd(live); err != nil {
		t.Fatal(err)
	}
	alloc, err := ipam.New(filepath.Join(n.stateDir, "ipam"), []netip.Prefix{netip.MustParsePrefix("10.90.0.0/26")}, ipam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	killed := ipam.Attachment{ContainerID: "killed", IfName: "eth0"}
	inflight := ipam.Attachment{ContainerID: "inflight", IfName: "eth0"}
	for _, a := range []ipam.Attachment{killed, inflight} {
		if _, err := alloc.Allocate(context.Background(), a, nil); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(n.stateDir, "ipam", "attachments", "killed_eth0.json"), old, old); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m["cni.dev/valid-attachments"] = []map[string]string{{"containerID": "live", "ifname": "eth0"}}
	gcConf, _ := json.Marshal(m)
	if err := cmdGC(&skel.CmdArgs{StdinData: gcConf}); err != nil {
		t.Fatal(err)
	}
	got := n.allocations()
	if got[killed] != nil {
		t.Errorf("GC left the orphaned allocation of a killed ADD: %v", got[killed])
	}
	if got[inflight] == nil || got[ipam.Attachment{ContainerID: "live", IfName: "eth0"}] == nil {
		t.Errorf("GC released an ADD in progress or a live attachment: %v", got)
	}
}

// TestIPv6BelowMinimumMTU: an IPv6 pod needs an MTU of at least 1280. A
// smaller configured MTU is a configuration error (code 7) naming the MTU,
// found before anything is set up, and leaves nothing behind.
func TestIPv6BelowMinimumMTU(t *testing.T) {
	f, _ := useFake(t)
	n, _ := unitNode(t)
	conf := n.conf("1.0.0", map[string]any{"mtu": 1200})
	err := cmdAdd(&skel.CmdArgs{ContainerID: "smallmtu", Netns: "/x", IfName: "eth0", StdinData: conf})
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Msg, "1200") {
		t.Fatalf("ADD with mtu 1200 and an IPv6 block: %v, want code 7 naming 1200", err)
	}
	if len(f.veths) != 0 || len(n.records()) != 0 || len(n.allocations()) != 0 {
		t.Errorf("left behind: veths %v records %d allocations %v", f.veths, len(n.records()), n.allocations())
	}
	// IPv4 only: 1200 is fine.
	conf = n.conf("1.0.0", map[string]any{"mtu": 1200, "ipam": map[string]any{"blocks": []string{"10.90.0.0/26"}}})
	if err := cmdAdd(&skel.CmdArgs{ContainerID: "smallmtu4", Netns: "/x", IfName: "eth0", StdinData: conf}); err != nil {
		t.Errorf("IPv4-only ADD with mtu 1200: %v", err)
	}
}
