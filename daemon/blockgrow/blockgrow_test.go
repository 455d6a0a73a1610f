package blockgrow

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/routelet/routelet/daemon/datastore"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/pkg/ipam"
)

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

// fakeUse is a UsageReader.
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
	g, err := New(ds, health.NewMetrics(), slog.New(slog.NewTextHandler(&logs, nil)))
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
		if got := WithBlock(c.blocks, c.add); !slices.Equal(got, c.want) {
			t.Errorf("WithBlock(%v, %s) = %v, want %v", c.blocks, c.add, got, c.want)
		}
	}
}
