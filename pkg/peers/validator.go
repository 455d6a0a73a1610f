package peers

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routelet/routelet/pkg/netguard"
	"github.com/routelet/routelet/pkg/state"
)

// LedgerFile is the file in the state directory that keeps the first-seen
// time of every peer value across daemon restarts. It lives on the same
// tmpfs as the records it describes.
const LedgerFile = "peer-claims.json"

// DefaultRetain is how long a value that left the records keeps its
// first-seen time (Options.Retain).
const DefaultRetain = 10 * time.Minute

// Options configure a Validator.
type Options struct {
	Self Self
	// ReadHost snapshots the node's own address space. Validate calls it
	// the first time and after HostChanged (an address, link or route of
	// the node changed, or events may have been lost), so addresses added
	// later are protected too; a failed read is tried again at the next
	// Validate. nil: an empty Host (only the record-level checks and Self
	// apply).
	ReadHost func() (netguard.Host, error)
	// StateDir holds LedgerFile; "" keeps first-seen times in memory only.
	StateDir string
	// Retain is Input.Retain; default DefaultRetain, negative 0.
	Retain time.Duration
	Logger *slog.Logger
	Now    func() time.Time // default time.Now
}

// Validator is the one place node records become NodeInfo values. It is
// not safe for concurrent use: the daemon's loop goroutine owns it.
type Validator struct {
	opts     Options
	log      *slog.Logger
	seen     map[Claim]Sighting
	host     netguard.Host
	hostErr  string               // last ReadHost error logged
	hostOld  atomic.Bool          // host must be read again (HostChanged)
	logged   map[string]bool      // refusals already logged, by message
	refused  []Refusal            // current refusals
	gauge    *prometheus.GaugeVec // routelet_peer_values_refused
	res      resolver             // the last pass, for the next one
	dirty    bool                 // seen differs from the ledger file
	order    []sighted            // seen in ledger order, as last written
	ordered  bool                 // order with res.fresh and res.moved is seen
	flushErr string               // last ledger write error logged
}

// New returns a Validator, loading the ledger from opts.StateDir. An
// unreadable ledger is logged and treated as empty: every value present
// then counts as first seen together.
func New(opts Options) *Validator {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	switch {
	case opts.Retain == 0:
		opts.Retain = DefaultRetain
	case opts.Retain < 0:
		opts.Retain = 0
	}
	v := &Validator{
		opts: opts, log: opts.Logger.With("component", "peers"), seen: map[Claim]Sighting{}, logged: map[string]bool{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "routelet_peer_values_refused",
			Help: "Node record values currently refused (1 per node, field and value; field \"record\" for a record refused whole). The log says why.",
		}, []string{"node", "field", "value"}),
	}
	if opts.StateDir != "" {
		seen, err := readLedger(opts.StateDir)
		if err != nil {
			v.log.Warn("cannot read the peer claim ledger; values present now count as first seen together", "file", LedgerFile, "err", err)
		} else {
			v.seen = seen
		}
	}
	v.hostOld.Store(true)
	return v
}

// Register adds the refusal gauge to reg.
func (v *Validator) Register(reg prometheus.Registerer) error { return reg.Register(v.gauge) }

// Validate checks records (every peer record the datastore holds now) and
// returns the validated peers, sorted by name. Refusals are logged once
// each and exported while they last; first-seen times are recorded in
// memory (Flush writes them to the ledger). Every record is checked
// against this node and the others as Resolve does; only what the
// records changed since the last call (and a new host snapshot) is
// worked out again. The returned slice stays as it is until the Validate
// after next, which reuses its array: a caller that keeps peers longer
// keeps a copy.
func (v *Validator) Validate(records []Record) []NodeInfo {
	v.readHost()
	now := v.opts.Now()
	ps, refused, changed, ok := v.res.pass(v.opts.Self, v.host, records, v.seen, now, v.opts.Retain)
	if !ok {
		res := Resolve(Input{Self: v.opts.Self, Host: v.host, Records: records, Seen: v.seen, Now: now, Retain: v.opts.Retain})
		changed = !sameSightings(res.Seen, v.seen)
		v.seen, ps, refused = res.Seen, res.Peers, res.Refused
		v.ordered = false
	}
	v.dirty = v.dirty || changed
	v.report(refused)
	return ps
}

// HostChanged says the node's own address space may have changed: the
// next Validate reads it again. Safe to call from any goroutine (netlink
// event handlers).
func (v *Validator) HostChanged() { v.hostOld.Store(true) }

// readHost takes a new host snapshot when HostChanged asked for one.
func (v *Validator) readHost() {
	if v.opts.ReadHost == nil || !v.hostOld.Swap(false) {
		return
	}
	h, err := v.opts.ReadHost()
	if err != nil {
		v.hostOld.Store(true) // try again at the next pass
		if err.Error() != v.hostErr {
			v.hostErr = err.Error()
			v.log.Warn("cannot read the node's addresses; checking peer blocks against the last known ones", "err", err)
		}
		return
	}
	v.host, v.hostErr = h, ""
}

// Flush writes the ledger when a Validate since the last Flush changed a
// first-seen time (a value appeared, went, or was forgotten); a failed
// write is logged and tried again at the next Flush. The daemon's loop
// calls it after every pass, once the pass's changes are in the kernel,
// so the write is off the path from a record to its route.
//
// Crash reasoning: a daemon that dies between a pass and its Flush loses
// only the sightings of that one pass (Flush runs before the next pass
// starts). Values first seen in it were newer than every value in the
// ledger, so after a restart they are again newer than all of those and
// cannot take an established claim. Competing values first seen in the
// same pass are ordered again as they were (record time, then name), so
// the restarted daemon decides as the one that died, unless a record
// changed meanwhile — which a first start decides the same way. A value
// that went in the lost pass is still present in the ledger and is marked
// gone at the restart, keeping its first-seen time a little longer. The
// file itself is replaced by rename (writeClaims), never left half.
func (v *Validator) Flush() {
	if !v.dirty || v.opts.StateDir == "" {
		return
	}
	v.order = v.ledgerOrder()
	v.res.fresh, v.res.moved = nil, nil // not kept: the first pass's fresh holds every claim
	if err := writeClaims(v.opts.StateDir, v.order); err != nil {
		if err.Error() != v.flushErr {
			v.flushErr = err.Error()
			v.log.Error("cannot write the peer claim ledger; established claims are kept in memory only until it can be written", "err", err)
		}
		return
	}
	v.dirty, v.flushErr = false, ""
}

// Refused returns the refusals of the last Validate.
func (v *Validator) Refused() []Refusal { return slices.Clone(v.refused) }

// report logs new refusals and sets the gauge to the current ones.
func (v *Validator) report(refused []Refusal) {
	if slices.Equal(refused, v.refused) {
		return // logged and exported already
	}
	v.refused = refused
	v.gauge.Reset()
	now := map[string]bool{}
	for _, r := range refused {
		msg := r.Error()
		now[msg] = true
		// A label must be UTF-8 (WithLabelValues panics otherwise); a
		// record's bytes need not be.
		label := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
		v.gauge.WithLabelValues(label(r.Node), r.Field, label(r.Value)).Set(1)
		if !v.logged[msg] {
			v.log.Warn("refusing a node record value", "node", r.Node, "field", r.Field, "value", r.Value, "reason", r.Reason)
		}
	}
	for msg := range v.logged {
		if !now[msg] {
			v.log.Info("node record value no longer refused", "refusal", msg)
		}
	}
	v.logged = now
}

// ledgerOrder returns seen in ledger order: the order last written with
// the sightings that changed since updated in place (found by binary
// search: a claim's first-seen time never changes) and the forgotten ones
// dropped, then the claims first seen since, which are later than all
// others. Sorted afresh when that does not add up to seen.
func (v *Validator) ledgerOrder() []sighted {
	if !v.ordered {
		v.ordered = true
		return sortedClaims(v.seen)
	}
	order := v.order
	var drop []int
	for _, m := range v.res.moved {
		i, found := slices.BinarySearchFunc(order, m, compareLedger)
		if !found {
			continue // first seen since the last write: among fresh
		}
		if s, ok := v.seen[m.c]; ok && s.First.Equal(m.s.First) {
			order[i].s = s
		} else {
			drop = append(drop, i)
		}
	}
	if len(drop) > 0 {
		slices.Sort(drop)
		drop = slices.Compact(drop)
		for k := len(drop) - 1; k >= 0; k-- {
			order = slices.Delete(order, drop[k], drop[k]+1)
		}
	}
	if len(order)+len(v.res.fresh) > cap(order) {
		// Room for the next few changes too, not the usual quarter more.
		order = append(make([]sighted, 0, len(order)+len(v.res.fresh)+64), order...)
	}
	for _, f := range v.res.fresh {
		if s, ok := v.seen[f.c]; ok && s.First.Equal(f.s.First) {
			order = append(order, sighted{f.c, s})
		}
	}
	if len(order) != len(v.seen) {
		return sortedClaims(v.seen)
	}
	return order
}

// compareLedger orders sightings by first-seen instant, then by claim.
func compareLedger(x, y sighted) int {
	if c := cmp.Compare(x.s.First.UnixNano(), y.s.First.UnixNano()); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(x.c.Node, y.c.Node), strings.Compare(x.c.Field, y.c.Field), strings.Compare(x.c.Value, y.c.Value))
}

// sortedClaims returns seen in ledger order.
func sortedClaims(seen map[Claim]Sighting) []sighted {
	out := make([]sighted, 0, len(seen))
	for c, s := range seen {
		out = append(out, sighted{c, s})
	}
	slices.SortFunc(out, compareLedger)
	return out
}

// ledger is LedgerFile's content.
type ledger struct {
	Version int           `json:"version"`
	Claims  []ledgerEntry `json:"claims"`
}

type ledgerEntry struct {
	Node      string    `json:"node"`
	Field     string    `json:"field"`
	Value     string    `json:"value"`
	FirstSeen time.Time `json:"firstSeen"`
	Gone      time.Time `json:"gone,omitzero"`
}

// ReadLedger reads dir's LedgerFile (the first-seen times a daemon keeps)
// without changing it; a missing file is an empty ledger. Resolve with it
// decides as the daemon's Validator did.
func ReadLedger(dir string) (map[Claim]Sighting, error) { return readLedger(dir) }

// readLedger reads LedgerFile; a missing file is an empty ledger.
func readLedger(dir string) (map[Claim]Sighting, error) {
	seen := map[Claim]Sighting{}
	data, err := state.ReadFileNoFollow(dir, LedgerFile)
	if errors.Is(err, fs.ErrNotExist) {
		return seen, nil
	}
	if err != nil {
		return nil, err
	}
	var l ledger
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("parse %s: %w", LedgerFile, err)
	}
	if l.Version != state.RecordVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", LedgerFile, l.Version, state.RecordVersion)
	}
	for _, e := range l.Claims {
		seen[Claim{Node: e.Node, Field: e.Field, Value: e.Value}] = Sighting{First: e.FirstSeen, Gone: e.Gone}
	}
	return seen, nil
}

// writeClaims writes LedgerFile atomically, order being the sightings in
// ledger order (by first-seen time; the Validator keeps that order between
// writes), one claim per line. Flush calls it only when a sighting changed
// (a value appeared, went, or was forgotten), so a re-validation that
// changes nothing writes nothing. The encoding is appended by hand a claim
// at a time and streamed to the file (json.Marshal of a few thousand
// entries with their times cost milliseconds per peer change); readLedger
// parses it with encoding/json.
//
// Crash reasoning: the file is replaced by rename, so a reader (the next
// daemon, status) sees the old ledger or the new one, never a mix. The
// state directory is normally a tmpfs under /run, where the fsyncs
// WriteFileAtomic makes cost nothing and a process crash loses nothing
// already written; a reboot empties the tmpfs and the records with it. On
// a state directory on disk the fsyncs keep the rename durable, so an
// established claim is not lost to a power cut after it was recorded.
func writeClaims(dir string, order []sighted) error {
	return state.WriteFileAtomicFunc(dir, LedgerFile, func(f io.Writer) error {
		// Streamed a claim at a time: the whole ledger (about 160 bytes a
		// claim) is never built in memory, so a write per peer change
		// leaves no large garbage for the collector.
		w := bufio.NewWriterSize(f, 16<<10)
		if _, err := fmt.Fprintf(w, "{\"version\":%d,\"claims\":[", state.RecordVersion); err != nil {
			return err
		}
		line := make([]byte, 0, 256)
		for i, e := range order {
			c, s := e.c, e.s
			if i > 0 {
				line = append(line, ',')
			}
			line = append(line, "\n{\"node\":"...)
			line = appendJSONString(line, c.Node)
			line = append(line, ",\"field\":"...)
			line = appendJSONString(line, c.Field)
			line = append(line, ",\"value\":"...)
			line = appendJSONString(line, c.Value)
			line = append(line, ",\"firstSeen\":\""...)
			line = s.First.UTC().AppendFormat(line, time.RFC3339Nano)
			line = append(line, '"')
			if !s.Gone.IsZero() {
				line = append(line, ",\"gone\":\""...)
				line = s.Gone.UTC().AppendFormat(line, time.RFC3339Nano)
				line = append(line, '"')
			}
			line = append(line, '}')
			if _, err := w.Write(line); err != nil {
				return err
			}
			line = line[:0]
		}
		if _, err := w.WriteString("\n]}\n"); err != nil {
			return err
		}
		return w.Flush()
	})
}

// appendJSONString appends s as a JSON string. Claims hold parsed names,
// addresses and prefixes, which need no escaping; anything else goes
// through encoding/json.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(buf, q...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
