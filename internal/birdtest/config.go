package birdtest

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

// Config is what a BIRD 2 configuration written by Render holds: a router
// ID, `protocol device`, optionally `protocol direct`, two `protocol
// kernel` (ipv4, ipv6) exporting what BGP learned into the namespace's
// main table, a `protocol static` per family announcing Static, and one
// `protocol bgp` per neighbour.
type Config struct {
	RouterID netip.Addr // IPv4; required
	// Direct adds `protocol direct`: the namespace's connected subnets
	// become routes in BIRD's tables (shown by `show route`, never
	// exported by the neighbours' default filters). An iBGP session's
	// next hops are resolved through those tables: without Direct, what
	// an iBGP neighbour announces is unreachable here.
	Direct bool
	// NoKernel leaves out the kernel protocols: learned routes stay in
	// BIRD's tables only.
	NoKernel bool
	// Static are prefixes announced to the neighbours (blackhole routes,
	// so nothing is installed for them here).
	Static    []netip.Prefix
	Neighbors []Neighbor
	// Extra is appended to the configuration as it is (a filter, another
	// protocol).
	Extra string
}

// Neighbor is one `protocol bgp`. The address's family decides the
// session's one channel: an IPv4 neighbour carries ipv4 unicast, an IPv6
// one ipv6 unicast, as routelet's speaker does.
type Neighbor struct {
	// Name is the protocol's name in birdc; "" is ProtocolName(Address).
	Name     string
	Address  netip.Addr
	ASN      uint32     // the neighbour's AS
	LocalASN uint32     // this router's AS on the session; required
	Local    netip.Addr // source address of the session; invalid: BIRD picks
	Port     uint16     // the neighbour's TCP port; 0 is 179
	// Password is the TCP MD5 key; "" none.
	Password string
	// GracefulRestart turns on RFC 4724 for the session (restarting peers'
	// routes are kept, marked stale); RestartTime is what this router
	// advertises (0: BIRD's default, 120 s).
	GracefulRestart bool
	RestartTime     time.Duration
	// RouteReflectorClient makes the neighbour a route-reflector client:
	// routes learned from one client are reflected to the others.
	RouteReflectorClient bool
	// Passive: only accept the neighbour's connections.
	Passive bool
	// Multihop allows an eBGP neighbour that is not on a connected subnet.
	Multihop bool
	// Disabled writes the protocol disabled (`birdc enable` starts it).
	Disabled bool
	// Accept, when not nil, is the import filter: only routes for exactly
	// these prefixes are taken from the neighbour (of the session's
	// family; an empty list takes none). Nil takes every route.
	Accept []netip.Prefix
	// Export is the export filter as BIRD writes it after `export`
	// ("all", "none", "where …"); "" exports the static routes and, to a
	// route-reflector client, every BGP route too.
	Export string
	// NextHopSelf sets this router's address as next hop on every route
	// exported over the session (eBGP does so anyway).
	NextHopSelf bool
}

// ProtocolName is the protocol name Render gives a neighbour without a
// Name: "peer_" and the address with its dots and colons as underscores.
func ProtocolName(a netip.Addr) string {
	return "peer_" + strings.NewReplacer(".", "_", ":", "_").Replace(a.String())
}

// name returns the neighbour's protocol name.
func (n Neighbor) name() string {
	if n.Name != "" {
		return n.Name
	}
	return ProtocolName(n.Address)
}

// symbol is what BIRD takes as a protocol name without quoting.
var symbol = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the values Render writes, so that a typo in a test shows
// as an error naming it rather than as BIRD refusing its configuration.
func (c Config) Validate() error {
	if !c.RouterID.Is4() {
		return fmt.Errorf("bird config: router ID %v: want an IPv4 address", c.RouterID)
	}
	for _, p := range c.Static {
		if !p.IsValid() || p != p.Masked() {
			return fmt.Errorf("bird config: static prefix %v: want a valid masked prefix", p)
		}
	}
	seen := map[string]bool{}
	for _, n := range c.Neighbors {
		name := n.name()
		switch {
		case !symbol.MatchString(name):
			return fmt.Errorf("bird config: protocol name %q: want letters, digits and underscores", name)
		case seen[name]:
			return fmt.Errorf("bird config: protocol name %q used twice", name)
		case !n.Address.IsValid() || n.Address.Zone() != "":
			return fmt.Errorf("bird config: neighbour %s address %v: want an address without zone", name, n.Address)
		case n.ASN == 0 || n.LocalASN == 0:
			return fmt.Errorf("bird config: neighbour %s: AS %d, local AS %d: want both set", name, n.ASN, n.LocalASN)
		case n.Local.IsValid() && n.Local.Is4() != n.Address.Is4():
			return fmt.Errorf("bird config: neighbour %s: local address %s of another family than %s", name, n.Local, n.Address)
		case strings.ContainsAny(n.Password, "\"\\\n"):
			return fmt.Errorf("bird config: neighbour %s: password with a quote, backslash or newline", name)
		case n.RestartTime < 0 || n.RestartTime > 4095*time.Second:
			return fmt.Errorf("bird config: neighbour %s: restart time %s: want 0..4095s", name, n.RestartTime)
		case strings.ContainsAny(n.Export, ";{}"):
			return fmt.Errorf("bird config: neighbour %s: export %q: want one filter expression without ; { }", name, n.Export)
		}
		for _, p := range n.Accept {
			if !p.IsValid() || p != p.Masked() {
				return fmt.Errorf("bird config: neighbour %s: accepted prefix %v: want a valid masked prefix", name, p)
			}
		}
		seen[name] = true
	}
	return nil
}

// Render returns the configuration as BIRD reads it. Times in `show`
// output are Unix seconds (timeformat "%s"), so the parsers here read them
// whatever the date.
func (c Config) Render() (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by routelet's internal/birdtest.")
	w("router id %s;", c.RouterID)
	w(`log stderr all;`)
	w(`timeformat protocol "%%s";`)
	w(`timeformat route "%%s";`)
	w(`timeformat base "%%s";`)
	w("")
	w("protocol device { scan time 1; }")
	if c.Direct {
		w("protocol direct { ipv4; ipv6; }")
	}
	if !c.NoKernel {
		for _, fam := range []string{"ipv4", "ipv6"} {
			w("protocol kernel kernel_%s {", fam)
			w("\tscan time 1;")
			w("\t%s { import none; export where source = RTS_BGP; };", fam)
			w("}")
		}
	}
	var s4, s6 []netip.Prefix
	for _, p := range c.Static {
		if p.Addr().Is4() {
			s4 = append(s4, p)
		} else {
			s6 = append(s6, p)
		}
	}
	for _, s := range []struct {
		fam string
		ps  []netip.Prefix
	}{{"ipv4", s4}, {"ipv6", s6}} {
		if len(s.ps) == 0 {
			continue
		}
		w("protocol static static_%s {", s.fam)
		w("\t%s;", s.fam)
		for _, p := range s.ps {
			w("\troute %s blackhole;", p)
		}
		w("}")
	}
	for _, n := range c.Neighbors {
		fam := "ipv4"
		if n.Address.Is6() {
			fam = "ipv6"
		}
		w("")
		w("protocol bgp %s {", n.name())
		if n.Disabled {
			w("\tdisabled;")
		}
		if n.Local.IsValid() {
			w("\tlocal %s as %d;", n.Local, n.LocalASN)
		} else {
			w("\tlocal as %d;", n.LocalASN)
		}
		nb := fmt.Sprintf("\tneighbor %s", n.Address)
		if n.Port != 0 {
			nb += fmt.Sprintf(" port %d", n.Port)
		}
		w("%s as %d;", nb, n.ASN)
		if n.Password != "" {
			w("\tpassword \"%s\";", n.Password)
		}
		if n.GracefulRestart {
			w("\tgraceful restart on;")
			if n.RestartTime > 0 {
				w("\tgraceful restart time %d;", int(n.RestartTime/time.Second))
			}
		}
		if n.RouteReflectorClient {
			w("\trr client;")
		}
		if n.Passive {
			w("\tpassive on;")
		}
		if n.Multihop {
			w("\tmultihop;")
		}
		// Connect and retry quickly (BIRD waits 5 s before the first
		// attempt, 120 s between): the tests start and restart peers and
		// expect the session up within seconds.
		w("\tconnect delay time 1;")
		w("\tconnect retry time 1;")
		w("\terror wait time 1, 5;")
		w("\t%s {", fam)
		w("\t\timport %s;", n.importFilter())
		w("\t\texport %s;", n.exportFilter())
		if n.NextHopSelf {
			w("\t\tnext hop self;")
		}
		w("\t};")
		w("}")
	}
	if c.Extra != "" {
		w("")
		w("%s", c.Extra)
	}
	return b.String(), nil
}

// importFilter is the neighbour's import clause after `import`.
func (n Neighbor) importFilter() string {
	if n.Accept == nil {
		return "all"
	}
	var set []string
	for _, p := range n.Accept {
		if p.Addr().Is4() == n.Address.Is4() {
			set = append(set, p.String())
		}
	}
	if len(set) == 0 {
		return "none"
	}
	return "where net ~ [ " + strings.Join(set, ", ") + " ]"
}

// exportFilter is the neighbour's export clause after `export`.
func (n Neighbor) exportFilter() string {
	switch {
	case n.Export != "":
		return n.Export
	case n.RouteReflectorClient:
		return "where source ~ [ RTS_STATIC, RTS_BGP ]"
	default:
		return "where source = RTS_STATIC"
	}
}

// Subnets returns the first n prefixes of length bits inside pool, in
// address order: the Static routes of a bench announcing n prefixes.
func Subnets(pool netip.Prefix, bits, n int) ([]netip.Prefix, error) {
	pool = pool.Masked()
	total := bits - pool.Bits()
	if !pool.IsValid() || bits < pool.Bits() || bits > pool.Addr().BitLen() || n < 0 {
		return nil, fmt.Errorf("subnets of %v: %d of /%d: want a valid pool, a length from %d to %d, n ≥ 0", pool, n, bits, pool.Bits(), pool.Addr().BitLen())
	}
	if total < 31 && n > 1<<total {
		return nil, fmt.Errorf("subnets of %v: %d /%d wanted, it holds %d", pool, n, bits, 1<<total)
	}
	out := make([]netip.Prefix, 0, n)
	a := pool.Addr()
	for range n {
		out = append(out, netip.PrefixFrom(a, bits))
		a = addPow2(a, a.BitLen()-bits)
	}
	return out, nil
}

// addPow2 returns a + 2^shift (wrapping, which Subnets' bound rules out).
func addPow2(a netip.Addr, shift int) netip.Addr {
	b := a.AsSlice()
	i := len(b) - 1 - shift/8
	carry := 1 << (shift % 8)
	for ; i >= 0 && carry > 0; i-- {
		v := int(b[i]) + carry
		b[i], carry = byte(v), v>>8
	}
	r, _ := netip.AddrFromSlice(b)
	return r
}
