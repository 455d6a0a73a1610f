package agent

import (
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// fakeKeeper records what the loop hands the keeper and reports canned
// repairs.
type fakeKeeper struct {
	mu          sync.Mutex
	veths       []podnet.HostVeth
	sets        int // SetVeths and UpdateVeths calls
	links       []string
	neighs      []string
	sysctlHints []string // SysctlsChanged names
	all         int
	allVeths    int // veths handed over when CheckAll was last called
	checks      int
	sysctls     int // Checks with poll set
	repairs     podnet.Repairs
	guardChecks int            // CheckGuards calls
	guards      podnet.Repairs // what the next CheckGuards reports
}

func (k *fakeKeeper) SetVeths(vs []podnet.HostVeth) {
	k.mu.Lock()
	k.veths = vs
	k.sets++
	k.mu.Unlock()
}
func (k *fakeKeeper) UpdateVeths(set []podnet.HostVeth, gone []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.veths = slices.DeleteFunc(k.veths, func(v podnet.HostVeth) bool {
		return slices.Contains(gone, v.Name) || slices.ContainsFunc(set, func(s podnet.HostVeth) bool { return s.Name == v.Name })
	})
	k.veths = append(k.veths, set...)
	slices.SortFunc(k.veths, func(a, b podnet.HostVeth) int { return strings.Compare(a.Name, b.Name) })
	k.sets++
}
func (k *fakeKeeper) LinkChanged(name string)    { k.note(&k.links, name) }
func (k *fakeKeeper) NeighChanged(name string)   { k.note(&k.neighs, name) }
func (k *fakeKeeper) SysctlsChanged(name string) { k.note(&k.sysctlHints, name) }

// note appends a hinted name to one of k's lists.
func (k *fakeKeeper) note(list *[]string, name string) {
	k.mu.Lock()
	*list = append(*list, name)
	k.mu.Unlock()
}
func (k *fakeKeeper) CheckGuards() (podnet.Repairs, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.guardChecks++
	r := k.guards
	k.guards = podnet.Repairs{}
	return r, nil
}
func (k *fakeKeeper) CheckAll() { k.mu.Lock(); k.all++; k.allVeths = len(k.veths); k.mu.Unlock() }
func (k *fakeKeeper) Check(poll bool) (podnet.Repairs, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checks++
	if poll {
		k.sysctls++
	}
	r := k.repairs
	k.repairs = podnet.Repairs{}
	return r, nil
}

// TestKeeperHook: the loop hands the prefixed workloads' veths (with their
// IPv6 addresses and MAC) to the keeper, forwards link, neighbour and
// netconf events (of workload interfaces and the node) and full syncs,
// ticks the sysctl poll, and counts the repairs.
func TestKeeperHook(t *testing.T) {
	f := newFixture(t)
	k := &fakeKeeper{repairs: podnet.Repairs{Sysctls: 2, Links: 1, Neighbours: 3}}
	f.setKeeper(k, 0)
	if f.keeper.keepPeriod != DefaultKeepPeriod {
		t.Fatalf("keep period %s, want %s", f.keeper.keepPeriod, DefaultKeepPeriod)
	}
	f.setKeeper(k, 10*time.Millisecond)
	f.put(t, "c1", "cali1", "10.244.1.2/32", "fd00:1::2/128")
	f.put(t, "c2", "cali2", "10.244.1.3/32")
	f.put(t, "c3", "eth9", "10.244.1.4/32")
	f.run(t)
	waitFor(t, "veths handed over", func() bool { k.mu.Lock(); defer k.mu.Unlock(); return len(k.veths) == 2 })
	k.mu.Lock()
	v := k.veths
	k.mu.Unlock()
	if v[0].Name != "cali1" || !v[0].IPv6 || len(v[0].Neighbours) != 1 || v[0].Neighbours[0].String() != "fd00:1::2" ||
		v[0].MAC.String() != "02:00:00:00:00:01" || v[1].Name != "cali2" || v[1].IPv6 || len(v[1].Neighbours) != 0 {
		t.Fatalf("veths %+v", v)
	}
	f.a.NotifyLink("cali1", "veth", false, true)
	f.a.NotifyNeigh(NeighEvent{Iface: "cali1", Deleted: true})
	f.a.OnNetconf(netwatch.NetconfEvent{Iface: "cali2"})
	f.a.OnNetconf(netwatch.NetconfEvent{Iface: "eth9"})
	f.a.OnNetconf(netwatch.NetconfEvent{IPv6: true})
	waitFor(t, "events forwarded", func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return slices.Contains(k.links, "cali1") && slices.Contains(k.neighs, "cali1") && k.all >= 1 && k.sysctls >= 2 &&
			slices.Contains(k.sysctlHints, "cali2") && slices.Contains(k.sysctlHints, "")
	})
	k.mu.Lock()
	if slices.Contains(k.sysctlHints, "eth9") {
		t.Errorf("sysctl hint for an interface without the prefix: %q", k.sysctlHints)
	}
	k.mu.Unlock()
	waitFor(t, "repairs counted", func() bool {
		return repairs(f, "sysctl") == 2 && repairs(f, "link") == 1 && repairs(f, "neigh") == 3
	})
}

// TestGuardTick: with a guard period the loop checks the pod guards on
// their own tick, each served veth handed over with the addresses routed
// to it (the guard's sources: both families), and counts the repairs as
// object="guard"; without one it never does.
func TestGuardTick(t *testing.T) {
	f := newFixture(t)
	k := &fakeKeeper{guards: podnet.Repairs{Guards: 2}}
	f.setKeeper(k, time.Hour)
	f.keeper.guardPeriod = 10 * time.Millisecond
	f.put(t, "c1", "cali1", "10.244.1.2/32", "fd00:1::2/128")
	f.run(t)
	waitFor(t, "guard checks", func() bool { k.mu.Lock(); defer k.mu.Unlock(); return k.guardChecks >= 3 })
	k.mu.Lock()
	v := k.veths
	k.mu.Unlock()
	if len(v) != 1 || len(v[0].Addrs) != 2 || v[0].Addrs[0].String() != "10.244.1.2" || v[0].Addrs[1].String() != "fd00:1::2" {
		t.Fatalf("veths %+v, want cali1 with both addresses", v)
	}
	waitFor(t, "guard repairs counted", func() bool { return repairs(f, "guard") == 2 })

	g := newFixture(t)
	k2 := &fakeKeeper{}
	g.setKeeper(k2, 10*time.Millisecond)
	g.run(t)
	waitFor(t, "sysctl polls", func() bool { k2.mu.Lock(); defer k2.mu.Unlock(); return k2.sysctls >= 3 })
	k2.mu.Lock()
	defer k2.mu.Unlock()
	if k2.guardChecks != 0 {
		t.Errorf("%d guard checks without a guard period", k2.guardChecks)
	}
}

// TestKeeperVethsOnlyWhenRecordsChange: the loop hands the veths over
// again only when what it would hand changed — a record added, changed,
// removed or refused, an IPv6 address routed elsewhere — and not on a pass
// that changed nothing of it.
func TestKeeperVethsOnlyWhenRecordsChange(t *testing.T) {
	f := newFixture(t)
	k := &fakeKeeper{}
	f.setKeeper(k, 0)
	f.put(t, "c1", "cali1", "10.244.1.2/32", "fd00:1::2/128")
	f.put(t, "c2", "cali2", "10.244.1.3/32")
	f.a.fullSync()
	f.keep(false) // the end of the loop's pass, where the veths are handed over
	names := func() []string {
		var out []string
		for _, v := range k.veths {
			out = append(out, fmt.Sprintf("%s%v", v.Name, v.Neighbours))
		}
		return out
	}
	step := func(what string, sets int, want ...string) {
		t.Helper()
		if k.sets != sets || !slices.Equal(names(), want) {
			t.Fatalf("%s: %d hand-overs of %v; want %d of %v", what, k.sets, names(), sets, want)
		}
	}
	step("first sync", 1, "cali1[fd00:1::2]", "cali2[]")
	f.syncDesired()
	f.keep(false)
	step("a pass with nothing changed", 1, "cali1[fd00:1::2]", "cali2[]")
	f.put(t, "c3", "cali3", "10.244.1.4/32", "fd00:1::2/128") // claims c1's IPv6 address, created later: wins it
	f.a.NotifyWorkload("c3_eth0.json")
	f.a.processPending()
	f.keep(false)
	step("a record claiming an address", 2, "cali1[]", "cali2[]", "cali3[fd00:1::2]")
	f.a.wl.setLink("cali2", "bridge") // refused: not a veth
	f.syncDesired()
	f.keep(false)
	step("a record refused", 3, "cali1[]", "cali3[fd00:1::2]")
	if err := f.store.DeleteWorkload("c3", "eth0"); err != nil {
		t.Fatal(err)
	}
	f.a.NotifyWorkload("c3_eth0.json")
	f.a.processPending()
	f.keep(false)
	step("a record removed", 4, "cali1[fd00:1::2]")
}

// TestFullSyncChecksTheVethsItRead: a full sync hands the keeper the veths
// of the records it read before CheckAll, so the start-up sync (every veth
// new) re-asserts every veth's settings at once, not at the next poll.
func TestFullSyncChecksTheVethsItRead(t *testing.T) {
	f := newFixture(t)
	k := &fakeKeeper{}
	f.setKeeper(k, 0)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.put(t, "c2", "cali2", "10.244.1.3/32")
	f.a.fullSync()
	if k.all != 1 || k.allVeths != 2 {
		t.Fatalf("full sync: CheckAll %d times with %d veths handed over; want once, with both", k.all, k.allVeths)
	}
}

// repairs reads routelet_repairs_total{object}.
func repairs(f *fixture, object string) float64 {
	var m dto.Metric
	if err := f.m.Repairs.WithLabelValues(object).Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestKeeperVethsIncrementalMatchesFull: after random record and link
// changes, what the keeper was handed one change at a time (the addresses
// each pod guard lets through, the IPv6 neighbours) is what the whole list
// derived from scratch (DesiredRoutes) would be.
func TestKeeperVethsIncrementalMatchesFull(t *testing.T) {
	f := newFixture(t)
	k := &fakeKeeper{}
	f.setKeeper(k, 0)
	f.a.fullSync()
	rng := rand.New(rand.NewPCG(7, 8))
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	byName := func(vs []podnet.HostVeth) map[string]string {
		out := map[string]string{}
		for _, v := range vs { // of one name, the later
			out[v.Name] = fmt.Sprintf("%v %v %v %s", v.IPv6, v.Addrs, v.Neighbours, v.MAC)
		}
		return out
	}
	for step := range 2000 {
		for range 1 + rng.IntN(3) {
			if rng.IntN(4) == 0 {
				f.a.wl.setLink(pick("cali1", "cali2", "cali3"), pick("veth", "veth", "bridge"))
				continue
			}
			cid, ifName := pick("a", "b", "c", "d"), pick("eth0", "net1")
			key := cid + "_" + ifName
			f.a.wl.changedKeys[key] = struct{}{}
			if rng.IntN(3) == 0 {
				delete(f.a.wl.workloads, key)
				continue
			}
			w := &state.Workload{ContainerID: cid, IfName: ifName, HostIface: pick("cali1", "cali2", "cali3", "eth0"),
				ContainerMAC: pick("02:00:00:00:00:01", "02:00:00:00:00:02"), Created: t0.Add(time.Duration(rng.IntN(3)) * time.Second)}
			for range rng.IntN(3) {
				w.IPs = append(w.IPs, pick("10.244.1.2/32", "10.244.1.3/32", "fd00:1::2/128", "fd00:1::3/128", "10.9.0.1/32"))
			}
			f.a.wl.workloads[key] = w
		}
		f.syncDesired()
		f.keep(false)
		d := DesiredRoutes(RouteInput{Workloads: f.a.wl.workloads, Links: f.a.wl.links, LocalBlocks: f.a.opts.LocalBlocks,
			IfacePrefix: "cali", StaticARP: true})
		var want []podnet.HostVeth
		for _, key := range slices.Sorted(maps.Keys(f.a.wl.workloads)) {
			w := f.a.wl.workloads[key]
			_, bad := d.Refused[key]
			if _, superseded := d.Superseded[key]; bad || superseded {
				continue
			}
			v := podnet.HostVeth{Name: w.HostIface}
			v.MAC, _ = net.ParseMAC(w.ContainerMAC)
			for _, s := range w.IPs {
				a := netip.MustParsePrefix(s).Addr()
				if d.Owner[a] == key && !slices.Contains(v.Addrs, a) {
					v.Addrs = append(v.Addrs, a)
				}
				if a.Is6() {
					v.IPv6 = true
					if d.Owner[a] == key && !slices.Contains(v.Neighbours, a) {
						v.Neighbours = append(v.Neighbours, a)
					}
				}
			}
			want = append(want, v)
		}
		k.mu.Lock()
		got := byName(k.veths)
		k.mu.Unlock()
		if !maps.Equal(got, byName(want)) {
			t.Fatalf("step %d: keeper has %v, want %v", step, got, byName(want))
		}
	}
}

// TestRecreatedSandboxOwnsVeth: when a pod's sandbox is made again (same
// host veth name, new container ID) while the old sandbox's record stays,
// the newer record alone decides the veth's routes and its guard's
// sources, whichever key sorts first, after a full read and after the new
// record arrives on its own.
func TestRecreatedSandboxOwnsVeth(t *testing.T) {
	for _, full := range []bool{true, false} {
		t.Run(fmt.Sprintf("full=%v", full), func(t *testing.T) {
			f := newFixture(t)
			k := &fakeKeeper{}
			f.setKeeper(k, 0)
			old := &state.Workload{ContainerID: "zold", IfName: "eth0", HostIface: "cali1", Netns: "/var/run/netns/old",
				IPs: []string{"10.244.1.2/32", "fd00:1::2/128"}, ContainerMAC: "02:00:00:00:00:01", Created: t0}
			if err := f.store.PutWorkload(old); err != nil {
				t.Fatal(err)
			}
			f.a.wl.links["cali1"] = "veth"
			f.a.fullSync()
			f.keep(false)
			nw := &state.Workload{ContainerID: "anew", IfName: "eth0", HostIface: "cali1", Netns: "/var/run/netns/new",
				IPs: []string{"10.244.1.3/32"}, ContainerMAC: "02:00:00:00:00:02", Created: t0.Add(time.Minute)}
			if err := f.store.PutWorkload(nw); err != nil {
				t.Fatal(err)
			}
			if full {
				f.a.fullSync()
			} else {
				f.a.wl.reloadWorkload("anew_eth0.json")
				f.syncDesired()
			}
			f.keep(false)
			if got := f.rt4.cidrs("cali1"); !slices.Equal(got, []string{"10.244.1.3/32"}) {
				t.Errorf("IPv4 routes on cali1 %v, want only the new sandbox's", got)
			}
			if got := f.rt6.cidrs("cali1"); len(got) != 0 {
				t.Errorf("IPv6 routes on cali1 %v, want none (the old sandbox's)", got)
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			if len(k.veths) != 1 || k.veths[0].Name != "cali1" || fmt.Sprint(k.veths[0].Addrs) != "[10.244.1.3]" ||
				k.veths[0].IPv6 || k.veths[0].MAC.String() != "02:00:00:00:00:02" {
				t.Errorf("keeper holds %+v, want cali1 with the new sandbox's address and MAC", k.veths)
			}
		})
	}
}

// TestKeeperCheckTicks: the keeper's check runs at the shorter of its two
// periods and queues the sysctl poll and the guard check each when due.
func TestKeeperCheckTicks(t *testing.T) {
	k := &fakeKeeper{}
	clock := t0
	m := NewKeeperManager(k, KeeperOptions{KeepPeriod: 4 * time.Second, GuardPeriod: 2 * time.Second, Metrics: health.NewMetrics(), Log: slog.New(slog.DiscardHandler)})
	m.now = func() time.Time { return clock }
	if m.CheckPeriod() != 2*time.Second {
		t.Fatalf("check period %s, want the guard period", m.CheckPeriod())
	}
	var got []string
	for range 4 {
		clock = clock.Add(2 * time.Second)
		m.QueueCheck()
		got = append(got, fmt.Sprintf("poll=%v guards=%v", m.poll, m.guards))
		_ = m.Apply()
	}
	want := []string{"poll=false guards=true", "poll=true guards=true", "poll=false guards=true", "poll=true guards=true"}
	if !slices.Equal(got, want) {
		t.Fatalf("ticks %q, want %q", got, want)
	}
	if k.sysctls != 2 || k.guardChecks != 4 {
		t.Errorf("%d sysctl polls and %d guard checks, want 2 and 4", k.sysctls, k.guardChecks)
	}
	if n := NewKeeperManager(k, KeeperOptions{Metrics: health.NewMetrics(), Log: slog.New(slog.DiscardHandler)}); n.CheckPeriod() != DefaultKeepPeriod {
		t.Errorf("check period without a guard period %s, want %s", n.CheckPeriod(), DefaultKeepPeriod)
	}
}
