package peers

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/pkg/nodespace"
)

// maxChanged is how many records may change in one pass for the Validator
// to re-decide only what they can affect; more (or a duplicate name, or a
// new host snapshot) and every value is decided again.
const maxChanged = 64

// maxAffected bounds the values re-decided around the changed records;
// past it, every value is (one overlapping block can relate to thousands).
const maxAffected = 256

// resolver is a Validator's memory of its last pass: every record as
// parsed, its claims with their verdicts, and the output they gave. A pass
// re-parses only the records that differ from that memory and re-decides
// only the values related (decide) to theirs, directly or through other
// values; every other verdict cannot have changed. The result equals
// Resolve's with the same records, host, sightings and time.
type resolver struct {
	ok    bool           // recs reflect the last pass against host
	host  nodespace.Host // what the last pass checked against
	recs  map[string]*vrec
	order []*vrec // recs sorted by name
	gen   uint64  // the current pass
	// gone holds the claims that went, by the time they went: those
	// past the retention time are at its front. An entry whose claim
	// came back (or went again later) since is stale and skipped.
	gone     []goneAt
	maxFirst int64   // the latest first-seen time among the sightings (nanos)
	live     []*item // scratch: the live values of a pass that decides all
	index    []*item // the live values, by compareIndex
	// changed lists the claims whose sighting the passes since the
	// ledger was last written changed (first seen, gone, back or
	// forgotten), perhaps more than once each: what Flush appends.
	changed []Claim
	// out holds the peers the last pass returned.
	out []NodeInfo
}

// goneAt is a claim that went, and when (nanos).
type goneAt struct {
	c  Claim
	at int64
}

// sighted is a claim with its sighting.
type sighted struct {
	c Claim
	s Sighting
}

// vrec is one record as the resolver keeps it.
type vrec struct {
	rec     Record
	name    string    // the parsed name; "" when it is unusable
	parsed  []Refusal // Parse's refusals
	bgp     BGPNode   // the parsed BGP values (no claims: taken as they are)
	whole   string    // why the record is refused whole, "" when it is not
	items   []*item   // its claims, stamped
	out     NodeInfo  // its accepted values
	refused []Refusal // all its refusals, by field and value
	gen     uint64    // the pass that last saw it
	touched uint64    // the pass that last rebuilt out and refused
}

// live reports whether r's values take part in decide.
func (r *vrec) live() bool { return r.name != "" && r.whole == "" }

// sameHost reports whether a and b hold the same address space (all that
// Resolve reads of a Host).
func sameHost(a, b nodespace.Host) bool {
	return slices.Equal(a.Addrs, b.Addrs) && slices.Equal(a.Connected, b.Connected)
}

// pass decides records as Resolve does, updating seen (the sightings,
// which it owns) in place, and reports whether seen changed. It returns
// false for ok when it cannot (two records with one name): the caller
// then resolves from scratch.
func (e *resolver) pass(self Self, host nodespace.Host, records []Record, seen map[Claim]sighting, now time.Time, retain time.Duration) (peers []NodeInfo, refused []Refusal, seenChanged, ok bool) {
	e.gen++
	now = now.Round(0) // wall clock only, as the sightings keep it
	nowNS := nanos(now)
	full := !e.ok || !sameHost(e.host, host)
	var changed []*Record
	var added map[string]bool
	j := 0 // datastores hand records sorted by name: walk order alongside
	for i := range records {
		r := &records[i]
		for j < len(e.order) && e.order[j].rec.Name < r.Name {
			j++
		}
		var st *vrec
		if j < len(e.order) && e.order[j].rec.Name == r.Name {
			st = e.order[j]
		} else {
			st = e.recs[r.Name]
		}
		switch {
		case st == nil:
			if added[r.Name] {
				e.ok = false
				return nil, nil, false, false
			}
			if added == nil {
				added = map[string]bool{}
			}
			added[r.Name] = true
			changed = append(changed, r)
		case st.gen == e.gen:
			e.ok = false
			return nil, nil, false, false
		default:
			st.gen = e.gen
			if full || !st.rec.Equal(*r) {
				changed = append(changed, r)
			}
		}
	}
	var removed []*vrec
	for _, st := range e.order {
		if st.gen != e.gen {
			removed = append(removed, st)
		}
	}
	if !full && len(changed)+len(removed) > maxChanged {
		full = true
		changed = changed[:0]
		for i := range records {
			changed = append(changed, &records[i])
		}
	}

	// The old values of the records that went or changed: all of them
	// leave the sightings unless claimed again, the live ones may have
	// decided other values' verdicts.
	var old, oldLive []*item
	if full {
		e.recs, e.order = map[string]*vrec{}, nil
		e.gone, e.maxFirst = e.gone[:0], 0
		for c, s := range seen {
			if s.gone != 0 {
				e.gone = append(e.gone, goneAt{c, s.gone})
			}
			e.maxFirst = max(e.maxFirst, s.first)
		}
	} else {
		for _, st := range removed {
			e.remove(st)
		}
		for _, r := range changed {
			if st := e.recs[r.Name]; st != nil {
				removed = append(removed, st)
			}
		}
		for _, st := range removed {
			old = append(old, st.items...)
			if st.live() {
				oldLive = append(oldLive, st.items...)
				for _, it := range st.items {
					e.unindex(it)
				}
			}
		}
	}

	// Parse and stamp the records that are new or changed.
	var fresh, newItems []*item
	var seeds []*item
	for _, r := range changed {
		st := &vrec{rec: *r, gen: e.gen}
		st.rec.Blocks = slices.Clone(r.Blocks)
		var n NodeInfo
		n, st.parsed = parse(*r)
		st.bgp = n.BGP
		if st.name = n.Name; st.name != "" {
			st.items = claims(n, &st.rec.Updated)
			st.whole = wholeRecord(self, host, n)
			for _, it := range st.items {
				if s, ok := seen[it.Claim]; ok {
					it.seen = fromNanos(s.first)
				} else {
					fresh = append(fresh, it)
				}
				if st.live() {
					seeds = append(seeds, it)
				}
			}
			newItems = append(newItems, st.items...)
		}
		e.put(st)
	}
	base := now
	if e.maxFirst >= nowNS {
		base = fromNanos(e.maxFirst + 1)
	}
	slices.SortFunc(fresh, compareItems) // fresh claims are unique: a total order
	for i, it := range fresh {
		it.seen = base.Add(time.Duration(i))
		e.maxFirst = nanos(it.seen)
		e.changed = append(e.changed, it.Claim)
	}

	// Sightings: the claims present now, then the ones that went.
	for _, it := range newItems {
		if s, had := seen[it.Claim]; !had || s.gone != 0 || s.first != nanos(it.seen) {
			seen[it.Claim] = sighting{first: nanos(it.seen)}
			seenChanged = true
			if had {
				e.changed = append(e.changed, it.Claim)
			}
		}
	}
	if full {
		slices.SortFunc(e.gone, func(a, b goneAt) int { return cmp.Compare(a.at, b.at) })
	}
	recompute := false
	expired := 0
	for _, g := range e.gone {
		if now.Sub(fromNanos(g.at)) < retain {
			break
		}
		expired++
		if s, ok := seen[g.c]; ok && s.gone != 0 && s.gone == g.at {
			delete(seen, g.c)
			e.changed = append(e.changed, g.c)
			recompute = recompute || s.first >= e.maxFirst
			seenChanged = true
		}
	}
	e.gone = e.gone[expired:]
	goneNow := func(c Claim) {
		if s := seen[c]; s.gone == 0 && !e.present(c) {
			seen[c] = sighting{first: s.first, gone: nowNS}
			// After every entry that went at or before now (usually
			// at the end; a clock that went back puts it earlier).
			i, _ := slices.BinarySearchFunc(e.gone, nowNS, func(g goneAt, t int64) int {
				if g.at > t {
					return 1
				}
				return -1
			})
			e.gone = slices.Insert(e.gone, i, goneAt{c, nowNS})
			e.changed = append(e.changed, c)
			seenChanged = true
		}
	}
	if full {
		for c := range seen {
			goneNow(c)
		}
	} else {
		for _, it := range old {
			goneNow(it.Claim)
		}
	}
	if recompute {
		e.maxFirst = 0
		for _, s := range seen {
			e.maxFirst = max(e.maxFirst, s.first)
		}
	}

	// Re-decide the values related to what changed.
	var affected []*item
	if full {
		e.index = e.index[:0]
		for _, st := range e.order {
			if st.live() {
				e.index = append(e.index, st.items...)
			}
		}
		slices.SortFunc(e.index, compareIndex)
	} else {
		for _, it := range seeds {
			e.reindex(it)
		}
		var ok bool
		affected, ok = e.affected(seeds, oldLive)
		full = !ok
	}
	if full {
		e.live = e.live[:0]
		for _, st := range e.order {
			if st.live() {
				e.live = append(e.live, st.items...)
			}
		}
		affected = e.live
	}
	decide(self, host, affected) // sorts affected, a list this pass built
	for _, it := range affected {
		e.touch(e.recs[it.Node])
	}
	for _, r := range changed {
		e.touch(e.recs[r.Name])
	}
	clear(e.live) // scratch: hold no value past its pass
	e.live = e.live[:0]

	// One result buffer, filled again by every pass: a change allocates
	// no new list of every peer.
	peers = e.out[:0]
	if n := len(e.order); cap(peers) < n {
		peers = make([]NodeInfo, 0, n+n/16)
	}
	for _, st := range e.order {
		refused = append(refused, st.refused...)
		if st.live() {
			peers = append(peers, st.out)
		}
	}
	clear(peers[len(peers):cap(peers)]) // drop what a longer list held
	e.out = peers
	e.ok, e.host = true, host
	return peers, refused, seenChanged, true
}

// affected returns the live values whose verdict the pass may have
// changed: the changed records' values, the values related to the ones
// that went, and everything related to those, transitively (none when
// nothing changed); ok is false when that is more than maxAffected.
func (e *resolver) affected(seeds, old []*item) (out []*item, ok bool) {
	queue := func(it *item) bool {
		if it.mark == e.gen {
			return true
		}
		it.mark = e.gen
		out = append(out, it)
		return len(out) <= maxAffected
	}
	for _, it := range seeds {
		if !queue(it) {
			return nil, false
		}
	}
	for _, o := range old {
		if !e.eachRelated(o, queue) {
			return nil, false
		}
	}
	for i := 0; i < len(out); i++ {
		if !e.eachRelated(out[i], queue) {
			return nil, false
		}
	}
	return out, true
}

// compareIndex orders the index: address-space claims first, by prefix
// (address, then length), then the other values by field and value.
func compareIndex(a, b *item) int { return compareKey(a, b.space, b.Field, b.Value) }

// compareKey compares it with the index key of a value claiming space
// (invalid: none), or else field and value.
func compareKey(it *item, space netip.Prefix, field, value string) int {
	as, bs := it.space.IsValid(), space.IsValid()
	switch {
	case as && bs:
		return cmp.Or(it.space.Addr().Compare(space.Addr()), cmp.Compare(it.space.Bits(), space.Bits()))
	case as:
		return -1
	case bs:
		return 1
	}
	return cmp.Or(strings.Compare(it.Field, field), strings.Compare(it.Value, value))
}

// search returns where the key (compareKey) starts in the index.
func (e *resolver) search(space netip.Prefix, field, value string) int {
	i, _ := slices.BinarySearchFunc(e.index, space, func(it *item, p netip.Prefix) int { return compareKey(it, p, field, value) })
	return i
}

// reindex adds it, a value of a live record, to the index.
func (e *resolver) reindex(it *item) {
	e.index = slices.Insert(e.index, e.search(it.space, it.Field, it.Value), it)
}

// unindex removes it from the index.
func (e *resolver) unindex(it *item) {
	for i := e.search(it.space, it.Field, it.Value); i < len(e.index) && compareIndex(e.index[i], it) == 0; i++ {
		if e.index[i] == it {
			e.index = slices.Delete(e.index, i, i+1)
			return
		}
	}
}

// eachRelated calls f with every live value related to o (o itself
// included when it is live), until f returns false; it reports whether f
// never did. The index makes that a few binary searches: a MAC or tunnel
// address meets only its equals; an address space meets the prefixes
// that contain it (one search per shorter length) and the ones it
// contains (those sorted from its own address to its last).
func (e *resolver) eachRelated(o *item, f func(*item) bool) bool {
	p := o.space
	if !p.IsValid() {
		for i := e.search(p, o.Field, o.Value); i < len(e.index) && compareKey(e.index[i], p, o.Field, o.Value) == 0; i++ {
			if !f(e.index[i]) {
				return false
			}
		}
		return true
	}
	for bits := range p.Bits() {
		q, _ := p.Addr().Prefix(bits)
		for i := e.search(q, "", ""); i < len(e.index) && e.index[i].space == q; i++ {
			if !f(e.index[i]) {
				return false
			}
		}
	}
	for i := e.search(p, "", ""); i < len(e.index) && e.index[i].space.IsValid() && p.Contains(e.index[i].space.Addr()); i++ {
		if related(o, e.index[i]) && !f(e.index[i]) {
			return false
		}
	}
	return true
}

// touch rebuilds st's output and refusals from its values' verdicts, once
// per pass.
func (e *resolver) touch(st *vrec) {
	if st == nil || st.touched == e.gen {
		return
	}
	st.touched = e.gen
	st.out = NodeInfo{Name: st.name}
	st.refused = slices.Clone(st.parsed)
	switch {
	case st.name == "":
	case st.whole != "":
		st.refused = append(st.refused, Refusal{Node: st.name, Field: FieldRecord, Value: st.name, Reason: st.whole})
	default:
		st.out.BGP = st.bgp
		for _, it := range st.items {
			if it.why != "" {
				st.refused = append(st.refused, Refusal{Node: it.Node, Field: it.Field, Value: it.Value, Reason: it.why})
				continue
			}
			fill(&st.out, it)
		}
		sortPrefixes(st.out.Blocks)
	}
	slices.SortFunc(st.refused, compareRefusals)
}

// present reports whether a current record claims c.
func (e *resolver) present(c Claim) bool {
	st := e.recs[c.Node]
	return st != nil && slices.ContainsFunc(st.items, func(it *item) bool { return it.Claim == c })
}

// put adds or replaces st, keeping order sorted by name.
func (e *resolver) put(st *vrec) {
	if e.recs == nil {
		e.recs = map[string]*vrec{}
	}
	i, found := slices.BinarySearchFunc(e.order, st.rec.Name, func(x *vrec, name string) int { return strings.Compare(x.rec.Name, name) })
	if found {
		e.order[i] = st
	} else {
		e.order = slices.Insert(e.order, i, st)
	}
	e.recs[st.rec.Name] = st
}

// remove forgets st.
func (e *resolver) remove(st *vrec) {
	delete(e.recs, st.rec.Name)
	if i, found := slices.BinarySearchFunc(e.order, st.rec.Name, func(x *vrec, name string) int { return strings.Compare(x.rec.Name, name) }); found {
		e.order = slices.Delete(e.order, i, i+1)
	}
}

// sighting is a Sighting as the Validator keeps one per claim: its
// instants as nanos (a third of Sighting's 48 bytes, for thousands of
// claims).
type sighting struct{ first, gone int64 }

// Sighting returns s as a Sighting.
func (s sighting) Sighting() Sighting {
	return Sighting{First: fromNanos(s.first), Gone: fromNanos(s.gone)}
}

// nanos is t in nanoseconds since the Unix epoch, 0 for the zero time (the
// epoch itself is 1 ns later: 0 means none). t must lie in the years
// 1678 to 2262 (inRange).
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if n := t.UnixNano(); n != 0 {
		return n
	}
	return 1
}

// fromNanos is the instant n (nanos), the zero time for 0.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// inRange reports whether nanos can hold t.
func inRange(t time.Time) bool { return t.IsZero() || (t.Year() > 1678 && t.Year() < 2262) }

// compactSightings converts seen to the Validator's form; ok is false when
// a time in it is out of range (that claim is left out).
func compactSightings(seen map[Claim]Sighting) (out map[Claim]sighting, ok bool) {
	out, ok = make(map[Claim]sighting, len(seen)), true
	for c, s := range seen {
		if !inRange(s.First) || !inRange(s.Gone) {
			ok = false
			continue
		}
		out[c] = sighting{nanos(s.First), nanos(s.Gone)}
	}
	return out, ok
}

// expandSightings converts the Validator's form back.
func expandSightings(seen map[Claim]sighting) map[Claim]Sighting {
	out := make(map[Claim]Sighting, len(seen))
	for c, s := range seen {
		out[c] = s.Sighting()
	}
	return out
}

// sameSightings reports whether a and b hold the same times.
func sameSightings(a, b map[Claim]Sighting) bool {
	return maps.EqualFunc(a, b, func(x, y Sighting) bool { return x.First.Equal(y.First) && x.Gone.Equal(y.Gone) })
}
