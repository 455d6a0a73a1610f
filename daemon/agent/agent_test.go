package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/datastore/file"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/daemon/workloads"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// t0 is the fixed instant the tests that keep a clock of their own start
// from.
var t0 = time.Unix(1700000000, 0)

// fakeRT is an in-memory RouteTable: desired routes per iface, the dirty
// marks and an injectable Apply error.
type fakeRT struct {
	mu       sync.Mutex
	routes   map[string][]routes.Target
	up       map[string]bool
	dirty    map[string]int
	resyncs  int
	applies  int
	applyErr error
	sets     []string // interfaces handed over one by one (SetRoutes); "*all*" for SetAllRoutes
	held     map[string]bool
}

var _ RouteTable = (*fakeRT)(nil)

func newFakeRT() *fakeRT {
	return &fakeRT{routes: map[string][]routes.Target{}, up: map[string]bool{}, dirty: map[string]int{}}
}

func (f *fakeRT) SetAllRoutes(all map[string][]routes.Target) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, "*all*")
	next := map[string][]routes.Target{}
	for iface, ts := range all {
		if len(ts) > 0 {
			next[iface] = slices.Clone(ts)
		}
	}
	changed := !maps.EqualFunc(f.routes, next, func(a, b []routes.Target) bool { return slices.EqualFunc(a, b, routes.Target.Equal) })
	f.routes = next
	return changed
}
func (f *fakeRT) SetRoutes(iface string, ts []routes.Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, iface)
	if len(ts) == 0 {
		delete(f.routes, iface)
		return
	}
	f.routes[iface] = slices.Clone(ts)
}
func (f *fakeRT) Wants(iface string, dst netip.Prefix) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.routes[iface], func(t routes.Target) bool { return t.CIDR == dst })
}
func (f *fakeRT) OnIfaceStateChanged(iface string, up bool) {
	f.mu.Lock()
	f.up[iface] = up
	f.mu.Unlock()
}
func (f *fakeRT) MarkDirty(iface string)            { f.mu.Lock(); f.dirty[iface]++; f.mu.Unlock() }
func (f *fakeRT) QueueResync()                      { f.mu.Lock(); f.resyncs++; f.mu.Unlock() }
func (f *fakeRT) Apply() error                      { f.mu.Lock(); defer f.mu.Unlock(); f.applies++; return f.applyErr }
func (f *fakeRT) RetryAfter() (time.Duration, bool) { return 0, false }
func (f *fakeRT) Hold(iface string, hold bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held == nil {
		f.held = map[string]bool{}
	}
	if hold {
		f.held[iface] = true
	} else {
		delete(f.held, iface)
	}
}
func (f *fakeRT) Stats() routes.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, ts := range f.routes {
		n += len(ts)
	}
	return routes.Stats{Routes: n}
}

// cidrs returns iface's desired CIDRs.
func (f *fakeRT) cidrs(iface string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, t := range f.routes[iface] {
		out = append(out, t.CIDR.String())
	}
	return out
}

type fakeHost struct {
	mu    sync.Mutex
	links map[string]bool
	netns map[string]bool // path → alive
	fail  bool
	dumps int
}

func (h *fakeHost) Links() (map[string]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dumps++
	if h.fail {
		return nil, errors.New("injected")
	}
	out := map[string]string{}
	for n, ok := range h.links {
		if ok {
			out[n] = "veth"
		}
	}
	return out, nil
}
func (h *fakeHost) NetnsGone(path string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.netns[path]
}

type fakeReleaser struct {
	released []string
	err      error
}

func (r *fakeReleaser) Release(_ context.Context, cid, ifn string) error {
	if r.err != nil {
		return r.err
	}
	r.released = append(r.released, cid+"/"+ifn)
	return nil
}

type fixture struct {
	store *state.Store
	rt4   *fakeRT
	rt6   *fakeRT
	host  *fakeHost
	rel   *fakeReleaser
	a     *Agent
	st    *health.Status
	m     *health.Metrics
	// keeper is the keeper's manager (setKeeper), nil without one.
	keeper *KeeperManager
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	s, err := state.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: s, rt4: newFakeRT(), rt6: newFakeRT(), host: &fakeHost{links: map[string]bool{}, netns: map[string]bool{}},
		rel: &fakeReleaser{}, st: health.NewStatus(time.Minute), m: health.NewMetrics()}
	opts := Options{
		Self:        peers.Record{Name: "node-a", HostIPv4: "192.0.2.10", Blocks: []string{"10.244.1.0/24", "fd00:1::/120"}},
		LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/120")},
		PodMTU:      1450, Version: "test", StaticARP: true, LeakGracePeriod: time.Minute,
		Devices: overlay.Devices{VXLAN: "vx-custom", WireGuard: "wg-pods"}.WithDefaults(),
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ds := datastore.Peers{DS: file.New(s, opts.LocalBlocks, log), V: peers.New(peers.Options{Self: peers.Self{Name: "node-a"}, Logger: log})}
	f.a = New(opts, Deps{Workloads: workloads.New(s, log), Peers: ds, Status: s, RT4: f.rt4, RT6: f.rt6, Releaser: f.rel, Host: f.host,
		Health: f.st, Metrics: f.m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return f
}

// setKeeper makes the loop keep the veths with k (Deps.Keeper), the
// silent sysctls every period.
func (f *fixture) setKeeper(k Keeper, period time.Duration) {
	f.keeper = NewKeeperManager(k, KeeperOptions{KeepPeriod: period, Metrics: f.m, Log: f.a.log})
	f.keeper.now = f.a.now
	f.a.managers = managerList(f.a.wl, []Manager{f.keeper})
}

// syncDesired brings the desired routes up to date and hands what
// changed to the managers, as a pass does.
func (f *fixture) syncDesired() bool {
	routed := f.a.wl.syncDesired()
	f.a.workloadsChanged()
	return routed
}

// keep runs the keeper's manager as a pass does (its Apply), its sysctl
// poll queued when poll is set.
func (f *fixture) keep(poll bool) {
	f.a.workloadsChanged()
	f.keeper.poll = f.keeper.poll || poll
	_ = f.keeper.Apply()
}

// run runs the loop, driving managers too, until stop is called or t
// ends; stop returns Run's error, and the loop has returned before t's
// other cleanups run.
func (f *fixture) run(t *testing.T, managers ...Manager) (stop func() error) {
	if f.keeper != nil {
		managers = append(managers, f.keeper)
	}
	f.a.managers = managerList(f.a.wl, managers)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.a.Run(ctx) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { stop() })
	return stop
}

func (f *fixture) put(t testing.TB, cid, iface string, ips ...string) {
	t.Helper()
	w := &state.Workload{ContainerID: cid, IfName: "eth0", HostIface: iface, Netns: "/var/run/netns/" + cid,
		IPs: ips, ContainerMAC: "02:00:00:00:00:01", Created: time.Now()}
	if err := f.store.PutWorkload(w); err != nil {
		t.Fatal(err)
	}
	f.host.mu.Lock()
	f.host.links[iface] = true
	f.host.netns[w.Netns] = true
	f.host.mu.Unlock()
}

func TestFullSyncProgramsRecordsAndBlackholes(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32", "fd00:1::2/128")
	f.put(t, "c2", "cali2", "10.244.1.3/32")
	// A corrupt and an unknown-version record next to good ones.
	dir := f.store.WorkloadsDir()
	os.WriteFile(filepath.Join(dir, "bad_eth0.json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(dir, "v9_eth0.json"), []byte(`{"version":9,"containerID":"v9","ifName":"eth0","hostIface":"cali9","ips":["10.244.1.9/32"]}`), 0o600)

	f.a.fullSync()
	if got := f.rt4.cidrs("cali1"); len(got) != 1 || got[0] != "10.244.1.2/32" {
		t.Errorf("cali1 v4 routes = %v", got)
	}
	if got := f.rt6.cidrs("cali1"); len(got) != 1 || got[0] != "fd00:1::2/128" {
		t.Errorf("cali1 v6 routes = %v", got)
	}
	if got := f.rt4.cidrs("cali2"); len(got) != 1 {
		t.Errorf("cali2 routes = %v", got)
	}
	if got := f.rt4.cidrs("cali9"); len(got) != 0 {
		t.Errorf("unknown-version record served: %v", got)
	}
	if f.rt4.routes["cali1"][0].DestMAC.String() != "02:00:00:00:00:01" {
		t.Errorf("static ARP MAC not set: %+v", f.rt4.routes["cali1"][0])
	}
	bh := f.rt4.routes[routes.InterfaceNone]
	if len(bh) != 1 || bh[0].Type != routes.TypeBlackhole || bh[0].CIDR.String() != "10.244.1.0/24" {
		t.Errorf("v4 blackholes = %+v", bh)
	}
	if got := f.rt6.cidrs(routes.InterfaceNone); len(got) != 1 || got[0] != "fd00:1::/120" {
		t.Errorf("v6 blackholes = %v", got)
	}
	if f.rt4.resyncs != 1 || f.rt4.applies != 1 {
		t.Errorf("resyncs=%d applies=%d, want 1 and 1", f.rt4.resyncs, f.rt4.applies)
	}
	n, err := f.store.GetNode("node-a")
	if err != nil || n.HostIPv4 != "192.0.2.10" {
		t.Errorf("own node record = %+v, %v", n, err)
	}
}

func TestRunReadinessStatusAndEvents(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	if ok, _ := f.st.Ready(); ok {
		t.Fatal("ready before Run")
	}
	// Run watches the records before its first sync.
	stop := f.run(t)
	waitFor(t, "ready", func() bool { ok, _ := f.st.Ready(); return ok })
	ds, err := f.store.ReadDaemonStatus()
	if err != nil || !ds.Ready || ds.PodMTU != 1450 || len(ds.Blocks) != 2 || ds.DaemonVersion != "test" || ds.RouteProtocol != 80 {
		t.Fatalf("daemon.json = %+v, %v", ds, err)
	}
	if ds.VXLANDevice != "vx-custom" || ds.VXLANDeviceV6 != "vxlan-v6.calico" || ds.IPIPDevice != "tunl0" {
		t.Errorf("daemon.json devices = %q, %q, %q, want the configured VXLAN device and the default IPv6 VXLAN and IPIP names", ds.VXLANDevice, ds.VXLANDeviceV6, ds.IPIPDevice)
	}
	if ds.WireGuardDevice != "wg-pods" {
		t.Errorf("daemon.json wireguardDevice = %q, want wg-pods", ds.WireGuardDevice)
	}
	if len(f.rt4.cidrs("cali1")) != 1 {
		t.Error("ready before the record was served")
	}
	// A new record is picked up through the file watcher.
	f.put(t, "c3", "cali3", "10.244.1.4/32")
	waitFor(t, "cali3 route", func() bool { return len(f.rt4.cidrs("cali3")) == 1 })
	// Removing a record removes its routes.
	if err := f.store.DeleteWorkload("c1", "eth0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cali1 routes gone", func() bool { return len(f.rt4.cidrs("cali1")) == 0 })
	// A corrupted record is served as last read and written back.
	os.WriteFile(filepath.Join(f.store.WorkloadsDir(), "c3_eth0.json"), []byte("garbage"), 0o600)
	waitFor(t, "corrupt c3 repaired", func() bool { w, err := f.store.GetWorkload("c3", "eth0"); return err == nil && w.HostIface == "cali3" })
	if len(f.rt4.cidrs("cali3")) != 1 {
		t.Errorf("cali3 routes %v after its record was corrupted, want them kept", f.rt4.cidrs("cali3"))
	}
	// Own node record deleted → rewritten.
	f.store.DeleteNode("node-a")
	waitFor(t, "node record rewritten", func() bool { _, err := f.store.GetNode("node-a"); return err == nil })
	// A peer appears.
	f.store.PutNode(&state.Node{Name: "node-b", HostIPv4: "192.0.2.11", Blocks: []string{"10.244.2.0/24"}})
	waitFor(t, "peer counted", func() bool { return gauge(f.m.Peers) == 1 })

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ds, _ = f.store.ReadDaemonStatus()
	if ds.Ready || ds.Reason == "" {
		t.Errorf("daemon.json after stop = %+v, want not ready with a reason", ds)
	}
}

func TestApplyErrorRetriedAndReported(t *testing.T) {
	f := newFixture(t)
	f.rt4.applyErr = errors.New("injected: netlink busy")
	f.run(t)
	waitFor(t, "ready", func() bool { ok, _ := f.st.Ready(); return ok })
	ds, _ := f.store.ReadDaemonStatus()
	if ds.LastSyncError == "" || !ds.Ready {
		t.Errorf("daemon.json = %+v, want ready with lastSyncError", ds)
	}
	waitFor(t, "retries", func() bool { f.rt4.mu.Lock(); defer f.rt4.mu.Unlock(); return f.rt4.applies >= 3 })
	f.rt4.mu.Lock()
	f.rt4.applyErr = nil
	f.rt4.mu.Unlock()
	waitFor(t, "error cleared", func() bool { ds, _ := f.store.ReadDaemonStatus(); return ds != nil && ds.LastSyncError == "" })
	if counter(f.m.ApplyErrors) < 1 {
		t.Error("apply errors not counted")
	}
}

func TestRouteEventsMarkOnlyTampering(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.a.fullSync()
	rec := &repairCount{}
	f.a.wl.repairs = rec
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name          string
		ev            RouteEvent
		dirty, repair bool
	}{
		{"desired route deleted", RouteEvent{Iface: "cali1", Dst: p("10.244.1.2/32"), Protocol: 80, Deleted: true}, true, true},
		{"echo of our add", RouteEvent{Iface: "cali1", Dst: p("10.244.1.2/32"), Protocol: 80}, false, false},
		{"desired route replaced with another protocol", RouteEvent{Iface: "cali1", Dst: p("10.244.1.2/32"), Protocol: 4}, true, true},
		{"unexpected route added", RouteEvent{Iface: "cali1", Dst: p("10.9.9.9/32"), Protocol: 4}, true, true},
		// The plugin's route of a pod whose record the daemon has not
		// read yet: reconciled, but nobody tampered with anything.
		{"our protocol's route ahead of its record", RouteEvent{Iface: "cali2", Dst: p("10.244.1.3/32"), Protocol: 80}, true, false},
		{"echo of our delete", RouteEvent{Iface: "cali1", Dst: p("10.9.9.9/32"), Protocol: 80, Deleted: true}, false, false},
		{"blackhole deleted", RouteEvent{Iface: routes.InterfaceNone, Dst: p("10.244.1.0/24"), Protocol: 80, Deleted: true}, true, true},
		{"other table", RouteEvent{Iface: "cali1", Dst: p("10.244.1.2/32"), Protocol: 80, Deleted: true, Table: 100}, false, false},
	} {
		iface := tc.ev.Iface
		before, repairsBefore := f.rt4.dirty[iface], rec.n.Load()
		f.a.NotifyRoute(tc.ev)
		f.a.processPending()
		if got := f.rt4.dirty[iface] > before; got != tc.dirty {
			t.Errorf("%s: marked dirty = %v, want %v", tc.name, got, tc.dirty)
		}
		if got := rec.n.Load() > repairsBefore; got != tc.repair {
			t.Errorf("%s: counted as a repair = %v, want %v", tc.name, got, tc.repair)
		}
	}
	// Routes on interfaces the agent's tables do not own are not even
	// queued: foreign ones, and ours on shared devices (the overlay
	// manager's own table watches those).
	f.a.NotifyRoute(RouteEvent{Iface: "eth0", Dst: p("0.0.0.0/0"), Protocol: 4, Deleted: true})
	f.a.NotifyRoute(RouteEvent{Iface: "vxlan.calico", Dst: p("10.244.2.0/24"), Protocol: 80})
	if len(f.a.hints.pending.routeEvs) != 0 {
		t.Errorf("route events on interfaces the agent does not own were queued: %+v", f.a.hints.pending.routeEvs)
	}
	// A deleted static ARP entry marks the workload interface dirty.
	f.a.NotifyNeigh(NeighEvent{Iface: "cali1", IP: netip.MustParseAddr("10.244.1.2"), Deleted: true})
	f.a.processPending()
	if f.rt4.dirty["cali1"] != 4 {
		t.Errorf("neighbour deletion: dirty = %d, want 4", f.rt4.dirty["cali1"])
	}
}

// repairCount counts the route repairs noted.
type repairCount struct{ n atomic.Int64 }

// Add implements RepairRecorder.
func (r *repairCount) Add(object, _ string, n int) {
	if object == "route" {
		r.n.Add(int64(n))
	}
}

func TestLeakCollection(t *testing.T) {
	f := newFixture(t)
	f.put(t, "live", "cali1", "10.244.1.2/32")
	f.put(t, "gone", "cali2", "10.244.1.3/32")
	f.put(t, "vethonly", "cali3", "10.244.1.4/32") // veth gone, netns alive
	f.put(t, "nsonly", "cali4", "10.244.1.5/32")   // netns gone, veth alive
	f.a.fullSync()
	clock := t0
	f.a.now = func() time.Time { return clock }
	f.host.mu.Lock()
	f.host.links["cali2"], f.host.links["cali3"] = false, false
	f.host.netns["/var/run/netns/gone"], f.host.netns["/var/run/netns/nsonly"] = false, false
	f.host.mu.Unlock()

	ctx := context.Background()
	// A failing link listing releases nothing and starts no clock.
	f.host.fail = true
	f.a.wl.collectLeaks(ctx)
	if len(f.a.wl.absentSince) != 0 {
		t.Fatalf("absence recorded without a link listing: %v", f.a.wl.absentSince)
	}
	f.host.fail = false
	f.a.wl.collectLeaks(ctx) // first sighting of the absence
	clock = clock.Add(59 * time.Second)
	f.a.wl.collectLeaks(ctx)
	if len(f.rel.released) != 0 {
		t.Fatalf("released before the grace period: %v", f.rel.released)
	}
	clock = clock.Add(2 * time.Second)
	f.a.wl.collectLeaks(ctx)
	if len(f.rel.released) != 1 || f.rel.released[0] != "gone/eth0" {
		t.Fatalf("released = %v, want [gone/eth0]", f.rel.released)
	}
	if _, err := f.store.GetWorkload("gone", "eth0"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("leaked record still there: %v", err)
	}
	if len(f.rt4.cidrs("cali2")) != 0 {
		t.Error("leaked workload's route still desired")
	}
	for _, cid := range []string{"live", "vethonly", "nsonly"} {
		if _, err := f.store.GetWorkload(cid, "eth0"); err != nil {
			t.Errorf("record %s touched: %v", cid, err)
		}
	}
	if counter(f.m.LeakCollections) != 1 {
		t.Errorf("leak metric = %v", counter(f.m.LeakCollections))
	}

	// A veth that comes back resets the clock; a failing release keeps the record.
	f.put(t, "retry", "cali5", "10.244.1.6/32")
	f.a.fullSync()
	f.host.mu.Lock()
	f.host.links["cali5"] = false
	f.host.netns["/var/run/netns/retry"] = false
	f.host.mu.Unlock()
	f.rel.err = errors.New("injected: ipam lock busy")
	f.a.wl.collectLeaks(ctx)
	clock = clock.Add(2 * time.Minute)
	f.a.wl.collectLeaks(ctx)
	if _, err := f.store.GetWorkload("retry", "eth0"); err != nil {
		t.Errorf("record deleted although release failed: %v", err)
	}
	f.rel.err = nil
	f.a.wl.collectLeaks(ctx)
	if _, err := f.store.GetWorkload("retry", "eth0"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("record not collected after release succeeded: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// value reads a gauge's or counter's current value.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return -1
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

func gauge(g prometheus.Gauge) float64     { return value(g) }
func counter(c prometheus.Counter) float64 { return value(c) }

// TestUnlistableDirKeepsRoutes: a workloads/ that cannot be listed during a
// resync must not withdraw the routes of the records read before.
func TestUnlistableDirKeepsRoutes(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.a.fullSync()
	dir := f.store.WorkloadsDir()
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	f.a.fullSync()
	if got := f.rt4.cidrs("cali1"); len(got) != 1 {
		t.Errorf("routes withdrawn while workloads/ was unlistable: %v", got)
	}
	os.Rename(dir+".away", dir)
	f.store.DeleteWorkload("c1", "eth0")
	f.a.fullSync()
	if got := f.rt4.cidrs("cali1"); len(got) != 0 {
		t.Errorf("routes kept after the record really went: %v", got)
	}
}

// TestLeakCheckIdleCostsNothing: with every workload link known present from
// link events, a leak check makes no kernel call; a lost-events rescan makes
// the next check confirm with one dump.
func TestLeakCheckIdleCostsNothing(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.put(t, "c2", "cali2", "10.244.1.3/32")
	f.a.NotifyLink("cali1", "veth", true, true)
	f.a.NotifyLink("cali2", "veth", true, true)
	f.a.fullSync()
	f.a.wl.collectLeaks(context.Background())
	if f.host.dumps != 0 {
		t.Errorf("idle leak check dumped links %d times", f.host.dumps)
	}
	f.a.NotifyLink("cali2", "veth", false, false)
	f.a.processPending()
	f.a.wl.collectLeaks(context.Background())
	if f.host.dumps != 1 {
		t.Errorf("absent link not confirmed with one dump: %d dumps", f.host.dumps)
	}
	f.a.NotifyRescan()
	f.a.processPending()
	f.a.wl.collectLeaks(context.Background())
	if f.host.dumps != 2 {
		t.Errorf("after a rescan: %d dumps, want 2", f.host.dumps)
	}
}

// TestWatchSurvivesDirectoryRemoval: workloads/ removed and re-created under
// a running loop keeps being watched (no wait for the resync).
func TestWatchSurvivesDirectoryRemoval(t *testing.T) {
	f := newFixture(t)
	f.run(t)
	waitFor(t, "ready", func() bool { ok, _ := f.st.Ready(); return ok })
	if err := os.RemoveAll(f.store.WorkloadsDir()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "directory re-created", func() bool { _, err := os.Stat(f.store.WorkloadsDir()); return err == nil })
	f.put(t, "late", "cali7", "10.244.1.7/32")
	waitFor(t, "record in the re-created directory served", func() bool { return len(f.rt4.cidrs("cali7")) == 1 })
}

// countingManager counts the Apply calls the loop makes.
type countingManager struct {
	mu      sync.Mutex
	applies int
}

func (m *countingManager) OnNodes([]peers.NodeInfo) {}
func (m *countingManager) OnWorkloads(Served)       {}
func (m *countingManager) Apply() error             { m.mu.Lock(); m.applies++; m.mu.Unlock(); return nil }
func (m *countingManager) count() int               { m.mu.Lock(); defer m.mu.Unlock(); return m.applies }

// TestNotifyApplyRunsManagers: a manager's NotifyApply from another goroutine
// makes the idle loop run its Apply again.
func TestNotifyApplyRunsManagers(t *testing.T) {
	f := newFixture(t)
	m := &countingManager{}
	f.run(t, m)
	waitFor(t, "ready", func() bool { ok, _ := f.st.Ready(); return ok })
	before := m.count()
	f.a.NotifyApply()
	waitFor(t, "manager applied after NotifyApply", func() bool { return m.count() > before })
}

// TestWorkloadRecordChecks: records naming an interface routelet does not
// own or addresses outside the node's blocks get no route and are counted;
// a family without local blocks must stay off the node's own address space.
func TestWorkloadRecordChecks(t *testing.T) {
	f := newFixture(t)
	f.a.opts.NodeSpace = nodespace.Host{Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24"), netip.MustParsePrefix("2001:db8::10/64")}}
	f.a.opts.LocalBlocks = f.a.opts.LocalBlocks[:1] // IPv4 only
	f.put(t, "good", "cali1", "10.244.1.2/32", "fd00:9::2/128")
	f.a.NotifyLink("calibr", "bridge", true, true)
	bad := map[string][]string{
		"calibr":  {"10.244.1.3/32"},         // not a veth
		"eth0":    {"10.244.1.4/32"},         // no prefix
		"calipx":  {"10.99.0.1/32"},          // outside the blocks
		"calidef": {"0.0.0.0/0"},             // every address
		"calitun": {"10.244.1.0/32"},         // the block's first (tunnel) address
		"calibc":  {"10.244.1.255/32"},       // the IPv4 block's last address
		"calil":   {"169.254.1.1/32"},        // the pod gateway
		"caliv6":  {"2001:db8::99/128"},      // the node's IPv6 subnet
		"calimix": {"10.244.1.5/32", "::/0"}, // one bad address refuses the record
		"calimc":  {"fd00:9::3/128", "ff02::1/128"},
	}
	i := 0
	for iface, ips := range bad {
		i++
		f.put(t, fmt.Sprintf("bad%d", i), iface, ips...)
	}
	f.a.fullSync()
	if got := f.rt4.cidrs("cali1"); !slices.Equal(got, []string{"10.244.1.2/32"}) {
		t.Errorf("good record's v4 routes = %v", got)
	}
	if got := f.rt6.cidrs("cali1"); !slices.Equal(got, []string{"fd00:9::2/128"}) {
		t.Errorf("good record's v6 routes (no local v6 block) = %v", got)
	}
	for iface := range bad {
		if got := append(f.rt4.cidrs(iface), f.rt6.cidrs(iface)...); len(got) != 0 {
			t.Errorf("refused record on %s got routes %v", iface, got)
		}
	}
	if got := gauge(f.m.BadRecords); got != float64(len(bad)) {
		t.Errorf("bad records = %v, want %d", got, len(bad))
	}
	// Through a file event: one more corrupt record, then it goes away.
	path := filepath.Join(f.store.WorkloadsDir(), "junk_eth0.json")
	os.WriteFile(path, []byte("{"), 0o600)
	f.a.NotifyWorkload("junk_eth0.json")
	f.a.processPending()
	if got := gauge(f.m.BadRecords); got != float64(len(bad)+1) {
		t.Errorf("bad records after a corrupt file event = %v, want %d", got, len(bad)+1)
	}
	os.Remove(path)
	f.a.NotifyWorkload("junk_eth0.json")
	f.a.processPending()
	if got := gauge(f.m.BadRecords); got != float64(len(bad)) {
		t.Errorf("bad records after the file went = %v, want %d", got, len(bad))
	}
}

// TestRecordChangeSetsOnlyItsInterface: a record added, changed or
// removed among many hands the tables only the interfaces whose routes it
// changes (a contested address: both claimants'), not the whole table.
func TestRecordChangeSetsOnlyItsInterface(t *testing.T) {
	f := newFixture(t)
	for i := range 50 {
		f.put(t, fmt.Sprintf("c%d", i), fmt.Sprintf("cali%d", i), fmt.Sprintf("10.244.1.%d/32", i+2))
	}
	f.a.fullSync()
	step := func(what string, want4 []string, change func()) {
		t.Helper()
		f.rt4.sets, f.rt6.sets = nil, nil
		change()
		f.a.processPending()
		if !slices.Equal(f.rt4.sets, want4) || len(f.rt6.sets) > 0 {
			t.Errorf("%s: interfaces set %v (IPv6 %v), want %v", what, f.rt4.sets, f.rt6.sets, want4)
		}
	}
	step("a record added", []string{"cali60"}, func() {
		f.put(t, "c60", "cali60", "10.244.1.100/32")
		f.a.NotifyWorkload("c60_eth0.json")
	})
	step("a record changed", []string{"cali7"}, func() {
		f.put(t, "c7", "cali7", "10.244.1.9/32", "10.244.1.101/32")
		f.a.NotifyWorkload("c7_eth0.json")
	})
	step("a newer record taking an address", []string{"cali3", "cali61"}, func() {
		f.put(t, "c61", "cali61", "10.244.1.5/32") // c3's address, created later
		f.a.NotifyWorkload("c61_eth0.json")
	})
	step("a record removed", []string{"cali9"}, func() {
		if err := f.store.DeleteWorkload("c9", "eth0"); err != nil {
			t.Fatal(err)
		}
		f.a.NotifyWorkload("c9_eth0.json")
	})
	step("an unchanged record read again", nil, func() { f.a.NotifyWorkload("c10_eth0.json") })
	if got := f.rt4.cidrs("cali3"); len(got) != 0 {
		t.Errorf("cali3 still wants %v", got)
	}
}

// orderedPeers is a PeerSource that notes how many Applies the IPv4 table
// had when the peers were read.
type orderedPeers struct {
	PeerSource
	rt      *fakeRT
	applies []int
}

func (o *orderedPeers) Peers() ([]peers.NodeInfo, int, []error, error) {
	o.rt.mu.Lock()
	o.applies = append(o.applies, o.rt.applies)
	o.rt.mu.Unlock()
	return o.PeerSource.Peers()
}

// TestRecordRouteBeforePeers: a pass with a record change and a peer hint
// (e.g. a host change, whose validation reads the node's every link,
// address and route) applies the record's route before it reads the peers;
// a peer hint alone reads them first, as before.
func TestRecordRouteBeforePeers(t *testing.T) {
	f := newFixture(t)
	op := &orderedPeers{PeerSource: f.a.peers.src, rt: f.rt4}
	f.a.peers.src = op
	f.a.fullSync()
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.a.NotifyWorkload("c1_eth0.json")
	f.a.NotifyPeers()
	before := f.rt4.applies
	op.applies = nil
	f.a.processPending()
	if len(op.applies) != 1 || op.applies[0] != before+1 {
		t.Fatalf("peers read after %v table applies, want once after %d", op.applies, before+1)
	}
	if got := f.rt4.cidrs("cali1"); !slices.Equal(got, []string{"10.244.1.2/32"}) {
		t.Fatalf("cali1 wants %v", got)
	}
	f.a.apply()
	f.a.NotifyPeers()
	before, op.applies = f.rt4.applies, nil
	f.a.processPending()
	if len(op.applies) != 1 || op.applies[0] != before {
		t.Fatalf("peer hint alone: peers read after %v table applies, want once after %d", op.applies, before)
	}
}

// TestAddressClaimedTwice: a live veth beats an absent one, then the newer
// record, then the lower container ID; the same whatever the read order.
func TestAddressClaimedTwice(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	recs := []*state.Workload{
		{ContainerID: "live", HostIface: "calilive", IPs: []string{"10.244.1.2/32"}, Created: old},
		{ContainerID: "stale", HostIface: "calistale", IPs: []string{"10.244.1.2/32"}, Created: old.Add(time.Minute)},
		{ContainerID: "older", HostIface: "caliolder", IPs: []string{"10.244.1.3/32"}, Created: old},
		{ContainerID: "newer", HostIface: "calinewer", IPs: []string{"10.244.1.3/32"}, Created: old.Add(time.Minute)},
		{ContainerID: "tie-b", HostIface: "calitieb", IPs: []string{"10.244.1.4/32"}, Created: old},
		{ContainerID: "tie-a", HostIface: "calitiea", IPs: []string{"10.244.1.4/32"}, Created: old},
		{ContainerID: "gone-a", HostIface: "caligonea", IPs: []string{"10.244.1.5/32"}, Created: old},
		{ContainerID: "gone-b", HostIface: "caligoneb", IPs: []string{"10.244.1.5/32"}, Created: old.Add(time.Minute)},
	}
	want := map[string]string{"calilive": "10.244.1.2/32", "calinewer": "10.244.1.3/32", "calitiea": "10.244.1.4/32", "caligoneb": "10.244.1.5/32"}
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {7, 6, 5, 4, 3, 2, 1, 0}, {1, 3, 5, 7, 0, 2, 4, 6}} {
		f := newFixture(t)
		for _, r := range recs {
			if !strings.HasPrefix(r.HostIface, "calistale") && !strings.HasPrefix(r.HostIface, "caligone") {
				f.a.NotifyLink(r.HostIface, "veth", true, true)
			}
		}
		f.a.processPending()
		for i, j := range order {
			r := *recs[j]
			r.IfName = "eth0"
			key := fmt.Sprintf("%d.json", i)
			f.a.wl.workloads[key] = &r
			f.a.wl.changedKeys[key] = struct{}{}
		}
		f.syncDesired()
		for _, r := range recs {
			got := strings.Join(f.rt4.cidrs(r.HostIface), ",")
			if got != want[r.HostIface] {
				t.Errorf("order %v: %s has %q, want %q", order, r.HostIface, got, want[r.HostIface])
			}
		}
		// The live pod's veth goes: the stale record's claim is as good now.
		f.a.NotifyLink("calilive", "veth", false, false)
		f.a.processPending()
		if got := f.rt4.cidrs("calistale"); !slices.Equal(got, []string{"10.244.1.2/32"}) {
			t.Errorf("order %v: after the live veth went, the newer absent record has %v", order, got)
		}
	}
}

// FuzzWorkloadRoutes: whatever a workload record holds, every route the
// agent asks for is on an interface with the prefix and for an address of
// the node's blocks (not a block's reserved address) or, for a family
// without blocks, ordinary unicast off the node's own address space.
func FuzzWorkloadRoutes(f *testing.F) {
	f.Add("cali1", "10.244.1.2/32", "fd00:9::1/128", true)
	f.Add("cali1", "0.0.0.0/0", "::/0", true)
	f.Add("eth0", "192.0.2.20/32", "10.244.1.0/32", false)
	f.Add("calibr", "169.254.1.1/32", "10.244.1.255/24", true)
	f.Fuzz(func(t *testing.T, iface, ip1, ip2 string, veth bool) {
		fx := newFixture(t)
		fx.a.opts.LocalBlocks = fx.a.opts.LocalBlocks[:1]
		fx.a.opts.NodeSpace = nodespace.Host{Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")}}
		kind := "bridge"
		if veth {
			kind = "veth"
		}
		fx.a.NotifyLink(iface, kind, true, true)
		fx.a.processPending()
		fx.a.wl.workloads["w.json"] = &state.Workload{ContainerID: "w", IfName: "eth0", HostIface: iface, IPs: []string{ip1, ip2}}
		fx.syncDesired()
		block := fx.a.opts.LocalBlocks[0]
		for fam, rt := range []*fakeRT{fx.rt4, fx.rt6} {
			for dev, ts := range rt.routes {
				if dev == routes.InterfaceNone {
					continue
				}
				if !strings.HasPrefix(dev, "cali") || !veth {
					t.Fatalf("route on %s (veth %v): %v", dev, veth, ts)
				}
				for _, tg := range ts {
					a := tg.CIDR.Addr()
					switch {
					case fam == 0 && (!block.Contains(a) || a == block.Addr() || a == nodespace.LastAddr(block)):
						t.Fatalf("IPv4 route %s outside %s or reserved", tg.CIDR, block)
					case fam == 1 && (nodespace.SpecialRange(tg.CIDR) != "" || fx.a.opts.NodeSpace.Overlap(tg.CIDR) != ""):
						t.Fatalf("IPv6 route %s in special or node space", tg.CIDR)
					}
				}
			}
		}
	})
}

// TestUnreadableRecordKeepsServing: a live pod's record that cannot be
// read is served as its last good read said, in a pass on its own and in
// a full read: one emptied or holding garbage is written back from that
// read (counted as a "record" repair), one of another version is left as
// it is. A record unreadable from the start has no good read: the tables
// keep the routes of every veth no served record names until it can be
// read.
func TestUnreadableRecordKeepsServing(t *testing.T) {
	f := newFixture(t)
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.put(t, "c2", "cali2", "10.244.1.3/32")
	f.a.wl.links["cali1"], f.a.wl.links["cali2"], f.a.wl.links["cali9"] = "veth", "veth", "veth"
	f.a.fullSync()
	dir := f.store.WorkloadsDir()
	future := `{"version":9,"containerID":"c2","ifName":"eth0","hostIface":"cali2","ips":["10.244.1.3/32"]}`
	served := func(when string) {
		t.Helper()
		if got := f.rt4.cidrs("cali1"); !slices.Equal(got, []string{"10.244.1.2/32"}) {
			t.Errorf("%s: cali1 routes %v, want the last good read's", when, got)
		}
		if got := f.rt4.cidrs("cali2"); !slices.Equal(got, []string{"10.244.1.3/32"}) {
			t.Errorf("%s: cali2 routes %v, want the last good read's", when, got)
		}
	}
	for i, full := range []bool{false, true} {
		if err := os.WriteFile(filepath.Join(dir, "c1_eth0.json"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "c2_eth0.json"), []byte(future), 0o600); err != nil {
			t.Fatal(err)
		}
		when := fmt.Sprintf("full=%v", full)
		if full {
			f.a.fullSync()
		} else {
			f.a.wl.reloadWorkload("c1_eth0.json")
			f.a.wl.reloadWorkload("c2_eth0.json")
			f.syncDesired()
		}
		served(when)
		if w, err := f.store.GetWorkload("c1", "eth0"); err != nil || w.HostIface != "cali1" {
			t.Errorf("%s: emptied record after the pass: %+v, %v; want it written back", when, w, err)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, "c2_eth0.json")); string(data) != future {
			t.Errorf("%s: a record of another version was rewritten: %s", when, data)
		}
		if got := counter(f.m.Repairs.WithLabelValues("record")); got != float64(i+1) {
			t.Errorf("%s: record repairs %v, want %d", when, got, i+1)
		}
		if len(f.rt4.held) != 0 {
			t.Errorf("%s: held %v with every unreadable record served", when, f.rt4.held)
		}
		f.a.wl.reloadWorkload("c1_eth0.json") // the repair's own event
		if got := gauge(f.m.BadRecords); got != 1 {
			t.Errorf("%s: bad records %v after the repair, want 1 (the other version's, until it can be read)", when, got)
		}
		served(when + ", repaired")
	}

	// A start with a record no good read came from: cali9's routes (it
	// may be that record's veth) are kept, the named veths are served.
	if err := os.WriteFile(filepath.Join(dir, "c9_eth0.json"), []byte("{trunc"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newFixture(t)
	g.store, g.a.wl.wls = f.store, f.a.wl.wls
	g.a.wl.links["cali1"], g.a.wl.links["cali2"], g.a.wl.links["cali9"] = "veth", "veth", "veth"
	g.a.fullSync()
	if !maps.Equal(g.rt4.held, map[string]bool{"cali2": true, "cali9": true}) || !maps.Equal(g.rt6.held, g.rt4.held) {
		t.Errorf("held %v and %v; want the veths no served record names (cali2: its record is of another version)", g.rt4.held, g.rt6.held)
	}
	if err := f.store.PutWorkload(&state.Workload{ContainerID: "c9", IfName: "eth0", HostIface: "cali9", Netns: "/x",
		IPs: []string{"10.244.1.9/32"}, ContainerMAC: "02:00:00:00:00:09", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "c2_eth0.json")); err != nil {
		t.Fatal(err)
	}
	g.a.wl.reloadWorkload("c9_eth0.json")
	g.a.wl.reloadWorkload("c2_eth0.json")
	g.syncDesired()
	if len(g.rt4.held) != 0 || len(g.rt6.held) != 0 {
		t.Errorf("held %v, %v once every record can be read", g.rt4.held, g.rt6.held)
	}
	if got := g.rt4.cidrs("cali9"); !slices.Equal(got, []string{"10.244.1.9/32"}) {
		t.Errorf("cali9 routes %v once its record can be read", got)
	}
}

// servedManager records what OnWorkloads handed it, as the served
// records' keys with their routed addresses.
type servedManager struct {
	countingManager
	calls []string
}

func (m *servedManager) OnWorkloads(s Served) {
	keys := slices.Sorted(maps.Keys(s.Changed))
	if s.All {
		keys = slices.Sorted(s.Keys())
	}
	var parts []string
	for _, key := range keys {
		_, _, routed, ok := s.Record(key)
		parts = append(parts, fmt.Sprintf("%s:%v:%v", key, ok, routed))
	}
	m.calls = append(m.calls, fmt.Sprintf("all=%v %s", s.All, strings.Join(parts, " ")))
}

// TestManagersHearOfWorkloads: every manager is told of the served
// workloads: all of them after a full read, then only the records that
// changed (a refused record is not served), and nothing on a pass that
// changed none.
func TestManagersHearOfWorkloads(t *testing.T) {
	f := newFixture(t)
	m := &servedManager{}
	f.a.managers = managerList(f.a.wl, []Manager{m})
	f.put(t, "c1", "cali1", "10.244.1.2/32")
	f.put(t, "c2", "cali2", "10.244.1.3/32")
	f.a.fullSync()
	f.put(t, "c2", "eth9", "10.244.1.3/32") // refused: not a routelet interface
	f.a.NotifyWorkload("c2_eth0.json")
	f.a.processPending()
	f.a.processPending()
	want := []string{
		"all=true c1_eth0.json:true:[10.244.1.2] c2_eth0.json:true:[10.244.1.3]",
		"all=false c2_eth0.json:false:[]",
	}
	if !slices.Equal(m.calls, want) {
		t.Fatalf("OnWorkloads calls\n%q\nwant\n%q", m.calls, want)
	}
}
