package wgmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/daemon/netwatch"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/internal/nlutil"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/wireguard"
)

// TestRoutesKernel: as root, on a real kernel (a network namespace of its own;
// a veth stands in for the WireGuard device), every peer's blocks
// are routed "dev wireguard.cali scope link proto 80", both families; a
// route deleted behind the manager's back and the device deleted and made
// again are reported by their netlink events, and the Apply those ask for
// puts the routes back.
func TestRoutesKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t, "routes in a network namespace of its own")
	n := netnstest.NewT(t)
	h := n.Handle
	create := func() error {
		if _, err := h.LinkByName(dev); err == nil {
			return nil
		}
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dev, MTU: 1380}, PeerName: "wgpeer0"}); err != nil {
			return err
		}
		for _, name := range []string{dev, "wgpeer0"} {
			l, err := h.LinkByName(name)
			if err != nil {
				return err
			}
			if err := h.LinkSetUp(l); err != nil {
				return err
			}
		}
		return nil
	}
	quiet := slog.New(slog.DiscardHandler)
	var woken atomic.Int32
	var m *Manager
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	err := n.Do(func() error {
		var err error
		m, err = New(Config{StateDir: t.TempDir(), MTU: 1380, Logger: quiet,
			LocalBlocks: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:1::/120")},
		}, func(cfg wireguard.Config, key wgtypes.Key) (Device, error) {
			return &fakeDevice{cfg: cfg, key: key, create: create}, nil
		}, func(v int, owned []string) (RouteTable, error) {
			return routes.New(routes.Config{IPVersion: v, InterfaceNames: owned, Logger: quiet})
		})
		if err != nil {
			return err
		}
		w := netwatch.New(quiet)
		w.Register("wireguard", m.Interest(), m.Events(func() { woken.Add(1) }))
		return w.Start(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	m.OnNodes([]peers.NodeInfo{
		{Name: "node-b", Blocks: prefixes("10.244.2.0/24", "fd00:2::/120"), WireGuard: peers.WireGuardPeer{PublicKey: key(t)}},
		{Name: "node-c", Blocks: prefixes("10.244.3.0/24")},
	})
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"10.244.2.0/24 dev wireguard.cali proto 80 scope link",
		"10.244.3.0/24 dev wireguard.cali proto 80 scope link",
		"fd00:2::/120 dev wireguard.cali proto 80",
	}
	dump := func() []string {
		var out []string
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			rs, err := nlutil.Retry(func() ([]netlink.Route, error) {
				return h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				l, err := h.LinkByIndex(r.LinkIndex)
				if err != nil || l.Attrs().Name != dev || r.Dst == nil || r.Dst.IP.IsLinkLocalUnicast() || r.Protocol != 80 {
					continue
				}
				s := fmt.Sprintf("%s dev %s proto %d", r.Dst, dev, r.Protocol)
				if r.Scope == netlink.SCOPE_LINK {
					s += " scope link"
				}
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := dump(); !slices.Equal(got, want) {
		t.Fatalf("routes\n got %q\nwant %q", got, want)
	}
	waitWake := func(what string, before int32) {
		t.Helper()
		netnstest.WaitFor(t, 5*time.Second, what, func() error {
			if woken.Load() > before {
				return nil
			}
			return errors.New("no wake yet")
		})
	}

	before := woken.Load()
	l, _ := h.LinkByName(dev)
	r := routeOf("10.244.3.0/24", l.Attrs().Index, 80)
	if err := h.RouteDel(&r); err != nil {
		t.Fatal(err)
	}
	waitWake("the deleted route's event", before)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := dump(); !slices.Equal(got, want) {
		t.Errorf("after the route was deleted\n got %q\nwant %q", got, want)
	}

	before = woken.Load()
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	waitWake("the deleted device's event", before)
	if err := m.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := dump(); !slices.Equal(got, want) {
		t.Errorf("after the device was made again\n got %q\nwant %q", got, want)
	}
}
