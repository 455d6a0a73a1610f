package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/routelet/routelet/pkg/peers"
)

// BGP defaults (the bgp-* keys').
const (
	// DefaultBGPAS is bgp-as's default: the first private 16-bit AS
	// (RFC 6996), Calico's default too.
	DefaultBGPAS = 64512
	// DefaultBGPListenPort is BGP's TCP port.
	DefaultBGPListenPort = 179
	// DefaultBGPRestartTime is the graceful restart time advertised.
	DefaultBGPRestartTime = 120 * time.Second
	// MaxBGPRestartTime is the longest restart time graceful restart can
	// advertise (12 bits of seconds, RFC 4724).
	MaxBGPRestartTime = 4095 * time.Second
	// DefaultBGPRouteProtocol is the kernel's RTPROT_BGP ("bgp" in
	// /etc/iproute2/rt_protos).
	DefaultBGPRouteProtocol = 186
	// DefaultBGPMaxPrefixes bounds the prefixes a peer may announce per
	// family.
	DefaultBGPMaxPrefixes = 10000
)

// BGP is the BGP speaker's configuration (the bgp-* keys).
type BGP struct {
	Enabled  bool       // bgp: run the speaker
	ASN      uint32     // bgp-as: this node's AS, published in its record
	RouterID netip.Addr // bgp-router-id: invalid means the node's host IPv4
	NodeMesh bool       // bgp-node-mesh: a session to every node record with an AS
	// Peers are the bgp-peer sessions (PasswordFile set, never read here:
	// the daemon reads each with BGPPeer.Password when it configures the
	// session; Load checked that it can).
	Peers []peers.BGPPeer
	// Pools are the prefixes learned routes may fall in (bgp-pool); empty
	// means every node record's blocks, this node's included.
	Pools           []netip.Prefix
	ListenPort      int           // bgp-listen-port: 0 does not listen
	GracefulRestart bool          // bgp-graceful-restart
	RestartTime     time.Duration // bgp-restart-time, advertised to the peers
	RouteProtocol   int           // bgp-route-protocol: the learned routes' kernel protocol
	MaxPrefixes     int           // bgp-max-prefixes: per peer and family; 0 is no limit
}

// bgpKeys are the BGP speaker's keys.
func bgpKeys() []key {
	return []key{
		{name: "bgp", help: "run a BGP speaker: announce this node's pod blocks to the other nodes (bgp-node-mesh) and the bgp-peer routers",
			isBool: true, def: []string{"false"}, set: func(c *Config, v []string) error {
				return parseBool(&c.BGP.Enabled, v[0])
			}},
		{name: "bgp-as", help: "this node's BGP AS number (1-4294967294), published in its node record",
			def: []string{strconv.Itoa(DefaultBGPAS)}, set: func(c *Config, v []string) error {
				n, err := peers.ParseASN(strings.TrimSpace(v[0]))
				if err != nil {
					return err
				}
				c.BGP.ASN = n
				return nil
			}},
		{name: "bgp-router-id", help: "BGP router ID, an IPv4 address; empty is the node's host IPv4 (required on a node without one)",
			def: []string{""}, set: func(c *Config, v []string) error {
				c.BGP.RouterID = netip.Addr{}
				s := strings.TrimSpace(v[0])
				if s == "" {
					return nil
				}
				a, err := netip.ParseAddr(s)
				if err != nil || !a.Is4() {
					return errors.New("not an IPv4 address")
				}
				if a.IsUnspecified() {
					return errors.New("0.0.0.0 is no router ID")
				}
				c.BGP.RouterID = a
				return nil
			}},
		{name: "bgp-node-mesh", help: "keep a BGP session to every node whose record has a BGP AS (bgp)",
			isBool: true, def: []string{"true"}, set: func(c *Config, v []string) error {
				return parseBool(&c.BGP.NodeMesh, v[0])
			}},
		{name: "bgp-peer", help: "external BGP peer ADDRESS,as=N[,port=N][,password-file=PATH][,route-reflector]; repeatable, ';'-separated in env",
			list: true, sep: ";", def: nil, set: func(c *Config, v []string) error {
				c.BGP.Peers = nil
				for _, spec := range v {
					p, err := peers.ParseBGPPeer(spec, false)
					if err != nil {
						return err
					}
					if i := slices.IndexFunc(c.BGP.Peers, func(o peers.BGPPeer) bool { return o.Address == p.Address }); i >= 0 {
						return fmt.Errorf("bgp peer %q: address %s is also peer %q", spec, p.Address, c.BGP.Peers[i])
					}
					// Read now, so an unreadable or bad file stops the
					// daemon at start, not when it opens the session.
					if _, err := p.Password(); err != nil {
						return err
					}
					c.BGP.Peers = append(c.BGP.Peers, p)
				}
				return nil
			}},
		{name: "bgp-pool", help: "CIDR learned BGP routes may fall in; default the blocks of every node record, this node's included; repeatable, comma-separated in env",
			list: true, def: nil, set: func(c *Config, v []string) error {
				var err error
				c.BGP.Pools, err = parsePrefixList(v, false, func(s string, p netip.Prefix, _ []netip.Prefix) error {
					if p.Bits() == 0 || p.Addr().Is4In6() {
						return fmt.Errorf("%q is not a pod pool", s)
					}
					return nil
				})
				return err
			}},
		{name: "bgp-listen-port", help: "TCP port the BGP speaker listens on (0: do not listen, only connect)",
			def: []string{strconv.Itoa(DefaultBGPListenPort)}, set: func(c *Config, v []string) error {
				return parseInt(&c.BGP.ListenPort, v[0], 0, 65535)
			}},
		{name: "bgp-graceful-restart", help: "advertise BGP graceful restart: peers keep this node's routes while it restarts, and it keeps theirs",
			isBool: true, def: []string{"true"}, set: func(c *Config, v []string) error {
				return parseBool(&c.BGP.GracefulRestart, v[0])
			}},
		{name: "bgp-restart-time", help: "graceful restart time advertised to BGP peers (whole seconds, 1s-4095s)",
			def: []string{durationDefault(DefaultBGPRestartTime)}, set: func(c *Config, v []string) error {
				if err := parseDuration(&c.BGP.RestartTime, v[0], time.Second); err != nil {
					return err
				}
				switch {
				case c.BGP.RestartTime > MaxBGPRestartTime:
					return fmt.Errorf("must be at most %s", durationDefault(MaxBGPRestartTime))
				case c.BGP.RestartTime%time.Second != 0:
					return errors.New("must be whole seconds")
				}
				return nil
			}},
		{name: "bgp-route-protocol", help: "route protocol number of the routes learned by BGP (5-255, not route-protocol's)",
			def: []string{strconv.Itoa(DefaultBGPRouteProtocol)}, set: func(c *Config, v []string) error {
				// 0-4 are the kernel's own, as for route-protocol.
				return parseInt(&c.BGP.RouteProtocol, v[0], 5, 255)
			}},
		{name: "bgp-max-prefixes", help: "prefixes a BGP peer may announce per family; more closes the session (0: no limit)",
			def: []string{strconv.Itoa(DefaultBGPMaxPrefixes)}, set: func(c *Config, v []string) error {
				return parseInt(&c.BGP.MaxPrefixes, v[0], 0, 10_000_000)
			}},
	}
}

// checkBGP refuses, with the speaker on, a bgp-route-protocol that is
// route-protocol's: the two route tables would claim each other's routes.
func (c *Config) checkBGP() error {
	if !c.BGP.Enabled {
		return nil
	}
	if c.BGP.RouteProtocol == c.RouteProtocol {
		v := strconv.Itoa(c.BGP.RouteProtocol)
		return c.KeyError("bgp-route-protocol", v, fmt.Errorf("%s is route-protocol's too: the learned routes need a protocol of their own", v))
	}
	return nil
}
