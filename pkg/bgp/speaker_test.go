package bgp

import (
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{ASN: 64512, RouterID: netip.MustParseAddr("192.0.2.1")}
}

// waitGoroutines waits up to 2 s for the goroutine count to fall to base
// and fails t with the stacks of those left when it does not.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfigRefused(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"AS 0":            func(c *Config) { c.ASN = 0 },
		"AS 4294967295":   func(c *Config) { c.ASN = 4294967295 },
		"IPv6 router ID":  func(c *Config) { c.RouterID = netip.MustParseAddr("2001:db8::1") },
		"no router ID":    func(c *Config) { c.RouterID = netip.Addr{} },
		"port 65536":      func(c *Config) { c.ListenPort = 65536 },
		"restart 4096s":   func(c *Config) { c.RestartTime = 4096 * time.Second },
		"connect retry":   func(c *Config) { c.ConnectRetry = time.Millisecond },
		"hold time 2s":    func(c *Config) { c.HoldTime = 2 * time.Second },
		"negative listen": func(c *Config) { c.ListenPort = -1 },
	} {
		c := testConfig()
		mod(&c)
		if s, err := New(c); err == nil {
			s.Stop()
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestStopAndCloseLeaveNoGoroutines: GoBGP's loop and the speaker's own
// goroutine end with Stop and with Close, with prefixes announced and a
// peer configured that never answers.
func TestStopAndCloseLeaveNoGoroutines(t *testing.T) {
	for _, stop := range []string{"Stop", "Close"} {
		base := runtime.NumGoroutine()
		c := testConfig()
		c.GracefulRestart = true
		c.OnChange = func() {}
		s, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetPeers([]Peer{{Address: netip.MustParseAddr("192.0.2.99"), ASN: 64513}}); err != nil {
			t.Fatal(err)
		}
		err = s.SetAnnounced([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00:1::/64")},
			netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1"))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Learned(); len(got) != 0 {
			t.Errorf("Learned: %v, want none (our own announcements are not learned)", got)
		}
		ps := s.Peers()
		if len(ps) != 1 || ps[0].State == "established" {
			t.Errorf("Peers: %+v", ps)
		}
		if stop == "Stop" {
			err = s.Stop()
		} else {
			err = s.Close()
		}
		if err != nil {
			t.Fatalf("%s: %v", stop, err)
		}
		if err := s.Stop(); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		if err := s.SetPeers(nil); err == nil {
			t.Errorf("SetPeers after %s succeeded", stop)
		}
		if s.Peers() != nil || s.Learned() != nil {
			t.Errorf("status after %s", stop)
		}
		waitGoroutines(t, base)
	}
}

func TestSetAnnouncedRefused(t *testing.T) {
	s, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	for name, tc := range map[string]struct {
		p        string
		nh4, nh6 netip.Addr
	}{
		"v4 without next hop": {"10.0.0.0/24", netip.Addr{}, v6},
		"v4 via IPv6":         {"10.0.0.0/24", v6, v6},
		"v6 without next hop": {"fd00::/64", v4, netip.Addr{}},
		"v6 via IPv4":         {"fd00::/64", v4, v4},
		"mapped":              {"::ffff:10.0.0.0/120", v4, v6},
	} {
		err := s.SetAnnounced([]netip.Prefix{netip.MustParsePrefix(tc.p)}, tc.nh4, tc.nh6)
		if err == nil || !strings.Contains(err.Error(), "bgp: announce") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Only a family that has prefixes needs its next hop.
	if err := s.SetAnnounced([]netip.Prefix{netip.MustParsePrefix("fd00::/64")}, netip.Addr{}, v6); err != nil {
		t.Error(err)
	}
	if err := s.SetAnnounced(nil, netip.Addr{}, netip.Addr{}); err != nil {
		t.Error(err)
	}
}

func TestSetPeersRefused(t *testing.T) {
	s, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	a := netip.MustParseAddr("192.0.2.7")
	for name, ps := range map[string][]Peer{
		"no address": {{ASN: 1}},
		"loopback":   {{Address: netip.MustParseAddr("127.0.0.1"), ASN: 1}},
		"link-local": {{Address: netip.MustParseAddr("fe80::1"), ASN: 1}},
		"AS 0":       {{Address: a}},
		"twice":      {{Address: a, ASN: 1}, {Address: a, ASN: 2}},
		"password":   {{Address: a, ASN: 1, Password: strings.Repeat("x", 81)}},
	} {
		if err := s.SetPeers(ps); err == nil {
			t.Errorf("%s: SetPeers succeeded", name)
		}
	}
	if got := s.Peers(); len(got) != 0 {
		t.Errorf("refused SetPeers left peers %+v", got)
	}
	// A mapped address is the IPv4 one; a change of description only
	// keeps the session.
	if err := s.SetPeers([]Peer{{Address: netip.MustParseAddr("::ffff:192.0.2.7"), ASN: 1, Description: "x"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPeers([]Peer{{Address: a, ASN: 1, Description: "y"}}); err != nil {
		t.Fatal(err)
	}
	got := s.Peers()
	if len(got) != 1 || got[0].Address != a || got[0].Description != "y" {
		t.Errorf("Peers: %+v", got)
	}
}
