package routes

import (
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// fakeClock is a Clock the test moves by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// usualConfig is a table of IP version v with the usual routelet setup:
// cali* workload interfaces, a shared vxlan.calico, no-interface routes,
// external routes removed, no grace period, no logs.
func usualConfig(v int) Config {
	return Config{
		IPVersion:            v,
		InterfacePrefixes:    []string{"cali"},
		InterfaceNames:       []string{"vxlan.calico"},
		IncludeNoInterface:   true,
		RemoveExternalRoutes: true,
		GracePeriod:          -1,
		Logger:               slog.New(slog.DiscardHandler),
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }
func ipnet(s string) *net.IPNet { return prefixToIPNet(pfx(s)) }
