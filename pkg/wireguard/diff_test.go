package wireguard

import (
	"github.com/routelet/routelet/pkg/defaults"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func genKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// devicePeer is p as a device reports it.
func devicePeer(p Peer) wgtypes.Peer {
	dp := wgtypes.Peer{PublicKey: p.PublicKey, AllowedIPs: ipNets(p.AllowedIPs)}
	if p.Endpoint.IsValid() {
		dp.Endpoint = net.UDPAddrFromAddrPort(p.Endpoint)
	}
	return dp
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fixture: our key, two peers A and B, the wanted state with both, and a
// device holding exactly that.
type fixture struct {
	priv   wgtypes.Key
	a, b   Peer
	want   wanted
	device *wgtypes.Device
}

func newFixture(t *testing.T) fixture {
	priv := genKey(t)
	a := Peer{PublicKey: genKey(t).PublicKey(), Endpoint: netip.MustParseAddrPort("192.0.2.1:51820"), AllowedIPs: prefixes("10.1.0.0/26", "10.1.0.0/32")}
	b := Peer{PublicKey: genKey(t).PublicKey(), Endpoint: netip.MustParseAddrPort("[2001:db8::2]:51820"), AllowedIPs: prefixes("fd00:2::/122", "10.2.0.0/26")}
	want := wanted{key: priv, port: 51820, peers: normalizePeers([]Peer{a, b}, priv.PublicKey(), quiet())}
	dev := &wgtypes.Device{PrivateKey: priv, ListenPort: 51820, Peers: []wgtypes.Peer{devicePeer(want.peers[a.PublicKey]), devicePeer(want.peers[b.PublicKey])}}
	return fixture{priv: priv, a: a, b: b, want: want, device: dev}
}

func cloneWanted(w wanted) wanted {
	c := w
	c.peers = make(map[wgtypes.Key]Peer, len(w.peers))
	for k, p := range w.peers {
		c.peers[k] = p
	}
	return c
}

func TestDiffUnchangedDeviceIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	base := cloneWanted(f.want)
	cfg, changed, repairs := diff(f.want, f.device, &base)
	if changed || len(cfg.Peers) > 0 || cfg.PrivateKey != nil || cfg.ListenPort != nil || len(repairs) > 0 {
		t.Fatalf("device holding the wanted state: changed %v, config %+v, repairs %v", changed, cfg, repairs)
	}
}

func TestDiffTouchesOnlyChangedPeers(t *testing.T) {
	f := newFixture(t)
	base := cloneWanted(f.want)
	// Peer A moves to another endpoint and gains a block; B is unchanged;
	// C is new.
	c := Peer{PublicKey: genKey(t).PublicKey(), Endpoint: netip.MustParseAddrPort("192.0.2.3:51820"), AllowedIPs: prefixes("10.3.0.0/26")}
	a := f.a
	a.Endpoint = netip.MustParseAddrPort("192.0.2.11:51820")
	a.AllowedIPs = append(prefixes("10.1.1.0/26"), a.AllowedIPs...)
	want := wanted{key: f.priv, port: 51820, peers: normalizePeers([]Peer{a, f.b, c}, f.priv.PublicKey(), quiet())}
	cfg, changed, repairs := diff(want, f.device, &base)
	if !changed || len(repairs) > 0 {
		t.Fatalf("changed %v, repairs %v: want a change and no repair", changed, repairs)
	}
	if cfg.ReplacePeers {
		t.Fatal("ReplacePeers set: every session would reset")
	}
	byKey := map[wgtypes.Key]wgtypes.PeerConfig{}
	for _, p := range cfg.Peers {
		byKey[p.PublicKey] = p
	}
	if _, ok := byKey[f.b.PublicKey]; ok {
		t.Error("the unchanged peer B is in the configuration: its session would be touched")
	}
	pa, ok := byKey[a.PublicKey]
	if !ok || !pa.UpdateOnly || !pa.ReplaceAllowedIPs || pa.Remove || pa.Endpoint.String() != "192.0.2.11:51820" || len(pa.AllowedIPs) != 3 {
		t.Errorf("peer A's update: %+v", pa)
	}
	pc, ok := byKey[c.PublicKey]
	if !ok || pc.UpdateOnly || pc.Remove || pc.Endpoint.String() != "192.0.2.3:51820" || len(pc.AllowedIPs) != 1 {
		t.Errorf("peer C's addition: %+v", pc)
	}
	if len(cfg.Peers) != 2 {
		t.Errorf("%d peer changes, want 2: %+v", len(cfg.Peers), cfg.Peers)
	}
}

func TestDiffRemovedPeer(t *testing.T) {
	f := newFixture(t)
	base := cloneWanted(f.want)
	want := wanted{key: f.priv, port: 51820, peers: normalizePeers([]Peer{f.b}, f.priv.PublicKey(), quiet())}
	cfg, changed, repairs := diff(want, f.device, &base)
	if !changed || len(repairs) > 0 || len(cfg.Peers) != 1 || !cfg.Peers[0].Remove || cfg.Peers[0].PublicKey != f.a.PublicKey {
		t.Fatalf("dropping peer A: changed %v, repairs %v, peers %+v", changed, repairs, cfg.Peers)
	}
}

func TestDiffRepairs(t *testing.T) {
	for name, c := range map[string]struct {
		tamper func(f fixture, dev *wgtypes.Device)
		want   []string
		check  func(t *testing.T, f fixture, cfg wgtypes.Config)
	}{
		"key changed": {
			tamper: func(f fixture, dev *wgtypes.Device) { dev.PrivateKey[0] ^= 1 },
			want:   []string{"key"},
			check: func(t *testing.T, f fixture, cfg wgtypes.Config) {
				if cfg.PrivateKey == nil || *cfg.PrivateKey != f.priv {
					t.Error("the key is not set back")
				}
			},
		},
		"port changed": {
			tamper: func(f fixture, dev *wgtypes.Device) { dev.ListenPort = 4000 },
			want:   []string{"port"},
			check: func(t *testing.T, f fixture, cfg wgtypes.Config) {
				if cfg.ListenPort == nil || *cfg.ListenPort != 51820 {
					t.Error("the port is not set back")
				}
			},
		},
		"peer removed": {
			tamper: func(f fixture, dev *wgtypes.Device) { dev.Peers = dev.Peers[1:] },
			want:   []string{"peer"},
			check: func(t *testing.T, f fixture, cfg wgtypes.Config) {
				if len(cfg.Peers) != 1 || cfg.Peers[0].PublicKey != f.a.PublicKey || cfg.Peers[0].UpdateOnly || cfg.Peers[0].Remove {
					t.Errorf("peer A not added back: %+v", cfg.Peers)
				}
			},
		},
		"allowed IP removed": {
			tamper: func(f fixture, dev *wgtypes.Device) { dev.Peers[0].AllowedIPs = dev.Peers[0].AllowedIPs[:1] },
			want:   []string{"peer"},
			check: func(t *testing.T, f fixture, cfg wgtypes.Config) {
				if len(cfg.Peers) != 1 || !cfg.Peers[0].ReplaceAllowedIPs || len(cfg.Peers[0].AllowedIPs) != 2 {
					t.Errorf("peer A's allowed IPs not replaced: %+v", cfg.Peers)
				}
			},
		},
		"endpoint changed": {
			tamper: func(f fixture, dev *wgtypes.Device) {
				dev.Peers[1].Endpoint = &net.UDPAddr{IP: net.ParseIP("2001:db8::99"), Port: 1}
			},
			want: []string{"peer"},
		},
		"preshared key set": {
			tamper: func(f fixture, dev *wgtypes.Device) { dev.Peers[0].PresharedKey[3] = 7 },
			want:   []string{"peer"},
			check: func(t *testing.T, f fixture, cfg wgtypes.Config) {
				if len(cfg.Peers) != 1 || cfg.Peers[0].PresharedKey == nil || *cfg.Peers[0].PresharedKey != (wgtypes.Key{}) {
					t.Errorf("preshared key not cleared: %+v", cfg.Peers)
				}
			},
		},
		"foreign peer added": {
			tamper: func(f fixture, dev *wgtypes.Device) {
				dev.Peers = append(dev.Peers, wgtypes.Peer{PublicKey: wgtypes.Key{9}})
			},
			want: []string{"peer"},
			check: func(t *testing.T, f fixture, cfg wgtypes.Config) {
				if len(cfg.Peers) != 1 || !cfg.Peers[0].Remove || cfg.Peers[0].PublicKey != (wgtypes.Key{9}) {
					t.Errorf("foreign peer not removed: %+v", cfg.Peers)
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			// Orders are the device's: A first. normalizePeers sorts by
			// key, the device does not.
			f.device.Peers = []wgtypes.Peer{devicePeer(f.want.peers[f.a.PublicKey]), devicePeer(f.want.peers[f.b.PublicKey])}
			c.tamper(f, f.device)
			base := cloneWanted(f.want)
			cfg, changed, repairs := diff(f.want, f.device, &base)
			if !changed || !slices.Equal(repairs, c.want) {
				t.Fatalf("changed %v, repairs %v, want %v", changed, repairs, c.want)
			}
			if c.check != nil {
				c.check(t, f, cfg)
			}
			// With nothing applied before (a device just made or adopted)
			// the same difference is set, and is no repair.
			cfg2, changed2, repairs2 := diff(f.want, f.device, nil)
			if !changed2 || len(repairs2) > 0 || len(cfg2.Peers) != len(cfg.Peers) {
				t.Errorf("without a base: changed %v, repairs %v, %d peer changes (with a base %d)", changed2, repairs2, len(cfg2.Peers), len(cfg.Peers))
			}
		})
	}
}

func TestDiffWantedKeyChangeIsNoRepair(t *testing.T) {
	f := newFixture(t)
	base := cloneWanted(f.want)
	want := cloneWanted(f.want)
	want.key = genKey(t)
	cfg, changed, repairs := diff(want, f.device, &base)
	if !changed || len(repairs) > 0 || cfg.PrivateKey == nil || *cfg.PrivateKey != want.key || len(cfg.Peers) > 0 {
		t.Fatalf("a rotated key: changed %v, repairs %v, config %+v", changed, repairs, cfg)
	}
}

func TestNormalizePeers(t *testing.T) {
	self := genKey(t).PublicKey()
	k1, k2 := genKey(t).PublicKey(), genKey(t).PublicKey()
	if strings.Compare(string(k1[:]), string(k2[:])) > 0 {
		k1, k2 = k2, k1
	}
	got := normalizePeers([]Peer{
		{PublicKey: k2, AllowedIPs: prefixes("10.0.0.0/24", "10.9.0.0/24")},
		{PublicKey: wgtypes.Key{}, AllowedIPs: prefixes("10.5.0.0/24")},
		{PublicKey: self, AllowedIPs: prefixes("10.6.0.0/24")},
		{PublicKey: k1, Endpoint: netip.MustParseAddrPort("[::ffff:192.0.2.1]:51820"),
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.7/24"), netip.MustParsePrefix("::ffff:10.1.0.0/120"), {}, netip.MustParsePrefix("10.0.0.0/24")}},
		{PublicKey: k1, AllowedIPs: prefixes("10.7.0.0/24")},
	}, self, quiet())
	if len(got) != 2 {
		t.Fatalf("%d peers kept, want 2 (zero key, own key, repeated key dropped): %+v", len(got), got)
	}
	p1 := got[k1]
	if p1.Endpoint.String() != "192.0.2.1:51820" {
		t.Errorf("endpoint %v, want the unmapped 192.0.2.1:51820", p1.Endpoint)
	}
	if !slices.Equal(p1.AllowedIPs, prefixes("10.0.0.0/24", "10.1.0.0/24")) {
		t.Errorf("peer 1 allowed %v, want masked, unmapped, once each, without the invalid one", p1.AllowedIPs)
	}
	if !slices.Equal(got[k2].AllowedIPs, prefixes("10.9.0.0/24")) {
		t.Errorf("peer 2 allowed %v: 10.0.0.0/24 belongs to peer 1 (first in key order)", got[k2].AllowedIPs)
	}
}

func TestConfigDefaultsAndRefusals(t *testing.T) {
	c, err := Config{RunDir: "/run/x"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "wireguard.cali" || c.Port != 51820 || c.MTU != DefaultMTU || c.Impl != ImplAuto {
		t.Errorf("defaults: %+v", c)
	}
	if len(c.Datapath) != 6 || c.Datapath[1] != defaults.WireGuardDatapathCommand || c.Datapath[3] != "wireguard.cali" || c.Datapath[5] != "1420" {
		t.Errorf("default datapath command %q", c.Datapath)
	}
	if !DatapathArgs(c.Datapath, c.Name) || DatapathArgs(c.Datapath, "other") {
		t.Error("DatapathArgs does not recognise the default datapath command for its device only")
	}
	for _, bad := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "a-name-far-too-long", RunDir: "/r"}, `"a-name-far-too-long"`},
		{Config{Name: "a/b", RunDir: "/r"}, `"a/b"`},
		{Config{Port: 70000, RunDir: "/r"}, "port 70000"},
		{Config{MTU: 20, RunDir: "/r"}, "MTU 20"},
		{Config{Impl: "magic", RunDir: "/r"}, `"magic"`},
		{Config{RunDir: "relative"}, `"relative"`},
		{Config{Impl: ImplUserspace}, `run directory ""`},
		{Config{Addrs: prefixes("10.0.0.1/24"), RunDir: "/r"}, "10.0.0.1/24"},
		{Config{Addrs: prefixes("fe80::1/128"), RunDir: "/r"}, "fe80::1/128"},
		{Config{Datapath: []string{""}, RunDir: "/r"}, "no program"},
	} {
		_, err := bad.cfg.withDefaults()
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want one naming %s", bad.cfg, err, bad.want)
		}
	}
	if _, err := (Config{Impl: ImplKernel}).withDefaults(); err != nil {
		t.Errorf("the kernel implementation needs no run directory: %v", err)
	}
}

func TestDatapathRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"--device", "x", "extra"}, {"--mtu", "many"}} {
		if code := DatapathMain(args); code != 2 {
			t.Errorf("DatapathMain(%q) = %d, want 2", args, code)
		}
	}
	for _, c := range []struct {
		name string
		mtu  int
		want string
	}{{"a/b", 1420, `"a/b"`}, {"", 1420, `""`}, {"wg0", 10, "MTU 10"}} {
		err := RunDatapath(t.Context(), c.name, c.mtu, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunDatapath(%q, %d): %v, want an error naming %s", c.name, c.mtu, err, c.want)
		}
	}
}
