package main

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

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
