package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
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
