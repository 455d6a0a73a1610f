package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/pkg/ipam"
	"github.com/routelet/routelet/pkg/peers"
)

// lateBlocks is a Datastore whose blocks arrive on a channel after start.
type lateBlocks struct {
	arrive chan []netip.Prefix
}

func (l *lateBlocks) LocalBlocks(ctx context.Context, waiting func(string)) ([]netip.Prefix, error) {
	waiting("waiting for spec.podCIDRs on node node-a")
	select {
	case b := <-l.arrive:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (l *lateBlocks) Publish(peers.Record) error              { return nil }
func (l *lateBlocks) Health() datastore.Health                { return datastore.Health{} }
func (l *lateBlocks) Watch(context.Context, func()) error     { return nil }
func (l *lateBlocks) Peers() ([]peers.Record, []error, error) { return nil, nil, nil }

// TestWaitBlocks: blocks that arrive after start-up keep the daemon not
// ready with the datastore's reason until they do, then are returned; a
// stop while waiting returns an error, no blocks.
func TestWaitBlocks(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ds := &lateBlocks{arrive: make(chan []netip.Prefix)}
	reasons := make(chan string, 10)
	type result struct {
		blocks []netip.Prefix
		err    error
	}
	done := make(chan result, 1)
	go func() {
		b, err := waitBlocks(context.Background(), ds, func(r string) { reasons <- r }, quiet)
		done <- result{b, err}
	}()
	select {
	case r := <-reasons:
		if r != "waiting for spec.podCIDRs on node node-a" {
			t.Errorf("not-ready reason %q", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no not-ready reason while the blocks were missing")
	}
	select {
	case r := <-done:
		t.Fatalf("returned %v, %v before the blocks arrived", r.blocks, r.err)
	default:
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}
	ds.arrive <- want
	r := <-done
	if r.err != nil || !slices.Equal(r.blocks, want) {
		t.Errorf("waitBlocks = %v, %v; want %v", r.blocks, r.err, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b, err := waitBlocks(ctx, ds, func(string) {}, quiet); err == nil || b != nil {
		t.Errorf("waitBlocks after stop = %v, %v; want an error", b, err)
	}
}

// reporting is a Datastore with the optional parts: it records readiness
// and serves one metric.
type reporting struct {
	lateBlocks
	got []string
	c   prometheus.Counter
}

func (r *reporting) SetReady(ready bool, reason string) {
	r.got = append(r.got, fmt.Sprintf("%v %s", ready, reason))
}
func (r *reporting) Describe(ch chan<- *prometheus.Desc) { r.c.Describe(ch) }
func (r *reporting) Collect(ch chan<- prometheus.Metric) { r.c.Collect(ch) }

// TestWireDatastore: a datastore's ReadyReporter hears the daemon's
// readiness changes and its metrics join the daemon's registry.
func TestWireDatastore(t *testing.T) {
	ds := &reporting{c: prometheus.NewCounter(prometheus.CounterOpts{Name: "routelet_test_datastore_total", Help: "test"})}
	status, metrics := health.NewStatus(time.Minute), health.NewMetrics()
	if err := wireDatastore(ds, status, metrics); err != nil {
		t.Fatal(err)
	}
	status.SetReady(true, "")
	status.SetReady(true, "")
	status.SetReady(false, "stopping")
	if want := []string{"true ", "false stopping"}; !slices.Equal(ds.got, want) {
		t.Errorf("SetReady calls %q, want %q", ds.got, want)
	}
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "routelet_test_datastore_total" }) {
		t.Error("the datastore's metric is not in the daemon's registry")
	}
}

func use(block string, usable, used uint64) ipam.BlockUsage {
	return ipam.BlockUsage{Block: netip.MustParsePrefix(block), Usable: usable, Used: used}
}

// TestFullFamilies: a family is full only when every one of its blocks
// has no free address; the other family does not matter.
func TestFullFamilies(t *testing.T) {
	for _, c := range []struct {
		name string
		use  []ipam.BlockUsage
		want map[int][]string
	}{
		{"none used", []ipam.BlockUsage{use("10.0.0.0/30", 2, 0), use("fd00::/126", 3, 0)}, nil},
		{"IPv4 full", []ipam.BlockUsage{use("10.0.0.0/30", 2, 2), use("fd00::/126", 3, 2)}, map[int][]string{4: {"10.0.0.0/30"}}},
		{"one of two IPv4 blocks full", []ipam.BlockUsage{use("10.0.0.0/30", 2, 2), use("10.0.0.4/30", 2, 1)}, nil},
		{"both IPv4 blocks full", []ipam.BlockUsage{use("10.0.0.0/30", 2, 2), use("10.0.0.4/30", 2, 2), use("fd00::/126", 3, 1)},
			map[int][]string{4: {"10.0.0.0/30", "10.0.0.4/30"}}},
		{"both families full", []ipam.BlockUsage{use("10.0.0.0/30", 2, 2), use("fd00::/127", 1, 1)},
			map[int][]string{4: {"10.0.0.0/30"}, 6: {"fd00::/127"}}},
		{"no blocks", nil, nil},
	} {
		got := fullFamilies(c.use)
		if len(got) != len(c.want) {
			t.Errorf("%s: full %v, want %v", c.name, got, c.want)
			continue
		}
		for f, w := range c.want {
			var ws []netip.Prefix
			for _, b := range w {
				ws = append(ws, netip.MustParsePrefix(b))
			}
			if !slices.Equal(got[f], ws) {
				t.Errorf("%s: IPv%d full %v, want %v", c.name, f, got[f], ws)
			}
		}
	}
}

// fakeUse is a usageReader.
type fakeUse []ipam.BlockUsage

func (f fakeUse) Usage() ([]ipam.BlockUsage, error) { return f, nil }

// fakeGrower is a datastore that grows by one block, or fails with err.
type fakeGrower struct {
	datastore.Datastore
	err   error
	calls []string
}

func (f *fakeGrower) Grow(_ context.Context, family int, full []netip.Prefix) (netip.Prefix, error) {
	f.calls = append(f.calls, fmt.Sprint(family, full))
	if f.err != nil {
		return netip.Prefix{}, f.err
	}
	return netip.MustParsePrefix("10.0.0.4/30"), nil
}

// TestBlockGrowerCheck: the grower exports each block's free addresses,
// claims only for a full family, and retries a full pool but not blocks
// fixed by configuration; each reason is logged once.
func TestBlockGrowerCheck(t *testing.T) {
	var logs bytes.Buffer
	ds := &fakeGrower{}
	g, err := newBlockGrower(ds, health.NewMetrics(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if b, again := g.check(ctx, fakeUse{use("10.0.0.0/30", 2, 1)}); b.IsValid() || again || len(ds.calls) != 0 {
		t.Errorf("one free address: claimed %v, again %v, claims %v; want nothing", b, again, ds.calls)
	}
	if v := testutil.ToFloat64(g.free.WithLabelValues("10.0.0.0/30")); v != 1 {
		t.Errorf("free addresses gauge %v, want 1", v)
	}
	if b, _ := g.check(ctx, fakeUse{use("10.0.0.0/30", 2, 2), use("fd00::/126", 3, 1)}); b != netip.MustParsePrefix("10.0.0.4/30") || !slices.Equal(ds.calls, []string{"4 [10.0.0.0/30]"}) {
		t.Errorf("full IPv4 block: claimed %v, claims %v; want 10.0.0.4/30 from one IPv4 claim", b, ds.calls)
	}
	if !bytes.Contains(logs.Bytes(), []byte("every block of the family is full: claimed another")) {
		t.Errorf("no log line for the claim:\n%s", logs.String())
	}
	ds.err, ds.calls = fmt.Errorf("%w: pool 10.0.0.0/29 has no free /30 block", datastore.ErrPoolFull), nil
	full := fakeUse{use("10.0.0.0/30", 2, 2)}
	for range 2 {
		if b, again := g.check(ctx, full); b.IsValid() || !again {
			t.Errorf("full pool: claimed %v, again %v; want a retry", b, again)
		}
	}
	if n := bytes.Count(logs.Bytes(), []byte("no other block could be claimed")); n != 1 {
		t.Errorf("full pool logged %d times, want once:\n%s", n, logs.String())
	}
	ds.err = fmt.Errorf("%w (pod-cidr [10.0.0.0/30])", datastore.ErrFixedBlocks)
	if b, again := g.check(ctx, full); b.IsValid() || again {
		t.Errorf("fixed blocks: claimed %v, again %v; want neither", b, again)
	}
	if v := testutil.ToFloat64(g.free.WithLabelValues("10.0.0.0/30")); v != 0 {
		t.Errorf("free addresses gauge %v, want 0", v)
	}
}

// TestWithBlock: a claimed block joins the blocks after the last of its
// family, IPv4 first, as the datastore lists them after a restart.
func TestWithBlock(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	for _, c := range []struct {
		blocks []netip.Prefix
		add    netip.Prefix
		want   []netip.Prefix
	}{
		{[]netip.Prefix{p("10.0.0.4/30"), p("fd00::/126")}, p("10.0.0.0/30"), []netip.Prefix{p("10.0.0.4/30"), p("10.0.0.0/30"), p("fd00::/126")}},
		{[]netip.Prefix{p("10.0.0.4/30"), p("fd00::/126")}, p("fd00::4/126"), []netip.Prefix{p("10.0.0.4/30"), p("fd00::/126"), p("fd00::4/126")}},
		{[]netip.Prefix{p("fd00::/126")}, p("10.0.0.0/30"), []netip.Prefix{p("10.0.0.0/30"), p("fd00::/126")}},
	} {
		if got := withBlock(c.blocks, c.add); !slices.Equal(got, c.want) {
			t.Errorf("withBlock(%v, %s) = %v, want %v", c.blocks, c.add, got, c.want)
		}
	}
}
