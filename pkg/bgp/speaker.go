package bgp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Defaults of Config's timers.
const (
	DefaultConnectRetry = 5 * time.Second
	DefaultHoldTime     = 90 * time.Second
	DefaultRestartTime  = 120 * time.Second
)

// exportPolicy is the name of the global export policy that lets out only
// the paths SetAnnounced added (GoBGP's "local" route type).
const exportPolicy = "routelet-announced-only"

// Config is a speaker's own side.
type Config struct {
	ASN             uint32     // 1..4294967294
	RouterID        netip.Addr // an IPv4 address
	ListenPort      int        // 0: do not listen (only connect out); the daemon passes 179
	GracefulRestart bool
	RestartTime     time.Duration // advertised with graceful restart, 1s..4095s; 0 is DefaultRestartTime
	// ConnectRetry is how long the speaker waits between connection
	// attempts to a peer (whole seconds, at least 1s); 0 is
	// DefaultConnectRetry. The first attempt comes after 1..2 s.
	ConnectRetry time.Duration
	// HoldTime is proposed in OPEN (whole seconds, 3s..65535s); the
	// keepalive interval is a third of it. 0 is DefaultHoldTime.
	HoldTime time.Duration
	OnChange func() // hint from any goroutine: learned routes or peer states changed
	Logger   *slog.Logger
}

// validate checks c and fills in its defaults.
func (c *Config) validate() error {
	if c.ASN == 0 || c.ASN == 4294967295 {
		return fmt.Errorf("bgp: AS %d: not in 1..4294967294", c.ASN)
	}
	if !c.RouterID.Is4() || c.RouterID.IsUnspecified() {
		return fmt.Errorf("bgp: router ID %v: not an IPv4 address", c.RouterID)
	}
	if c.ListenPort < 0 || c.ListenPort > 65535 {
		return fmt.Errorf("bgp: listen port %d: not in 0..65535", c.ListenPort)
	}
	if c.RestartTime == 0 {
		c.RestartTime = DefaultRestartTime
	}
	if c.RestartTime < time.Second || c.RestartTime > 4095*time.Second {
		return fmt.Errorf("bgp: restart time %s: not in 1s..4095s", c.RestartTime)
	}
	if c.ConnectRetry == 0 {
		c.ConnectRetry = DefaultConnectRetry
	}
	if c.ConnectRetry < time.Second {
		return fmt.Errorf("bgp: connect retry %s: less than 1s", c.ConnectRetry)
	}
	if c.HoldTime == 0 {
		c.HoldTime = DefaultHoldTime
	}
	if c.HoldTime < 3*time.Second || c.HoldTime > 65535*time.Second {
		return fmt.Errorf("bgp: hold time %s: not in 3s..65535s", c.HoldTime)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Speaker is one in-process GoBGP server. Its methods are safe for
// concurrent use.
type Speaker struct {
	cfg Config
	srv *server.BgpServer

	served  chan struct{}             // closed when GoBGP's main loop has ended
	quit    chan struct{}             // closed by Stop/Close: ends the hint goroutine
	hinted  chan struct{}             // closed when the hint goroutine has ended
	hint    chan struct{}             // one pending OnChange hint
	finalOp atomic.Pointer[time.Time] // set before the operation after which GoBGP's loop ends

	mu         sync.Mutex
	done       bool
	announcing bool                // SetAnnounced was called: sessions may start
	pending    map[netip.Addr]Peer // the peers wanted before that
	peers      map[netip.Addr]Peer // the peers GoBGP has
	announced  map[netip.Prefix]announcement

	notesMu sync.Mutex
	notes   map[netip.Addr]*peerNotes
}

// announcement is one prefix given to GoBGP, withdrawn by giving the
// same path to DeletePath.
type announcement struct {
	nextHop netip.Addr
}

// New starts a speaker with no peers and nothing announced. It listens on
// cfg.ListenPort (all addresses, both families) unless that is 0.
func New(cfg Config) (*Speaker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Speaker{
		cfg:       cfg,
		served:    make(chan struct{}),
		quit:      make(chan struct{}),
		hinted:    make(chan struct{}),
		hint:      make(chan struct{}, 1),
		peers:     map[netip.Addr]Peer{},
		announced: map[netip.Prefix]announcement{},
		notes:     map[netip.Addr]*peerNotes{},
	}
	s.srv = server.NewBgpServer(
		server.LoggerOption(&gobgpLogger{log: cfg.Logger, note: s.note}),
		server.TimingHookOption(loopHook{s}),
	)
	go func() {
		defer close(s.served)
		s.srv.Serve()
	}()
	go s.hints()

	port := int32(cfg.ListenPort)
	if port == 0 {
		port = -1 // GoBGP: 0 would be 179, negative is no listener
	}
	ctx := context.Background()
	err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:        cfg.ASN,
		RouterId:   cfg.RouterID.String(),
		ListenPort: port,
		// GoBGP's AfiSafiType numbers: ipv4-unicast, ipv6-unicast.
		Families: []uint32{0, 1},
	}})
	if err == nil {
		err = s.srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{
			Name: exportPolicy,
			Statements: []*api.Statement{{
				Name:       exportPolicy + "-local",
				Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
				Actions:    &api.Actions{RouteAction: api.RouteAction_ACCEPT},
			}},
		}})
	}
	if err == nil {
		err = s.srv.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name:          "global",
			Direction:     api.PolicyDirection_EXPORT,
			Policies:      []*api.Policy{{Name: exportPolicy}},
			DefaultAction: api.RouteAction_REJECT,
		}})
	}
	if err != nil {
		s.shutdown(false)
		return nil, fmt.Errorf("bgp: start (AS %d, router ID %s, port %d): %w", cfg.ASN, cfg.RouterID, cfg.ListenPort, err)
	}
	return s, nil
}

var (
	v4Family = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	v6Family = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// familyOf is the family a peer's or a prefix's address decides.
func familyOf(a netip.Addr) *api.Family {
	if a.Is4() {
		return v4Family
	}
	return v6Family
}

var errStopped = errors.New("bgp: speaker stopped")

// checkPeer validates one wanted peer, unmapping its address.
func checkPeer(p Peer) (Peer, error) {
	p.Address = p.Address.Unmap()
	a := p.Address
	if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.Zone() != "" {
		return p, fmt.Errorf("bgp: peer address %v: not a unicast address", p.Address)
	}
	if p.ASN == 0 || p.ASN == 4294967295 {
		return p, fmt.Errorf("bgp: peer %s: AS %d not in 1..4294967294", a, p.ASN)
	}
	if p.MaxPrefixes < 0 || int64(p.MaxPrefixes) > 1<<32-1 {
		return p, fmt.Errorf("bgp: peer %s: max prefixes %d out of range", a, p.MaxPrefixes)
	}
	if strings.ContainsRune(p.Password, 0) || len(p.Password) > 80 {
		return p, fmt.Errorf("bgp: peer %s: TCP MD5 password longer than 80 bytes or holding NUL", a)
	}
	return p, nil
}

// sessionEqual reports whether a and b make the same session: they differ
// at most in what only status shows.
func sessionEqual(a, b Peer) bool {
	a.Description, b.Description = "", ""
	a.RouteReflector, b.RouteReflector = false, false
	return a == b
}

// SetPeers makes the sessions those of ps, by difference keyed by address:
// new peers are added, missing ones deleted (with a Cease), and a peer whose
// AS, port, password or prefix limit changed is deleted and added again.
// Nothing changes when ps holds an invalid peer or an address twice.
//
// Until SetAnnounced was called once the peers are only remembered (their
// status is idle): a session that came up before would send End-of-RIB
// with nothing announced, and a peer keeping our routes across a restart
// (graceful restart) drops, at End-of-RIB, those not announced again.
func (s *Speaker) SetPeers(ps []Peer) error {
	want := make(map[netip.Addr]Peer, len(ps))
	for _, p := range ps {
		p, err := checkPeer(p)
		if err != nil {
			return err
		}
		if _, dup := want[p.Address]; dup {
			return fmt.Errorf("bgp: peer %s given twice", p.Address)
		}
		want[p.Address] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errStopped
	}
	if !s.announcing {
		s.pending = want
		return nil
	}
	return s.applyPeers(want)
}

// applyPeers changes GoBGP's peers to want. s.mu is held.
func (s *Speaker) applyPeers(want map[netip.Addr]Peer) error {
	ctx := context.Background()
	var errs []error
	for _, a := range slices.SortedFunc(maps.Keys(s.peers), netip.Addr.Compare) {
		old := s.peers[a]
		if p, ok := want[a]; ok && sessionEqual(old, p) {
			s.peers[a] = p
			continue
		}
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: delete peer %s: %w", a, err))
			continue
		}
		delete(s.peers, a)
	}
	for _, a := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		if _, ok := s.peers[a]; ok {
			continue
		}
		p := want[a]
		s.clearNotes(a)
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(p)}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: add peer %s (AS %d): %w", a, p.ASN, err))
			continue
		}
		s.peers[a] = p
	}
	s.poke()
	return errors.Join(errs...)
}

// apiPeer is p as GoBGP takes it.
func (s *Speaker) apiPeer(p Peer) *api.Peer {
	fam := familyOf(p.Address)
	afi := &api.AfiSafi{
		Config: &api.AfiSafiConfig{Family: fam, Enabled: true},
	}
	if p.MaxPrefixes > 0 {
		afi.PrefixLimits = &api.PrefixLimit{Family: fam, MaxPrefixes: uint32(p.MaxPrefixes)}
	}
	hold := uint64(s.cfg.HoldTime / time.Second)
	ap := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    p.Password,
			Description:     p.Description,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(s.cfg.ConnectRetry / time.Second),
			HoldTime:          hold,
			KeepaliveInterval: max(hold/3, 1),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		AfiSafis:  []*api.AfiSafi{afi},
	}
	if s.cfg.GracefulRestart {
		// LocalRestarting sets the Restart State bit and, with it, GoBGP
		// sets the Forwarding State bit for the family: the kernel keeps
		// the routes this node programmed across a restart of the
		// speaker. A peer that had no session before ignores both. The
		// short deferral bounds how long GoBGP holds our own prefixes
		// back waiting for the peers' End-of-RIB: they do not depend on
		// anything learned.
		ap.GracefulRestart = &api.GracefulRestart{
			Enabled:         true,
			RestartTime:     uint32(s.cfg.RestartTime / time.Second),
			DeferralTime:    1,
			LocalRestarting: true,
		}
		afi.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
	}
	return ap
}

// SetAnnounced makes the announced prefixes those given, by difference
// (the first call also starts the sessions SetPeers asked for):
// IPv4 prefixes with next hop nextHop4, IPv6 ones with nextHop6 (sent as
// MP_REACH_NLRI). A next hop only has to be valid when prefixes of its
// family are given; a changed next hop re-announces that family's
// prefixes. Nothing changes when an argument is invalid.
func (s *Speaker) SetAnnounced(prefixes []netip.Prefix, nextHop4, nextHop6 netip.Addr) error {
	want := make(map[netip.Prefix]netip.Addr, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			return fmt.Errorf("bgp: announce %v: invalid prefix", p)
		}
		if p.Addr().Is4In6() {
			return fmt.Errorf("bgp: announce %s: IPv4-mapped IPv6 prefix", p)
		}
		p = p.Masked()
		nh := nextHop6
		if p.Addr().Is4() {
			nh = nextHop4
			if !nh.Is4() || nh.IsUnspecified() {
				return fmt.Errorf("bgp: announce %s: IPv4 next hop %v is not an IPv4 address", p, nextHop4)
			}
		} else if !nh.Is6() || nh.Is4In6() || nh.IsUnspecified() || nh.Zone() != "" {
			return fmt.Errorf("bgp: announce %s: IPv6 next hop %v is not a global IPv6 address", p, nextHop6)
		}
		want[p] = nh
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errStopped
	}
	ctx := context.Background()
	var errs []error
	for _, p := range slices.SortedFunc(maps.Keys(s.announced), comparePrefix) {
		a := s.announced[p]
		if nh, ok := want[p]; ok && nh == a.nextHop {
			continue
		}
		if _, ok := want[p]; ok {
			// A new next hop: adding the path again replaces it.
			delete(s.announced, p)
			continue
		}
		path, err := localPath(p, a.nextHop)
		if err == nil {
			err = s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: familyOf(p.Addr()), Path: path})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp: withdraw %s: %w", p, err))
			continue
		}
		delete(s.announced, p)
	}
	for _, p := range slices.SortedFunc(maps.Keys(want), comparePrefix) {
		if _, ok := s.announced[p]; ok {
			continue
		}
		nh := want[p]
		path, err := localPath(p, nh)
		if err == nil {
			_, err = s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path})
			if err == nil {
				s.announced[p] = announcement{nextHop: nh}
				continue
			}
		}
		errs = append(errs, fmt.Errorf("bgp: announce %s via %s: %w", p, nh, err))
	}
	if !s.announcing {
		s.announcing = true
		errs = append(errs, s.applyPeers(s.pending))
		s.pending = nil
	}
	return errors.Join(errs...)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

// localPath is the path announcing p via nextHop: IGP origin, the next
// hop as NEXT_HOP for IPv4 and in MP_REACH_NLRI for IPv6.
func localPath(p netip.Prefix, nextHop netip.Addr) (*api.Path, error) {
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: p.Addr().String(), PrefixLen: uint32(p.Bits())})
	if err != nil {
		return nil, err
	}
	fam := familyOf(p.Addr())
	attrs := []proto.Message{&api.OriginAttribute{Origin: 0}}
	if p.Addr().Is4() {
		attrs = append(attrs, &api.NextHopAttribute{NextHop: nextHop.String()})
	} else {
		attrs = append(attrs, &api.MpReachNLRIAttribute{Family: fam, NextHops: []string{nextHop.String()}, Nlris: []*anypb.Any{nlri}})
	}
	pattrs := make([]*anypb.Any, 0, len(attrs))
	for _, a := range attrs {
		an, err := anypb.New(a)
		if err != nil {
			return nil, err
		}
		pattrs = append(pattrs, an)
	}
	return &api.Path{Family: fam, Nlri: nlri, Pattrs: pattrs}, nil
}

// Learned returns every path learned from a peer that has a usable next
// hop, sorted by prefix and, for one prefix, in the speaker's order of
// preference: the best path first. A caller that refuses a path (the
// daemon's checks) takes the next one, so a path preferred by BGP's
// rules cannot hide an acceptable one. Our own announcements are never
// among them. Stale paths (kept for a restarting peer) are included,
// marked. It is empty after Stop or Close.
func (s *Speaker) Learned() []Route {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	var out []Route
	for _, fam := range []*api.Family{v4Family, v6Family} {
		err := s.srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: fam}, func(d *api.Destination) {
			start := len(out)
			for _, p := range d.Paths {
				if !learnedFrom(p).IsValid() || p.IsWithdraw || p.Filtered {
					continue
				}
				if r, ok := toRoute(d.Prefix, p); ok {
					if p.Best {
						// The best path first, the others in the order
						// the speaker ranks them.
						out = append(out, Route{})
						copy(out[start+1:], out[start:])
						out[start] = r
					} else {
						out = append(out, r)
					}
				}
			}
		})
		if err != nil {
			s.cfg.Logger.Warn("bgp: list learned paths", "family", fam.Afi.String(), "err", err)
		}
	}
	slices.SortStableFunc(out, func(a, b Route) int { return comparePrefix(a.Prefix, b.Prefix) })
	return out
}

// learnedFrom is the peer a path came from; invalid for our own paths.
func learnedFrom(p *api.Path) netip.Addr {
	a, err := netip.ParseAddr(p.NeighborIp)
	if err != nil || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a.Unmap()
}

// toRoute reads one learned path.
func toRoute(prefix string, p *api.Path) (Route, bool) {
	pfx, err := netip.ParsePrefix(prefix)
	if err != nil {
		return Route{}, false
	}
	r := Route{Prefix: pfx.Masked(), Peer: learnedFrom(p), Stale: p.Stale}
	for _, an := range p.Pattrs {
		m, err := an.UnmarshalNew()
		if err != nil {
			continue
		}
		switch a := m.(type) {
		case *api.NextHopAttribute:
			if nh, err := netip.ParseAddr(a.NextHop); err == nil && !r.NextHop.IsValid() {
				r.NextHop = nh.Unmap()
			}
		case *api.MpReachNLRIAttribute:
			for _, h := range a.NextHops {
				// The first next hop is the global one; a second one
				// would be link-local.
				if nh, err := netip.ParseAddr(h); err == nil && !nh.IsLinkLocalUnicast() {
					r.NextHop = nh.Unmap()
					break
				}
			}
		case *api.AsPathAttribute:
			for _, seg := range a.Segments {
				r.ASPath = append(r.ASPath, seg.Numbers...)
			}
		}
	}
	return r, r.NextHop.IsValid()
}

// sessionStates names GoBGP's session states as PeerStatus has them.
var sessionStates = map[api.PeerState_SessionState]string{
	api.PeerState_IDLE:        "idle",
	api.PeerState_CONNECT:     "connect",
	api.PeerState_ACTIVE:      "active",
	api.PeerState_OPENSENT:    "opensent",
	api.PeerState_OPENCONFIRM: "openconfirm",
	api.PeerState_ESTABLISHED: "established",
}

// Peers returns the state of every session SetPeers made, sorted by
// address. It is empty after Stop or Close.
func (s *Speaker) Peers() []PeerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	got := map[netip.Addr]*api.Peer{}
	err := s.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		if p.Conf == nil {
			return
		}
		if a, err := netip.ParseAddr(p.Conf.NeighborAddress); err == nil {
			got[a.Unmap()] = p
		}
	})
	if err != nil {
		s.cfg.Logger.Warn("bgp: list peers", "err", err)
	}
	all := maps.Clone(s.peers)
	maps.Copy(all, s.pending)
	out := make([]PeerStatus, 0, len(all))
	for _, a := range slices.SortedFunc(maps.Keys(all), netip.Addr.Compare) {
		st := PeerStatus{Peer: all[a], State: "idle"}
		if p := got[a]; p != nil {
			if p.State != nil {
				if n, ok := sessionStates[p.State.SessionState]; ok {
					st.State = n
				}
			}
			if t := p.Timers.GetState(); t != nil {
				ts := t.Downtime
				if st.State == "established" {
					ts = t.Uptime
				}
				if ts != nil && ts.Seconds > 0 {
					st.Since = ts.AsTime()
				}
			}
			gr := s.cfg.GracefulRestart && hasGracefulRestart(p.State.GetRemoteCap())
			for _, af := range p.AfiSafis {
				if as := af.State; as != nil {
					st.Received += int(as.Received)
					st.Accepted += int(as.Accepted)
					st.Advertised += int(as.Advertised)
					if gr && as.Advertised > 0 {
						st.Advertised-- // GoBGP counts the End-of-RIB it sends with graceful restart
					}
				}
			}
		}
		st.LastError, st.EndOfRIB = s.notesOf(a)
		st.EndOfRIB = st.EndOfRIB && st.State == "established"
		out = append(out, st)
	}
	return out
}

// hasGracefulRestart reports whether caps has the graceful restart
// capability.
func hasGracefulRestart(caps []*anypb.Any) bool {
	for _, c := range caps {
		if c.MessageIs(&api.GracefulRestartCapability{}) {
			return true
		}
	}
	return false
}

// Stop ends every session with a Cease NOTIFICATION (the peers withdraw
// our routes at once), stops listening and ends GoBGP's goroutines. For
// the daemon turning BGP off or cleaning up. Stop and Close after the
// first call of either do nothing.
func (s *Speaker) Stop() error { return s.shutdown(true) }

// Close ends the speaker without telling the peers, as a crash would: the
// sessions' sockets are shut down without a NOTIFICATION, so a peer doing
// graceful restart keeps our routes (stale) for the restart time we
// advertised and a new Speaker on the same address takes them over. For
// SIGTERM and rebuilding the daemon's loop.
func (s *Speaker) Close() error { return s.shutdown(false) }

// shutdown stops the server, sending Cease notifications when notify.
//
// GoBGP has no way to drop sessions silently: StopBgp deletes every peer
// with a Cease. So without notify the sessions' TCP sockets are shut
// down first (shutdownSessions: read and write side, so the peer sees a
// FIN as when the process dies); the FSMs see the connection fail, and the
// notifications StopBgp then tries to write fail on the shut socket.
//
// GoBGP's main loop (Serve) never returns by itself, and StopBgp leaves it
// running. Its timing hook runs on that loop after every operation, so the
// loop is ended there, with runtime.Goexit, after one last operation issued
// once StopBgp returned (see loopHook).
func (s *Speaker) shutdown(notify bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	s.done = true
	var err error
	if !notify {
		addrs := make([]netip.AddrPort, 0, len(s.peers))
		for a, p := range s.peers {
			port := p.Port
			if port == 0 {
				port = 179
			}
			addrs = append(addrs, netip.AddrPortFrom(a, port))
		}
		var n int
		n, err = shutdownSessions(addrs, s.cfg.ListenPort)
		s.cfg.Logger.Debug("bgp: shut down session sockets without notification", "sockets", n)
	}
	if serr := s.srv.StopBgp(context.Background(), &api.StopBgpRequest{}); serr != nil {
		err = errors.Join(err, fmt.Errorf("bgp: stop: %w", serr))
	}
	// The last operation: its timing hook ends the loop.
	at := time.Now()
	s.finalOp.Store(&at)
	_, _ = s.srv.GetBgp(context.Background(), &api.GetBgpRequest{})
	<-s.served
	close(s.quit)
	<-s.hinted
	return err
}

// loopHook is GoBGP's timing hook. It runs on GoBGP's main loop after every
// operation: after each message from a session (state changes, updates) it
// hints OnChange, and after the speaker's last operation it ends the loop.
// That operation is told from earlier ones by when it was issued (the loop
// hands the hook how long the operation waited and took), not by being the
// next one: the hook of the operation before may still be running when the
// last one is issued.
type loopHook struct{ s *Speaker }

func (h loopHook) Observe(kind server.FSMOperation, took, waited time.Duration) {
	switch kind {
	case server.FSMMgmtOp:
		if at := h.s.finalOp.Load(); at != nil && !time.Now().Add(-took-waited).Before(*at) {
			runtime.Goexit()
		}
	case server.FSMMessage:
		h.s.poke()
	}
}

// poke queues one OnChange hint; hints pending already absorb it.
func (s *Speaker) poke() {
	select {
	case s.hint <- struct{}{}:
	default:
	}
}

// hints calls OnChange for the queued hints, away from GoBGP's loop so a
// slow OnChange never holds BGP up, until Stop or Close.
func (s *Speaker) hints() {
	defer close(s.hinted)
	for {
		select {
		case <-s.quit:
			return
		case <-s.hint:
			if s.cfg.OnChange != nil {
				s.cfg.OnChange()
			}
		}
	}
}

// benignReasons are the session state changes that are no error.
var benignReasons = []string{"<nil>", "new-connection", "open-msg-received", "open-msg-negotiated", "idle-hold-timer-expired", "dying", "unknown", "graceful-restart"}

// peerNotes is what GoBGP said about one session: what went wrong, for
// its LastError, and whether End-of-RIB came.
type peerNotes struct {
	eor          bool   // End-of-RIB received since the session came up
	last         string // the last error
	notification string // the last NOTIFICATION sent or received since the session was last up
	detail       string // what GoBGP said before the state change that follows
	listener     string // MD5 could not be set on the listener: kept until the peer is re-made
}

// String is LastError: the last error, the last notification when a
// plain connection error came after it, and a listener problem first.
func (e *peerNotes) String() string {
	out := e.last
	if e.notification != "" && e.notification != e.last {
		out += " (after " + e.notification + ")"
	}
	if e.listener != "" {
		out = strings.TrimSuffix(e.listener+"; "+out, "; ")
	}
	return out
}

// note watches GoBGP's messages about a peer (its Key field) for the
// reason a session failed or did not come up, and for End-of-RIB. GoBGP's
// own End-of-RIB flag cannot serve: when both sides restart it is set
// as soon as the peer's OPEN has the Restart State bit, before anything
// came (GoBGP then need not wait for it), while status must say whether
// the peer has sent all its routes.
func (s *Speaker) note(msg string, f gobgplog.Fields) {
	key, _ := f["Key"].(string)
	a, err := netip.ParseAddr(key)
	if err != nil {
		return
	}
	a = a.Unmap()
	s.notesMu.Lock()
	defer s.notesMu.Unlock()
	e := s.notes[a]
	if e == nil {
		e = &peerNotes{}
		s.notes[a] = e
	}
	switch {
	case msg == "EOR received":
		e.eor = true
	case msg == "state changed":
		e.eor = false
		if f["new"] == "BGP_FSM_ESTABLISHED" {
			e.notification = ""
		}
		reason := fmt.Sprint(f["reason"])
		if slices.Contains(benignReasons, reason) {
			return
		}
		if old, ok := f["old"].(string); ok {
			reason += " in " + strings.ToLower(strings.TrimPrefix(old, "BGP_FSM_"))
		}
		if e.detail != "" {
			reason = e.detail + " (" + reason + ")"
			e.detail = ""
		}
		e.last = reason
		if strings.Contains(reason, "notification-") {
			e.notification = reason
		}
	case msg == "failed to connect":
		err := fmt.Sprint(f["Error"])
		if strings.Contains(err, "timeout") {
			err += " (no answer; a TCP MD5 password mismatch drops the handshake silently)"
		}
		e.last = "connect: " + err
	case msg == "failed to set md5":
		e.listener = "TCP MD5 password not set on the listener: " + fmt.Sprint(f["Err"])
		if strings.Contains(e.listener, "protocol not available") {
			e.listener += " (an MPTCP listener? the program needs GODEBUG multipathtcp=0)"
		}
	case strings.HasPrefix(msg, "Session will be reset due to malformed"):
		e.detail = strings.TrimPrefix(msg, "Session will be reset due to ") + ": " + fmt.Sprint(f["Error"])
	case msg == "prefix limit reached" && f["Pct"] == nil:
		e.detail = fmt.Sprintf("more prefixes than the limit (%v)", f["Family"])
	}
}

// notesOf is a's LastError and whether its End-of-RIB came.
func (s *Speaker) notesOf(a netip.Addr) (string, bool) {
	s.notesMu.Lock()
	defer s.notesMu.Unlock()
	if e := s.notes[a]; e != nil {
		return e.String(), e.eor
	}
	return "", false
}

func (s *Speaker) clearNotes(a netip.Addr) {
	s.notesMu.Lock()
	defer s.notesMu.Unlock()
	delete(s.notes, a)
}
