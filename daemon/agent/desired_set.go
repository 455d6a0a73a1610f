package agent

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// desiredSet is DesiredRoutes kept current one record at a time: update
// derives again only the records it is told changed (and those naming a
// link that changed), decides again only the addresses they claim or
// claimed, and rebuilds only the interfaces whose routes that can touch.
// After every update its Desired equals DesiredRoutes over the same input.
type desiredSet struct {
	// in is read at each update: its Workloads and Links are the maps the
	// caller changes in place before saying what it changed.
	in      RouteInput
	d       Desired
	recs    map[string]derivedRecord       // by key: each record as last derived
	onIface map[string]map[string]struct{} // host interface → keys of the records naming it
	claims  map[netip.Addr][]string        // address → keys of the accepted records claiming it
}

// derivedRecord is one record as update last derived it.
type derivedRecord struct {
	w     *state.Workload
	addrs []netip.Addr // checkWorkload's addresses; nil when refused
}

// desiredDelta says what one update decided again.
type desiredDelta struct {
	keys   []string     // the records derived again, sorted
	addrs  []netip.Addr // the addresses whose owner was decided again
	ifaces [2][]string  // per family, the interfaces whose routes changed, sorted
}

// newDesiredSet derives everything from in, as DesiredRoutes does; the
// delta names every record and address.
func newDesiredSet(in RouteInput) (*desiredSet, desiredDelta) {
	n := len(in.Workloads)
	s := &desiredSet{
		in: in,
		d: Desired{
			Routes:  [2]map[string][]routes.Target{make(map[string][]routes.Target, n+1), {}},
			Refused: map[string]string{}, Owner: make(map[netip.Addr]string, 2*n), Contested: map[netip.Addr]string{},
		},
		recs:    make(map[string]derivedRecord, n),
		onIface: make(map[string]map[string]struct{}, n),
		claims:  make(map[netip.Addr][]string, 2*n),
	}
	keys := make(map[string]struct{}, n)
	for key := range in.Workloads {
		keys[key] = struct{}{}
	}
	s.setIface(routes.InterfaceNone) // the blackholes
	return s, s.update(keys, nil)
}

// update derives again the records under keys (changed, added or gone
// from in.Workloads) and every record naming one of links (links whose
// existence or kind changed in in.Links), and what they can affect.
func (s *desiredSet) update(keys, links map[string]struct{}) desiredDelta {
	redo := make(map[string]struct{}, len(keys))
	for key := range keys {
		redo[key] = struct{}{}
	}
	for name := range links {
		for key := range s.onIface[name] {
			redo[key] = struct{}{}
		}
	}
	var delta desiredDelta
	ifaces := map[string]struct{}{}
	addrs := map[netip.Addr]struct{}{}
	for key := range redo {
		delta.keys = append(delta.keys, key)
		if old, ok := s.recs[key]; ok {
			s.forget(key, old)
			ifaces[old.w.HostIface] = struct{}{}
			for _, addr := range old.addrs {
				addrs[addr] = struct{}{}
			}
		}
		w := s.in.Workloads[key]
		if w == nil {
			continue
		}
		r := derivedRecord{w: w}
		got, err := checkWorkload(s.in, w)
		if err != nil {
			s.d.Refused[key] = err.Error()
		} else {
			r.addrs = got
		}
		s.remember(key, r)
		ifaces[w.HostIface] = struct{}{}
		for _, addr := range r.addrs {
			addrs[addr] = struct{}{}
		}
	}
	slices.Sort(delta.keys)
	// An address changing hands changes the routes of the interfaces of
	// both owners (a record derived again already has its interfaces in).
	for addr := range addrs {
		delta.addrs = append(delta.addrs, addr)
		old, had := s.d.Owner[addr]
		s.decide(addr)
		if cur, ok := s.d.Owner[addr]; had != ok || cur != old {
			for _, key := range []string{old, cur} {
				if r, ok := s.recs[key]; ok {
					ifaces[r.w.HostIface] = struct{}{}
				}
			}
		}
	}
	for _, iface := range slices.Sorted(maps.Keys(ifaces)) {
		for fam, changed := range s.setIface(iface) {
			if changed {
				delta.ifaces[fam] = append(delta.ifaces[fam], iface)
			}
		}
	}
	return delta
}

// forget drops what record key contributed as last derived (r).
func (s *desiredSet) forget(key string, r derivedRecord) {
	delete(s.recs, key)
	delete(s.d.Refused, key)
	if on := s.onIface[r.w.HostIface]; on != nil {
		delete(on, key)
		if len(on) == 0 {
			delete(s.onIface, r.w.HostIface)
		}
	}
	for _, addr := range r.addrs {
		ks := slices.DeleteFunc(s.claims[addr], func(k string) bool { return k == key })
		if len(ks) == 0 {
			delete(s.claims, addr)
		} else {
			s.claims[addr] = ks
		}
	}
}

// remember records r as record key's derivation.
func (s *desiredSet) remember(key string, r derivedRecord) {
	s.recs[key] = r
	on := s.onIface[r.w.HostIface]
	if on == nil {
		on = map[string]struct{}{}
		s.onIface[r.w.HostIface] = on
	}
	on[key] = struct{}{}
	for _, addr := range r.addrs {
		s.claims[addr] = append(s.claims[addr], key)
	}
}

// decide picks the owner of addr among the records claiming it (beats).
func (s *desiredSet) decide(addr netip.Addr) {
	ks := s.claims[addr]
	delete(s.d.Contested, addr)
	if len(ks) == 0 {
		delete(s.d.Owner, addr)
		return
	}
	best := ks[0]
	for _, k := range ks[1:] {
		if beats(s.in, s.recs[k].w, s.recs[best].w) {
			best = k
		}
	}
	s.d.Owner[addr] = best
	if len(ks) > 1 {
		s.d.Contested[addr] = best
	}
}

// setIface rebuilds iface's routes of both families from the records
// naming it and the addresses they own (the blackholes for
// routes.InterfaceNone); it reports per family whether they changed.
func (s *desiredSet) setIface(iface string) [2]bool {
	var next [2][]routes.Target
	for key := range s.onIface[iface] {
		r := s.recs[key]
		for _, addr := range r.addrs {
			if s.d.Owner[addr] == key {
				fam, t := workloadTarget(s.in, r.w, addr)
				next[fam] = append(next[fam], t)
			}
		}
	}
	if iface == routes.InterfaceNone {
		for _, b := range s.in.LocalBlocks {
			fam, t := blackholeTarget(b)
			next[fam] = append(next[fam], t)
		}
	}
	var changed [2]bool
	for fam, ts := range next {
		sortTargets(ts)
		if slices.EqualFunc(ts, s.d.Routes[fam][iface], routes.Target.Equal) {
			continue
		}
		changed[fam] = true
		if len(ts) == 0 {
			delete(s.d.Routes[fam], iface)
		} else {
			s.d.Routes[fam][iface] = ts
		}
	}
	return changed
}
