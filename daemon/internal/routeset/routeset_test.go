package routeset

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/routelet/routelet/pkg/routes"
)

// table is a RouteTable recording the calls made to it.
type table struct {
	calls  []string
	err    error
	closed bool
}

func (t *table) RouteUpdate(iface string, tg routes.Target) {
	t.calls = append(t.calls, "update "+iface+" "+tg.CIDR.String()+" "+tg.Gateway.String())
}
func (t *table) RouteRemove(iface string, cidr netip.Prefix) {
	t.calls = append(t.calls, "remove "+iface+" "+cidr.String())
}
func (t *table) MarkDirty(iface string) { t.calls = append(t.calls, "dirty "+iface) }
func (t *table) Apply() error           { t.calls = append(t.calls, "apply"); return t.err }
func (t *table) Close() error           { t.closed = true; return nil }

// take returns the calls since the last take.
func (t *table) take() []string {
	c := t.calls
	t.calls = nil
	return c
}

func gw(cidr, gateway string) routes.Target {
	return routes.Target{CIDR: netip.MustParsePrefix(cidr), Type: routes.TypeGateway, Gateway: netip.MustParseAddr(gateway)}
}

func want(ts ...routes.Target) map[netip.Prefix]routes.Target {
	m := map[netip.Prefix]routes.Target{}
	for _, t := range ts {
		m[t.CIDR] = t
	}
	return m
}

func newSet(t *testing.T) (*Set, *table, *table) {
	t.Helper()
	s := New(Config{Iface: "eth0", Owner: "test"})
	t4, t6 := &table{}, &table{}
	if err := s.Add(4, t4); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(6, t6); err != nil {
		t.Fatal(err)
	}
	return s, t4, t6
}

func check(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: calls %q, want %q", what, got, want)
	}
}

// TestSetByDifference: the table is handed only the targets that are new
// or changed, in CIDR order, and the removal of those no longer wanted;
// another family's table is not touched.
func TestSetByDifference(t *testing.T) {
	s, t4, t6 := newSet(t)
	s.Set(4, want(gw("10.0.2.0/24", "192.0.2.2"), gw("10.0.1.0/24", "192.0.2.1")))
	check(t, "first", t4.take(), "update eth0 10.0.1.0/24 192.0.2.1", "update eth0 10.0.2.0/24 192.0.2.2")
	s.Set(4, want(gw("10.0.2.0/24", "192.0.2.2"), gw("10.0.1.0/24", "192.0.2.1")))
	check(t, "same again", t4.take())
	s.Set(4, want(gw("10.0.2.0/24", "192.0.2.9"), gw("10.0.3.0/24", "192.0.2.3")))
	check(t, "changed", t4.take(), "update eth0 10.0.2.0/24 192.0.2.9", "update eth0 10.0.3.0/24 192.0.2.3", "remove eth0 10.0.1.0/24")
	check(t, "IPv6 table", t6.take())
	if got := s.Routes(4); len(got) != 2 || got[netip.MustParsePrefix("10.0.2.0/24")].Gateway != netip.MustParseAddr("192.0.2.9") {
		t.Errorf("Routes(4) = %v", got)
	}
	// Routes is a copy.
	r := s.Routes(4)
	clear(r)
	if len(s.Routes(4)) != 2 {
		t.Error("clearing Routes' result changed the Set")
	}
	s.Set(4, nil)
	if got := t4.take(); len(got) != 2 || !slices.Contains(got, "remove eth0 10.0.2.0/24") || !slices.Contains(got, "remove eth0 10.0.3.0/24") {
		t.Errorf("emptied: calls %q", got)
	}
	// A family without a table keeps nothing.
	one := New(Config{Iface: "eth0", Owner: "test"})
	if err := one.Add(4, &table{}); err != nil {
		t.Fatal(err)
	}
	one.Set(6, want(gw("fd00::/64", "fe80::1")))
	if one.Routes(6) != nil || one.Wanted(netip.MustParsePrefix("fd00::/64")) || one.Has(6) || !one.Has(4) {
		t.Error("a family without a table kept routes")
	}
}

// TestWanted: any family's routes are wanted, by masked CIDR.
func TestWanted(t *testing.T) {
	s, _, _ := newSet(t)
	s.Set(4, want(gw("10.0.1.0/24", "192.0.2.1")))
	s.Set(6, want(gw("fd00:1::/64", "fe80::1")))
	for dst, w := range map[string]bool{
		"10.0.1.0/24": true, "10.0.1.7/24": true, "fd00:1::/64": true,
		"10.0.1.0/25": false, "10.0.2.0/24": false, "fd00:2::/64": false,
	} {
		if got := s.Wanted(netip.MustParsePrefix(dst)); got != w {
			t.Errorf("Wanted(%s) = %v, want %v", dst, got, w)
		}
	}
}

// TestApplyDirty: the first Apply re-reads the interface in every family;
// later ones only after MarkDirty; errors name the owner and the family.
func TestApplyDirty(t *testing.T) {
	s, t4, t6 := newSet(t)
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	check(t, "first Apply IPv4", t4.take(), "dirty eth0", "apply")
	check(t, "first Apply IPv6", t6.take(), "dirty eth0", "apply")
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	check(t, "second Apply", t4.take(), "apply")
	check(t, "second Apply IPv6", t6.take(), "apply")
	s.MarkDirty()
	t6.err = errors.New("boom")
	err := s.Apply()
	if err == nil || err.Error() != "test IPv6 routes: boom" || !errors.Is(err, t6.err) {
		t.Errorf("Apply = %v, want test IPv6 routes: boom", err)
	}
	check(t, "after MarkDirty", t4.take(), "dirty eth0", "apply")
	check(t, "after MarkDirty IPv6", t6.take(), "dirty eth0", "apply")
}

// TestDeleted: the deletion of a wanted route on the Set's interface is
// drift (reported, the next Apply re-reads); the echo of a removal and
// another interface's deletions are not.
func TestDeleted(t *testing.T) {
	var drift []string
	onDrift := func(object, detail string) { drift = append(drift, object+": "+detail) }
	s, t4, t6 := newSet(t)
	s.Set(4, want(gw("10.0.1.0/24", "192.0.2.1"), gw("10.0.2.0/24", "192.0.2.2")))
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	s.Set(4, want(gw("10.0.1.0/24", "192.0.2.1")))
	t4.take()
	t6.take()
	for _, c := range []struct{ iface, dst string }{
		{"eth0", "10.0.2.0/24"}, // our own removal's echo
		{"eth1", "10.0.1.0/24"}, // another interface
		{"eth0", "10.0.1.0/25"},
	} {
		if s.Deleted(c.iface, netip.MustParsePrefix(c.dst), onDrift) {
			t.Errorf("Deleted(%s, %s) = true", c.iface, c.dst)
		}
	}
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	check(t, "no drift", t4.take(), "apply")
	check(t, "no drift IPv6", t6.take(), "apply")
	if len(drift) != 0 {
		t.Errorf("OnDrift called: %q", drift)
	}
	if !s.Deleted("eth0", netip.MustParsePrefix("10.0.1.0/24"), onDrift) {
		t.Error("a wanted route's deletion is not drift")
	}
	check(t, "OnDrift", drift, "route: 10.0.1.0/24 dev eth0")
	if err := s.Apply(); err != nil {
		t.Fatal(err)
	}
	check(t, "after drift IPv4", t4.take(), "dirty eth0", "apply")
	check(t, "after drift IPv6", t6.take(), "dirty eth0", "apply")
	// Without OnDrift the rule holds all the same.
	if !s.Deleted("eth0", netip.MustParsePrefix("10.0.1.0/24"), nil) {
		t.Error("without OnDrift: not drift")
	}
}

// TestAdd: a family is 4 or 6, with one table; Close closes every table
// that is an io.Closer.
func TestAdd(t *testing.T) {
	s, t4, t6 := newSet(t)
	if err := s.Add(4, &table{}); err == nil || err.Error() != "test routes: IPv4 has a route table already" {
		t.Errorf("Add(4) again = %v", err)
	}
	if err := s.Add(5, &table{}); err == nil || err.Error() != "test routes: IP family 5 is not 4 or 6" {
		t.Errorf("Add(5) = %v", err)
	}
	if got := s.Families(); !slices.Equal(got, []int{4, 6}) {
		t.Errorf("Families = %v", got)
	}
	if err := s.Close(); err != nil || !t4.closed || !t6.closed {
		t.Errorf("Close = %v, closed %v %v", err, t4.closed, t6.closed)
	}
}

// TestConcurrent: Wanted, Routes, MarkDirty and Deleted may run beside the
// loop's Set and Apply (go test -race).
func TestConcurrent(t *testing.T) {
	s, _, _ := newSet(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		dst := netip.MustParsePrefix("10.0.1.0/24")
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.Wanted(dst)
			s.Routes(4)
			s.Deleted("eth0", dst, func(string, string) {})
			s.MarkDirty()
		}
	}()
	for i := range 200 {
		if i%2 == 0 {
			s.Set(4, want(gw("10.0.1.0/24", "192.0.2.1")))
		} else {
			s.Set(4, nil)
		}
		if err := s.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
