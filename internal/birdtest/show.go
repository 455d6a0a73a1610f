package birdtest

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Protocol is one line of `show protocols`.
type Protocol struct {
	Name  string
	Proto string // BGP, Kernel, Static, Device, Direct
	Table string // "---" for BGP (its channels have tables)
	State string // up, start, down, stop
	Since time.Time
	// Info is the rest of the line: for BGP the session's state
	// ("Established", "Active", "Connect", …) and, after it, the last
	// error ("Socket: Connection refused").
	Info string
}

// BGPState is the first word of Info: the BGP session state of a BGP
// protocol ("Established", "Idle", "Connect", "Active", "OpenSent",
// "OpenConfirm", "Close").
func (p Protocol) BGPState() string {
	s, _, _ := strings.Cut(p.Info, " ")
	return s
}

// Established reports whether a BGP protocol's session is up.
func (p Protocol) Established() bool { return p.State == "up" && p.BGPState() == "Established" }

// Protocols returns `show protocols`, in BIRD's order.
func (b *Bird) Protocols(ctx context.Context) ([]Protocol, error) {
	out, err := b.Birdc(ctx, "show", "protocols")
	if err != nil {
		return nil, err
	}
	return ParseProtocols(out)
}

// Protocol returns the line of `show protocols` for name.
func (b *Bird) Protocol(ctx context.Context, name string) (Protocol, error) {
	ps, err := b.Protocols(ctx)
	if err != nil {
		return Protocol{}, err
	}
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
	}
	return Protocol{}, fmt.Errorf("bird has no protocol %q", name)
}

// ParseProtocols reads the output of `show protocols` (times as Unix
// seconds, as Config writes timeformat).
func ParseProtocols(out string) ([]Protocol, error) {
	var ps []Protocol
	sc := bufio.NewScanner(strings.NewReader(out))
	header := false
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if !header {
			if len(f) >= 5 && f[0] == "Name" && f[1] == "Proto" {
				header = true
				continue
			}
			return nil, fmt.Errorf("show protocols: %q before the header", line)
		}
		if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
			continue // the details of `show protocols all`
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("show protocols: line %q: want name, proto, table, state, since", line)
		}
		secs, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("show protocols: line %q: since %q: want Unix seconds", line, f[4])
		}
		ps = append(ps, Protocol{Name: f[0], Proto: f[1], Table: f[2], State: f[3], Since: time.Unix(secs, 0),
			Info: strings.Join(f[5:], " ")})
	}
	if !header {
		return nil, fmt.Errorf("show protocols: no header in %q", out)
	}
	return ps, nil
}

// ProtocolDetail is what `show protocols all NAME` adds for a BGP
// protocol.
type ProtocolDetail struct {
	Protocol
	BGPState  string // "BGP state:"
	LastError string // "Last error:", "" none
	// GracefulRestart: "Neighbor graceful restart active", the routes
	// learned from the neighbour are kept (stale) until it is back or
	// its restart time passes.
	GracefulRestart bool
	// Routes is the channels' "Routes:" line, e.g. "3 imported, 0
	// exported, 3 preferred"; one entry per channel.
	Routes []string
}

// Detail returns `show protocols all name`.
func (b *Bird) Detail(ctx context.Context, name string) (ProtocolDetail, error) {
	if !symbol.MatchString(name) {
		return ProtocolDetail{}, fmt.Errorf("show protocols all %q: not a protocol name", name)
	}
	out, err := b.Birdc(ctx, "show", "protocols", "all", name)
	if err != nil {
		return ProtocolDetail{}, err
	}
	return ParseDetail(out)
}

// ParseDetail reads the output of `show protocols all NAME` for one
// protocol.
func ParseDetail(out string) (ProtocolDetail, error) {
	ps, err := ParseProtocols(out)
	if err != nil {
		return ProtocolDetail{}, err
	}
	if len(ps) != 1 {
		return ProtocolDetail{}, fmt.Errorf("show protocols all: %d protocols, want one", len(ps))
	}
	d := ProtocolDetail{Protocol: ps[0]}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "BGP state:"):
			d.BGPState = strings.TrimSpace(strings.TrimPrefix(line, "BGP state:"))
		case strings.HasPrefix(line, "Last error:"):
			d.LastError = strings.TrimSpace(strings.TrimPrefix(line, "Last error:"))
		case line == "Neighbor graceful restart active":
			d.GracefulRestart = true
		case strings.HasPrefix(line, "Routes:"):
			d.Routes = append(d.Routes, strings.TrimSpace(strings.TrimPrefix(line, "Routes:")))
		}
	}
	return d, nil
}

// Route is one route of `show route`.
type Route struct {
	Table    string // master4, master6
	Prefix   netip.Prefix
	Type     string // unicast, blackhole, unreachable, prohibit
	Protocol string // the protocol it came from
	Since    time.Time
	Primary  bool // the best route for the prefix (marked *)
	// NextHop and Iface are the first "via NEXT on IFACE" ("dev IFACE"
	// for a connected route: no next hop).
	NextHop netip.Addr
	Iface   string
	From    netip.Addr // "from": the BGP neighbour, when it is not the next hop
	Pref    int
	ASPath  string // "AS65001i" as BIRD shows it; "" when not BGP
	// Stale is BIRD's mark of a route kept for a restarting neighbour
	// (graceful restart), an "s" after the preference. BIRD 2.0.12 does
	// not print it; ProtocolDetail.GracefulRestart tells it there.
	Stale bool
}

// String is how `show route` would put it, in short.
func (r Route) String() string {
	s := fmt.Sprintf("%s %s [%s]", r.Prefix, r.Type, r.Protocol)
	if r.NextHop.IsValid() {
		s += " via " + r.NextHop.String()
	}
	if r.Iface != "" {
		s += " on " + r.Iface
	}
	if r.Stale {
		s += " stale"
	}
	return s
}

// Routes returns `show route` with args after it (none: every table's
// best and other routes; "protocol", NAME; "table", "master6"; "all" is
// not needed: the attributes are not parsed).
func (b *Bird) Routes(ctx context.Context, args ...string) ([]Route, error) {
	for _, a := range args {
		if !symbol.MatchString(a) && a != "*" {
			if _, err := netip.ParsePrefix(a); err != nil {
				return nil, fmt.Errorf("show route %q: want words, names and prefixes", a)
			}
		}
	}
	out, err := b.Birdc(ctx, append([]string{"show", "route"}, args...)...)
	if err != nil {
		return nil, err
	}
	return ParseRoutes(out)
}

// ProtocolRoutes returns the routes that came from protocol name, in
// every table.
func (b *Bird) ProtocolRoutes(ctx context.Context, name string) ([]Route, error) {
	if !symbol.MatchString(name) {
		return nil, fmt.Errorf("show route protocol %q: not a protocol name", name)
	}
	var out []Route
	for _, tab := range []string{"master4", "master6"} {
		rs, err := b.Routes(ctx, "table", tab, "protocol", name)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// BGPPrefixes returns the prefixes of the primary BGP routes in every
// table (what BGP gave this router), sorted.
func (b *Bird) BGPPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	ps, err := b.Protocols(ctx)
	if err != nil {
		return nil, err
	}
	bgp := map[string]bool{}
	for _, p := range ps {
		if p.Proto == "BGP" {
			bgp[p.Name] = true
		}
	}
	rs, err := b.Routes(ctx)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, r := range rs {
		if r.Primary && bgp[r.Protocol] {
			out = append(out, r.Prefix)
		}
	}
	slices.SortFunc(out, comparePrefix)
	return out, nil
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

var (
	// 10.100.0.0/24        unicast [peer_a 1796217875 from 10.0.0.9] * (100s) [AS65001i]
	// and, for another route to the same prefix, the same without the prefix.
	routeLine = regexp.MustCompile(`^(\S+)?\s+(\w+) \[(\S+) (\d+)(?: from (\S+))?\](?: ([*!]))?(?: \((\d+)(-?)(s?)(?:/[^)]*)?\))?(?: \[([^\]]*)\])?`)
	viaLine   = regexp.MustCompile(`^\s+via (\S+) on (\S+)`)
	devLine   = regexp.MustCompile(`^\s+dev (\S+)`)
)

// ParseRoutes reads the output of `show route` (times as Unix seconds).
func ParseRoutes(out string) ([]Route, error) {
	var rs []Route
	table := ""
	var last netip.Prefix
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case trim == "":
			continue
		case strings.HasPrefix(line, "Table ") && strings.HasSuffix(trim, ":"):
			table = strings.TrimSuffix(strings.TrimPrefix(trim, "Table "), ":")
			last = netip.Prefix{}
			continue
		}
		if m := viaLine.FindStringSubmatch(line); m != nil {
			if len(rs) == 0 {
				return nil, fmt.Errorf("show route: %q before any route", line)
			}
			r := &rs[len(rs)-1]
			if !r.NextHop.IsValid() {
				a, err := netip.ParseAddr(m[1])
				if err != nil {
					return nil, fmt.Errorf("show route: line %q: next hop: %w", line, err)
				}
				r.NextHop, r.Iface = a, m[2]
			}
			continue
		}
		if m := devLine.FindStringSubmatch(line); m != nil {
			if len(rs) == 0 {
				return nil, fmt.Errorf("show route: %q before any route", line)
			}
			if r := &rs[len(rs)-1]; r.Iface == "" {
				r.Iface = m[1]
			}
			continue
		}
		if strings.HasPrefix(line, "\t") {
			continue // attributes of `show route all`
		}
		m := routeLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("show route: line %q not understood", line)
		}
		r := Route{Table: table, Type: m[2], Protocol: m[3], Primary: m[6] == "*", Stale: m[9] == "s", ASPath: m[10]}
		if m[1] != "" {
			p, err := netip.ParsePrefix(m[1])
			if err != nil {
				return nil, fmt.Errorf("show route: line %q: %w", line, err)
			}
			last = p
		} else if !last.IsValid() {
			return nil, fmt.Errorf("show route: line %q: another route with no prefix before", line)
		}
		r.Prefix = last
		secs, _ := strconv.ParseInt(m[4], 10, 64)
		r.Since = time.Unix(secs, 0)
		if m[5] != "" {
			a, err := netip.ParseAddr(m[5])
			if err != nil {
				return nil, fmt.Errorf("show route: line %q: from: %w", line, err)
			}
			r.From = a
		}
		if m[7] != "" {
			r.Pref, _ = strconv.Atoi(m[7])
		}
		rs = append(rs, r)
	}
	return rs, nil
}
