package wireguard

import (
	"bytes"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Peer is one WireGuard peer the device should have: its public key, where
// to send to it (an invalid Endpoint leaves the endpoint to what the peer's
// packets teach the device) and the addresses it may send from and is sent
// to (its blocks and tunnel addresses).
type Peer struct {
	PublicKey  wgtypes.Key
	Endpoint   netip.AddrPort
	AllowedIPs []netip.Prefix
}

// wanted is the configuration the device should hold.
type wanted struct {
	key       wgtypes.Key
	port      int
	keepalive time.Duration // every peer's persistent keepalive (0: none)
	peers     map[wgtypes.Key]Peer
}

// normalizePeers returns the peers the device can hold, each once, with
// AllowedIPs masked, sorted and without duplicates and the endpoint
// unmapped. It drops (and logs) a peer with the all-zero key, a repeated
// key, our own public key (self), an invalid allowed prefix, and an
// allowed prefix an earlier peer (in key order) already has: WireGuard
// gives a prefix to one peer only, so two peers claiming it would take it
// from each other on every check.
func normalizePeers(in []Peer, self wgtypes.Key, log *slog.Logger) map[wgtypes.Key]Peer {
	sorted := slices.Clone(in)
	slices.SortStableFunc(sorted, func(a, b Peer) int { return bytes.Compare(a.PublicKey[:], b.PublicKey[:]) })
	out := make(map[wgtypes.Key]Peer, len(sorted))
	owner := map[netip.Prefix]wgtypes.Key{}
	for _, p := range sorted {
		switch {
		case p.PublicKey == (wgtypes.Key{}):
			log.Warn("wireguard: peer with the all-zero key left out")
			continue
		case p.PublicKey == self:
			log.Warn("wireguard: peer with this node's own public key left out", "peer", p.PublicKey.String())
			continue
		}
		if _, dup := out[p.PublicKey]; dup {
			log.Warn("wireguard: peer key given twice: only its first entry kept", "peer", p.PublicKey.String())
			continue
		}
		q := Peer{PublicKey: p.PublicKey}
		if p.Endpoint.IsValid() && p.Endpoint.Port() != 0 {
			q.Endpoint = netip.AddrPortFrom(p.Endpoint.Addr().Unmap(), p.Endpoint.Port())
		}
		for _, pre := range p.AllowedIPs {
			pre, ok := unmapPrefix(pre.Addr(), pre.Bits())
			if !ok {
				log.Warn("wireguard: invalid allowed prefix left out", "peer", p.PublicKey.String(), "prefix", pre.String())
				continue
			}
			if k, taken := owner[pre]; taken {
				if k != p.PublicKey {
					log.Warn("wireguard: allowed prefix claimed by two peers: kept by the first", "prefix", pre.String(),
						"kept", k.String(), "refused", p.PublicKey.String())
				}
				continue
			}
			owner[pre] = p.PublicKey
			q.AllowedIPs = append(q.AllowedIPs, pre)
		}
		slices.SortFunc(q.AllowedIPs, comparePrefix)
		out[p.PublicKey] = q
	}
	return out
}

// unmapPrefix is the prefix of bits on a, masked, with an IPv4-mapped
// IPv6 prefix made IPv4; ok is false when that is no prefix.
func unmapPrefix(a netip.Addr, bits int) (netip.Prefix, bool) {
	if a.Is4In6() {
		a, bits = a.Unmap(), bits-96
	}
	p := netip.PrefixFrom(a, bits)
	return p.Masked(), p.IsValid()
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// samePeer reports whether two normalized peers are the same configuration.
func samePeer(a, b Peer) bool {
	return a.PublicKey == b.PublicKey && a.Endpoint == b.Endpoint && slices.Equal(a.AllowedIPs, b.AllowedIPs)
}

// diff returns the wgctrl configuration that brings have to want, changing
// only what differs, so that a peer whose entry is unchanged keeps its
// session; changed is false when nothing differs. base is what the last
// successful configuration of this device set (nil when there was none):
// a difference where want still equals base is something else changed on
// the device, and repairs names it ("key", "port", "peer"; once per object
// repaired).
func diff(want wanted, have *wgtypes.Device, base *wanted) (cfg wgtypes.Config, changed bool, repairs []string) {
	if have.PrivateKey != want.key {
		k := want.key
		cfg.PrivateKey = &k
		if base != nil && base.key == want.key {
			repairs = append(repairs, "key")
		}
	}
	if have.ListenPort != want.port {
		p := want.port
		cfg.ListenPort = &p
		if base != nil && base.port == want.port {
			repairs = append(repairs, "port")
		}
	}
	// A repair when base holds the peer as want does: neither the wanted
	// entry changed since the device held it, yet the device differs.
	unchangedSinceBase := func(k wgtypes.Key) bool {
		if base == nil {
			return false
		}
		b, ok := base.peers[k]
		w, wok := want.peers[k]
		return ok == wok && (!ok || samePeer(b, w))
	}
	seen := make(map[wgtypes.Key]bool, len(have.Peers))
	for i := range have.Peers {
		hp := &have.Peers[i]
		seen[hp.PublicKey] = true
		wp, ok := want.peers[hp.PublicKey]
		if !ok {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: hp.PublicKey, Remove: true})
			if unchangedSinceBase(hp.PublicKey) {
				repairs = append(repairs, "peer")
			}
			continue
		}
		pc := wgtypes.PeerConfig{PublicKey: wp.PublicKey, UpdateOnly: true}
		differs := false
		if wp.Endpoint.IsValid() && peerEndpoint(hp) != wp.Endpoint {
			pc.Endpoint, differs = udpAddr(wp.Endpoint), true
		}
		if !slices.Equal(peerAllowed(hp), wp.AllowedIPs) {
			pc.ReplaceAllowedIPs, pc.AllowedIPs, differs = true, ipNets(wp.AllowedIPs), true
		}
		if hp.PresharedKey != (wgtypes.Key{}) {
			pc.PresharedKey, differs = new(wgtypes.Key), true
		}
		if hp.PersistentKeepaliveInterval != want.keepalive {
			ka := want.keepalive
			pc.PersistentKeepaliveInterval, differs = &ka, true
		}
		if differs {
			cfg.Peers = append(cfg.Peers, pc)
			if unchangedSinceBase(wp.PublicKey) {
				repairs = append(repairs, "peer")
			}
		}
	}
	for _, k := range sortedKeys(want.peers) {
		if seen[k] {
			continue
		}
		wp := want.peers[k]
		pc := wgtypes.PeerConfig{PublicKey: k, ReplaceAllowedIPs: true, AllowedIPs: ipNets(wp.AllowedIPs)}
		if want.keepalive > 0 {
			ka := want.keepalive
			pc.PersistentKeepaliveInterval = &ka
		}
		if wp.Endpoint.IsValid() {
			pc.Endpoint = udpAddr(wp.Endpoint)
		}
		cfg.Peers = append(cfg.Peers, pc)
		if unchangedSinceBase(k) {
			repairs = append(repairs, "peer")
		}
	}
	changed = cfg.PrivateKey != nil || cfg.ListenPort != nil || len(cfg.Peers) > 0
	return cfg, changed, repairs
}

func sortedKeys(m map[wgtypes.Key]Peer) []wgtypes.Key {
	keys := make([]wgtypes.Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b wgtypes.Key) int { return bytes.Compare(a[:], b[:]) })
	return keys
}

// peerEndpoint is the endpoint the device holds for p, unmapped; invalid
// when it has none.
func peerEndpoint(p *wgtypes.Peer) netip.AddrPort {
	if p.Endpoint == nil {
		return netip.AddrPort{}
	}
	ap := p.Endpoint.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// peerAllowed is the device's allowed prefixes of p, normalized as
// normalizePeers does.
func peerAllowed(p *wgtypes.Peer) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(p.AllowedIPs))
	for i := range p.AllowedIPs {
		a, ok := netip.AddrFromSlice(p.AllowedIPs[i].IP)
		ones, bits := p.AllowedIPs[i].Mask.Size()
		if !ok || bits == 0 {
			continue
		}
		if bits == 32 {
			a = a.Unmap()
		}
		if pre, ok := unmapPrefix(a, ones); ok {
			out = append(out, pre)
		}
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out)
}

func udpAddr(ap netip.AddrPort) *net.UDPAddr { return net.UDPAddrFromAddrPort(ap) }

func ipNets(ps []netip.Prefix) []net.IPNet {
	out := make([]net.IPNet, 0, len(ps))
	for _, p := range ps {
		bits := 32
		if p.Addr().Is6() {
			bits = 128
		}
		out = append(out, net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)})
	}
	return out
}
