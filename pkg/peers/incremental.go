package peers

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/pkg/netguard"
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
	ok       bool          // recs reflect the last pass against host
	host     netguard.Host // what the last pass checked against
	recs     map[string]*vrec
	order    []*vrec // recs sorted by name
	gen      uint64  // the current pass
	gone     map[Claim]bool
	maxFirst time.Time // the latest First among the sightings
	live     []*item   // scratch: the live values of a pass
	// changed lists the claims whose sighting the passes since the
	// ledger was last written changed (first seen, gone, back or
	// forgotten), perhaps more than once each: what Flush appends.
	changed []Claim
	// out holds the peers of the last two passes (flip: the last one's).
	out  [2][]NodeInfo
	flip int
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
func sameHost(a, b netguard.Host) bool {
	return slices.Equal(a.Addrs, b.Addrs) && slices.Equal(a.Connected, b.Connected)
}

// pass decides records as Resolve does, updating seen (the sightings,
// which it owns) in place, and reports whether seen changed. It returns
// false for ok when it cannot (two records with one name): the caller
// then resolves from scratch.
func (e *resolver) pass(self Self, host netguard.Host, records []Record, seen map[Claim]Sighting, now time.Time, retain time.Duration) (peers []NodeInfo, refused []Refusal, seenChanged, ok bool) {
	e.gen++
	full := !e.ok || !sameHost(e.host, host)
	var changed []*Record
	var added map[string]bool
	for i := range records {
		r := &records[i]
		st := e.recs[r.Name]
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
		e.gone, e.maxFirst = map[Claim]bool{}, time.Time{}
		for c, s := range seen {
			if !s.Gone.IsZero() {
				e.gone[c] = true
			}
			if s.First.After(e.maxFirst) {
				e.maxFirst = s.First
			}
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
		n, st.parsed = Parse(*r)
		if st.name = n.Name; st.name != "" {
			st.items = claims(n, &st.rec.Updated)
			st.whole = wholeRecord(self, host, n)
			for _, it := range st.items {
				if s, ok := seen[it.Claim]; ok {
					it.seen = s.First
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
	if !e.maxFirst.Before(base) {
		base = e.maxFirst.Add(time.Nanosecond)
	}
	slices.SortFunc(fresh, compareItems) // fresh claims are unique: a total order
	for i, it := range fresh {
		it.seen = base.Add(time.Duration(i))
		e.maxFirst = it.seen
		e.changed = append(e.changed, it.Claim)
	}

	// Sightings: the claims present now, then the ones that went.
	for _, it := range newItems {
		if s, had := seen[it.Claim]; !had || !s.Gone.IsZero() || !s.First.Equal(it.seen) {
			seen[it.Claim] = Sighting{First: it.seen}
			delete(e.gone, it.Claim)
			seenChanged = true
			if had {
				e.changed = append(e.changed, it.Claim)
			}
		}
	}
	recompute := false
	for c := range e.gone {
		if s := seen[c]; now.Sub(s.Gone) >= retain {
			delete(seen, c)
			delete(e.gone, c)
			e.changed = append(e.changed, c)
			recompute = recompute || !s.First.Before(e.maxFirst)
			seenChanged = true
		}
	}
	goneNow := func(c Claim) {
		if s := seen[c]; s.Gone.IsZero() && !e.present(c) {
			seen[c] = Sighting{First: s.First, Gone: now}
			e.gone[c] = true
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
		e.maxFirst = time.Time{}
		for _, s := range seen {
			if s.First.After(e.maxFirst) {
				e.maxFirst = s.First
			}
		}
	}

	// Re-decide the values related to what changed.
	e.live = e.live[:0]
	for _, st := range e.order {
		if st.live() {
			e.live = append(e.live, st.items...)
		}
	}
	affected := e.live
	if !full {
		if some, ok := e.affected(seeds, oldLive); ok {
			affected = some
		}
	}
	decide(self, host, affected) // sorts affected, a list this pass built
	for _, it := range affected {
		e.touch(e.recs[it.Node])
	}
	for _, r := range changed {
		e.touch(e.recs[r.Name])
	}

	// The two result buffers take turns: the slice the last pass returned
	// stays as it was while this one is filled, and a change allocates no
	// new list of every peer.
	e.flip ^= 1
	peers = e.out[e.flip][:0]
	for _, st := range e.order {
		refused = append(refused, st.refused...)
		if st.live() {
			peers = append(peers, st.out)
		}
	}
	clear(peers[len(peers):cap(peers)]) // drop what a longer list held
	e.out[e.flip] = peers
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
		for _, it := range e.live {
			if related(o, it) && !queue(it) {
				return nil, false
			}
		}
	}
	for i := 0; i < len(out); i++ {
		for _, it := range e.live {
			if it.mark != e.gen && related(out[i], it) && !queue(it) {
				return nil, false
			}
		}
	}
	return out, true
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

// sameSightings reports whether a and b hold the same times.
func sameSightings(a, b map[Claim]Sighting) bool {
	return maps.EqualFunc(a, b, func(x, y Sighting) bool { return x.First.Equal(y.First) && x.Gone.Equal(y.Gone) })
}
