package routes

import (
	"fmt"
	"strings"
	"testing"
)

// foreignKernelEnv is a namespace holding what a node has before routelet
// comes: an uplink eth0 with 192.168.0.10/24 and fd00:1::10/64 (connected
// routes, proto kernel), a workload veth cali1 and a shared vxlan.calico.
func foreignKernelEnv(t *testing.T) *kernelEnv {
	e := newKernelEnv(t)
	e.veth("cali1", "pod1")
	e.dummy("eth0")
	e.dummy("vxlan.calico")
	e.ip("addr", "add", "192.168.0.10/24", "dev", "eth0")
	e.ip("-6", "addr", "add", "fd00:1::10/64", "dev", "eth0", "nodad")
	return e
}

// TestKernelForeignRoutesSurvive: a connected route, a default route (proto
// boot and static) and operators' static routes survive a pod route, a
// blackhole and an overlay route under the same kernel key; Apply reports
// each, and programs ours once the other route is gone. Both ways in are
// covered: the first (full) Apply, and an incremental one whose exclusive
// create meets the route.
func TestKernelForeignRoutesSurvive(t *testing.T) {
	type tc struct {
		name    string
		v       int
		setup   []string // ip commands making the other route (none: the connected route)
		remove  []string // ip command removing it again
		show    string   // prefix as "ip route" prints it
		iface   string
		target  string // CIDR
		typ     TargetType
		gateway string // TypeGateway
	}
	var cases []tc
	for _, d := range []struct {
		iface   string
		typ     TargetType
		gateway string
	}{{"cali1", TypeLink, ""}, {InterfaceNone, TypeBlackhole, ""}, {"vxlan.calico", TypeGateway, "10.1.0.0"}} {
		cases = append(cases,
			tc{name: "connected", v: 4, remove: []string{"addr", "del", "192.168.0.10/24", "dev", "eth0"},
				show: "192.168.0.0/24 dev eth0 proto kernel scope link src 192.168.0.10", target: "192.168.0.0/24"},
			tc{name: "default boot", v: 4, setup: []string{"route", "add", "default", "via", "192.168.0.1"},
				remove: []string{"route", "del", "default", "via", "192.168.0.1"},
				show:   "default via 192.168.0.1 dev eth0", target: "0.0.0.0/0"},
			tc{name: "default static", v: 4, setup: []string{"route", "add", "default", "via", "192.168.0.1", "proto", "static"},
				remove: []string{"route", "del", "default", "via", "192.168.0.1"},
				show:   "default via 192.168.0.1 dev eth0 proto static", target: "0.0.0.0/0"},
			tc{name: "static /32", v: 4, setup: []string{"route", "add", "10.244.0.5/32", "via", "192.168.0.1", "proto", "static"},
				remove: []string{"route", "del", "10.244.0.5/32"},
				show:   "10.244.0.5 via 192.168.0.1 dev eth0 proto static", target: "10.244.0.5/32"},
			tc{name: "IPv6 default static", v: 6, setup: []string{"-6", "route", "add", "default", "via", "fd00:1::1", "proto", "static"},
				remove: []string{"-6", "route", "del", "default", "via", "fd00:1::1"},
				show:   "default via fd00:1::1 dev eth0 proto static metric 1024 pref medium", target: "::/0"},
			tc{name: "IPv6 static block", v: 6, setup: []string{"-6", "route", "add", "fd00:9::/64", "via", "fd00:1::1", "proto", "static"},
				remove: []string{"-6", "route", "del", "fd00:9::/64"},
				show:   "fd00:9::/64 via fd00:1::1 dev eth0 proto static metric 1024 pref medium", target: "fd00:9::/64"},
		)
		for i := len(cases) - 6; i < len(cases); i++ {
			cases[i].iface, cases[i].typ, cases[i].gateway = d.iface, d.typ, d.gateway
			if d.gateway != "" && cases[i].v == 6 {
				cases[i].gateway = "fd00:5::"
			}
			cases[i].name = fmt.Sprintf("%s vs %s", d.typ, cases[i].name)
		}
	}
	for _, c := range cases {
		for _, path := range []string{"full", "incremental"} {
			t.Run(c.name+"/"+path, func(t *testing.T) {
				e := foreignKernelEnv(t)
				rt := e.table(usualConfig(c.v), nil)
				if path == "incremental" {
					mustApply(t, rt)
				}
				if c.setup != nil {
					e.ip(c.setup...)
				}
				family := fmt.Sprintf("-%d", c.v)
				holds := func() bool {
					for _, l := range strings.Split(e.ip(family, "route", "show"), "\n") {
						if strings.TrimSpace(l) == c.show {
							return true
						}
					}
					return false
				}
				if !holds() {
					t.Fatalf("setup: no %q in\n%s", c.show, e.ip(family, "route", "show"))
				}
				target := Target{CIDR: pfx(c.target), Type: c.typ}
				if c.gateway != "" {
					target.Gateway, target.OnLink = addr(c.gateway), true
				}
				rt.SetRoutes(c.iface, []Target{target})
				for i := range 2 {
					err := rt.Apply()
					if !holds() {
						t.Fatalf("Apply #%d replaced %q:\n%s", i+1, c.show, e.ip(family, "route", "show"))
					}
					if err == nil || !strings.Contains(err.Error(), c.target) {
						t.Fatalf("Apply #%d = %v, want an error naming %s", i+1, err, c.target)
					}
				}
				if st := rt.Stats(); st.Conflicts != 1 || st.ConflictsTotal != 1 {
					t.Fatalf("Stats %+v: want the conflict reported once", st)
				}
				e.ip(c.remove...)
				mustApply(t, rt)
				shown := strings.TrimSuffix(c.target, "/32")
				if pfx(c.target).Bits() == 0 {
					shown = "default"
				}
				if out := e.ip(family, "route", "show", "proto", "80"); !strings.Contains(out, shown) {
					t.Fatalf("ours not programmed after the other route went:\n%s", out)
				}
				if st := rt.Stats(); st.Conflicts != 0 {
					t.Fatalf("Stats %+v after the conflict cleared", st)
				}
			})
		}
	}
}

// TestKernelForeignRoutesPipelined: many desired routes in one pipelined
// exclusive batch, some of whose keys operators' static routes hold: each
// of those fails on its own (EEXIST) and stays the operator's, every other
// route of the batch is programmed, and routes of ours already under a key
// are still replaced in place.
func TestKernelForeignRoutesPipelined(t *testing.T) {
	e := foreignKernelEnv(t)
	rt := e.table(usualConfig(4), nil)
	mustApply(t, rt)
	// Ours, written behind the table's back (as the CNI plugin does).
	e.ip("route", "add", "10.244.0.1/32", "dev", "cali1", "proto", "80", "scope", "link", "mtu", "1400")
	var targets []Target
	for i := 1; i <= 40; i++ {
		targets = append(targets, Target{CIDR: pfx(fmt.Sprintf("10.244.0.%d/32", i))})
		if i%10 == 5 {
			e.ip("route", "add", fmt.Sprintf("10.244.0.%d/32", i), "via", "192.168.0.1", "proto", "static")
		}
	}
	rt.SetRoutes("cali1", targets)
	err := rt.Apply()
	if err == nil {
		t.Fatal("Apply reported no conflict")
	}
	for _, ip := range []string{"10.244.0.5/32", "10.244.0.15/32", "10.244.0.25/32", "10.244.0.35/32"} {
		if !strings.Contains(err.Error(), ip) {
			t.Errorf("error does not name %s: %v", ip, err)
		}
	}
	static := strings.Split(strings.TrimSpace(e.ip("-4", "route", "show", "proto", "static")), "\n")
	if len(static) != 4 {
		t.Fatalf("operator's static routes now:\n%s", strings.Join(static, "\n"))
	}
	ours := strings.Split(strings.TrimSpace(e.ip("-4", "route", "show", "dev", "cali1", "proto", "80")), "\n")
	if len(ours) != 36 || !slicesContains(ours, "10.244.0.1 scope link") {
		t.Fatalf("%d routes on cali1 (want 36, the plugin's one replaced in place):\n%s", len(ours), strings.Join(ours, "\n"))
	}
	if st := rt.Stats(); st.Conflicts != 4 || st.Routes != 36 {
		t.Fatalf("Stats %+v: want 4 conflicts, 36 routes", st)
	}
}

// slicesContains reports whether lines holds s (spaces trimmed).
func slicesContains(lines []string, s string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) == s {
			return true
		}
	}
	return false
}
