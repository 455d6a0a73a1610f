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
	owner   map[string]string              // host interface → key of the record owning it (ownsVeth)
	claims  map[netip.Addr][]string        // address → keys of the accepted veth owners claiming it
}

// derivedRecord is one record as update last derived it.
type derivedRecord struct {
	w     *state.Workload
	addrs []netip.Addr // checkWorkload's addresses; nil when refused
}

// desiredDelta says what one update decided again.
type desiredDelta struct {
	keys   []string     // the records derived again or whose veth changed owner, sorted
	addrs  []netip.Addr // the addresses whose owner was decided again
	ifaces [2][]string  // per family, the interfaces whose routes changed, sorted
}

// newDesiredSet derives everything from in, as DesiredRoutes does; the
// delta names every record and address.
func newDesiredSet(in RouteInput) (*desiredSet, desiredDelta) {
	n := len(in.Workloads)
	s := &desiredSet{
		in:      in,
		d:       newDesired(n),
		recs:    make(map[string]derivedRecord, n),
		onIface: make(map[string]map[string]struct{}, n),
		owner:   make(map[string]string, n),
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
	touched := make(map[string]struct{}, len(redo))
	for key := range redo {
		touched[key] = struct{}{}
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
	// The owner of each veth named by a record derived again: only its
	// addresses are claimed. A record derived again has no claims left
	// (forget), so an owner among them claims again.
	for iface := range ifaces {
		old, had := s.owner[iface]
		cur := s.pickOwner(iface)
		_, oldRedone := redo[old]
		if had && old != cur && !oldRedone {
			if r, ok := s.recs[old]; ok {
				s.unclaim(old, r.addrs)
				for _, addr := range r.addrs {
					addrs[addr] = struct{}{}
				}
			}
			touched[old] = struct{}{}
		}
		for key := range s.onIface[iface] {
			if key == cur {
				delete(s.d.Superseded, key)
			} else if s.d.Superseded[key] != cur {
				s.d.Superseded[key] = cur
				touched[key] = struct{}{}
			}
		}
		if cur == "" {
			delete(s.owner, iface)
			continue
		}
		s.owner[iface] = cur
		if _, redone := redo[cur]; redone || !had || old != cur {
			r := s.recs[cur]
			s.claim(cur, r.addrs)
			for _, addr := range r.addrs {
				addrs[addr] = struct{}{}
			}
			touched[cur] = struct{}{}
		}
	}
	delta.keys = slices.Sorted(maps.Keys(touched))
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
	delete(s.d.Superseded, key)
	if on := s.onIface[r.w.HostIface]; on != nil {
		delete(on, key)
		if len(on) == 0 {
			delete(s.onIface, r.w.HostIface)
		}
	}
	s.unclaim(key, r.addrs)
}

// remember records r as record key's derivation; its addresses are
// claimed once it owns its veth (update).
func (s *desiredSet) remember(key string, r derivedRecord) {
	s.recs[key] = r
	on := s.onIface[r.w.HostIface]
	if on == nil {
		on = map[string]struct{}{}
		s.onIface[r.w.HostIface] = on
	}
	on[key] = struct{}{}
}

// pickOwner returns the key of the record owning iface among those naming
// it (ownsVeth), "" when none does.
func (s *desiredSet) pickOwner(iface string) string {
	best := ""
	for key := range s.onIface[iface] {
		if best == "" || ownsVeth(s.in, s.recs[key].w, s.recs[best].w) {
			best = key
		}
	}
	return best
}

// claim adds record key's claim to each of addrs.
func (s *desiredSet) claim(key string, addrs []netip.Addr) {
	for _, addr := range addrs {
		s.claims[addr] = append(s.claims[addr], key)
	}
}

// unclaim drops record key's claim, if any, to each of addrs.
func (s *desiredSet) unclaim(key string, addrs []netip.Addr) {
	for _, addr := range addrs {
		ks := slices.DeleteFunc(s.claims[addr], func(k string) bool { return k == key })
		if len(ks) == 0 {
			delete(s.claims, addr)
		} else {
			s.claims[addr] = ks
		}
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
