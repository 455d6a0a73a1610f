package peers

import (
	"bufio"
	"bytes"
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
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/pkg/nodespace"
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
	ReadHost func() (nodespace.Host, error)
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
	seen     map[Claim]sighting
	host     nodespace.Host
	hostErr  string               // last ReadHost error logged
	hostOld  atomic.Bool          // host must be read again (HostChanged)
	logged   map[string]bool      // refusals already logged, by message
	refused  []Refusal            // current refusals
	gauge    *prometheus.GaugeVec // routelet_peer_values_refused
	res      resolver             // the last pass, for the next one
	dirty    bool                 // seen differs from the ledger file
	flushErr string               // last ledger write error logged
	// The ledger file as this Validator last wrote it whole (nil: not
	// yet, or an append failed: the next Flush writes it whole), and how
	// many sightings were appended to it since.
	written  fs.FileInfo
	appended int64
	line     []byte // the last appended line's buffer
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
		opts: opts, log: opts.Logger.With("component", "peers"), seen: map[Claim]sighting{}, logged: map[string]bool{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "routelet_peer_values_refused",
			Help: "Node record values currently refused (1 per node, field and value; field \"record\" for a record refused whole). The log says why.",
		}, []string{"node", "field", "value"}),
	}
	if opts.StateDir != "" {
		seen, err := readLedger(opts.StateDir)
		if err == nil {
			if cs, ok := compactSightings(seen); ok {
				v.seen = cs
			} else {
				err = fmt.Errorf("%s: a time outside the years 1678 to 2262", LedgerFile)
			}
		}
		if err != nil {
			v.log.Warn("cannot read the peer claim ledger; values present now count as first seen together", "file", LedgerFile, "err", err)
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
// worked out again. The returned slice stays as it is until the next
// Validate, which reuses its array: a caller that keeps peers longer
// keeps a copy.
func (v *Validator) Validate(records []Record) []NodeInfo {
	v.readHost()
	now := v.opts.Now()
	ps, refused, changed, ok := v.res.pass(v.opts.Self, v.host, records, v.seen, now, v.opts.Retain)
	if !ok {
		seen := v.sightings()
		res := Resolve(Input{Self: v.opts.Self, Host: v.host, Records: records, Seen: seen, Now: now.Round(0), Retain: v.opts.Retain})
		changed = !sameSightings(res.Seen, seen)
		v.seen, _ = compactSightings(res.Seen) // times of now or of the ledger read
		ps, refused = res.Peers, res.Refused
		v.written = nil // the sightings changed unrecorded: write them whole
	}
	v.dirty = v.dirty || changed
	v.report(refused)
	return ps
}

// sightings returns the first-seen times as Resolve takes them.
func (v *Validator) sightings() map[Claim]Sighting { return expandSightings(v.seen) }

// SetWireGuardKey sets this node's WireGuard public key (Self.WireGuardKey,
// zero for none), after a key rotation: the next Validate checks every
// record against it again.
func (v *Validator) SetWireGuardKey(k wgtypes.Key) {
	if v.opts.Self.WireGuardKey != k {
		v.opts.Self.WireGuardKey = k
		v.res.ok = false // every record's whole-record check changes
	}
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

// Flush records in the ledger what the Validates since the last Flush
// changed of the first-seen times (a value appeared, went, or was
// forgotten); a failed write is logged and tried again at the next Flush.
// The daemon's loop calls it after every pass, once the pass's changes
// are in the kernel, so the write is off the path from a record to its
// route. A Flush appends one line holding the sightings that changed (a
// peer change costs the same with ten peers or ten thousand); the first
// Flush of a Validator, the one after a failed write, and one that finds
// more appended than the ledger holds, write the file whole instead
// (writeClaims).
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
// gone at the restart, keeping its first-seen time a little longer. A
// whole write replaces the file by rename, and an append is one line
// ending in a newline written last, which a reader ignores until it is
// complete: a crash in the middle of an append loses that Flush's
// sightings as a whole, never some of them (readLedger).
func (v *Validator) Flush() {
	if !v.dirty {
		return
	}
	changed := v.res.changed
	v.res.changed = v.res.changed[:0]
	if cap(v.res.changed) > 1024 {
		v.res.changed = nil // the first pass's, which holds every claim
	}
	if v.opts.StateDir == "" {
		v.dirty = false // memory only: nothing to write, and nothing to keep for it
		return
	}
	if err := v.flush(changed); err != nil {
		v.written = nil // what a failed write left is not ours to extend
		if err.Error() != v.flushErr {
			v.flushErr = err.Error()
			v.log.Error("cannot write the peer claim ledger; established claims are kept in memory only until it can be written", "err", err)
		}
		return
	}
	v.dirty, v.flushErr = false, ""
}

// minCompact is how many bytes a ledger may have appended before Flush
// writes it whole, however small it is.
const minCompact = 64 << 10

// flush appends the sightings of changed to the ledger, or writes it
// whole when this Validator has not written it yet, someone replaced it,
// or the appended lines would outgrow what it held when written whole
// (so the file stays under twice its content and reading it stays
// cheap).
func (v *Validator) flush(changed []Claim) error {
	if v.written != nil {
		v.line = appendLedgerLine(v.line[:0], v.seen, changed)
		if v.appended+int64(len(v.line)) <= max(v.written.Size(), minCompact) {
			err := state.AppendFile(v.opts.StateDir, LedgerFile, v.written, v.line)
			if err == nil {
				v.appended += int64(len(v.line))
				return nil
			}
			if !errors.Is(err, state.ErrReplaced) {
				return err
			}
		}
	}
	v.written, v.appended = nil, 0
	if err := writeClaims(v.opts.StateDir, sortedClaims(v.seen)); err != nil {
		return err
	}
	fi, err := state.Lstat(v.opts.StateDir, LedgerFile)
	if err != nil {
		return err
	}
	v.written = fi
	return nil
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

// compareLedger orders sightings by first-seen instant, then by claim.
func compareLedger(x, y sighted) int {
	if c := cmp.Compare(x.s.First.UnixNano(), y.s.First.UnixNano()); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(x.c.Node, y.c.Node), strings.Compare(x.c.Field, y.c.Field), strings.Compare(x.c.Value, y.c.Value))
}

// sortedClaims returns seen in ledger order.
func sortedClaims(seen map[Claim]sighting) []sighted {
	out := make([]sighted, 0, len(seen))
	for c, s := range seen {
		out = append(out, sighted{c, s.Sighting()})
	}
	slices.SortFunc(out, compareLedger)
	return out
}

// ledgerVersion is the version of LedgerFile this package writes: a
// ledger as version 1 had it (every claim, by first-seen time), followed
// by zero or more appended lines, one per Flush, each a ledgerLine of the
// sightings that changed, applied in order. Version 1 (no appended lines)
// is read too.
const ledgerVersion = 2

// ledger is LedgerFile's content as last written whole.
type ledger struct {
	Version int           `json:"version"`
	Claims  []ledgerEntry `json:"claims"`
}

// ledgerLine is one appended line: the sightings one Flush changed.
type ledgerLine struct {
	Claims []ledgerEntry `json:"claims"`
}

type ledgerEntry struct {
	Node      string    `json:"node"`
	Field     string    `json:"field"`
	Value     string    `json:"value"`
	FirstSeen time.Time `json:"firstSeen,omitzero"`
	Gone      time.Time `json:"gone,omitzero"`
	Forgotten bool      `json:"forgotten,omitempty"` // appended only: the claim left the ledger
}

// maxLedgerSize bounds what readLedger reads: a ledger holds about 110
// bytes a claim and at most twice its claims (minCompact), so this is
// tens of thousands of peers.
const maxLedgerSize = 64 << 20

// ReadLedger reads dir's LedgerFile (the first-seen times a daemon keeps)
// without changing it; a missing file is an empty ledger. Resolve with it
// decides as the daemon's Validator did.
func ReadLedger(dir string) (map[Claim]Sighting, error) { return readLedger(dir) }

// readLedger reads LedgerFile; a missing file is an empty ledger. Of the
// appended lines it applies the complete ones: a line is complete once
// its newline, written last, is there, so a line a writer is still
// appending (or died appending) counts as not written.
func readLedger(dir string) (map[Claim]Sighting, error) {
	seen := map[Claim]Sighting{}
	data, err := state.ReadFileNoFollowMax(dir, LedgerFile, maxLedgerSize)
	if errors.Is(err, fs.ErrNotExist) {
		return seen, nil
	}
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var l ledger
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("parse %s: %w", LedgerFile, err)
	}
	if l.Version != ledgerVersion && l.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want %d", LedgerFile, l.Version, ledgerVersion)
	}
	apply := func(es []ledgerEntry) {
		for _, e := range es {
			c := Claim{Node: e.Node, Field: e.Field, Value: e.Value}
			if e.Forgotten {
				delete(seen, c)
			} else {
				seen[c] = Sighting{First: e.FirstSeen, Gone: e.Gone}
			}
		}
	}
	apply(l.Claims)
	rest := data[dec.InputOffset():]
	rest = rest[:bytes.LastIndexByte(rest, '\n')+1] // complete lines only
	dec = json.NewDecoder(bytes.NewReader(rest))
	for {
		var line ledgerLine
		if err := dec.Decode(&line); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("parse %s: appended line: %w", LedgerFile, err)
		}
		apply(line.Claims)
	}
	return seen, nil
}

// writeClaims writes LedgerFile whole and atomically, order being the
// sightings in ledger order (by first-seen time), one claim per line.
// Flush calls it only when a sighting changed (a value appeared, went, or
// was forgotten), so a re-validation that changes nothing writes nothing.
// The encoding is appended by hand a claim at a time and streamed to the
// file (json.Marshal of a few thousand entries with their times cost
// milliseconds); readLedger parses it with encoding/json.
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
		// Streamed a claim at a time: the whole ledger (about 110 bytes a
		// claim) is never built in memory.
		w := bufio.NewWriterSize(f, 16<<10)
		if _, err := fmt.Fprintf(w, "{\"version\":%d,\"claims\":[", ledgerVersion); err != nil {
			return err
		}
		line := make([]byte, 0, 256)
		for i, e := range order {
			if i > 0 {
				line = append(line, ',')
			}
			line = append(line, '\n')
			line = appendLedgerEntry(line, e.c, e.s, false)
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

// appendLedgerLine appends to buf the line Flush appends for changed: the
// current sighting of each claim in it (once each), or that it was
// forgotten. changed is sorted in place.
func appendLedgerLine(buf []byte, seen map[Claim]sighting, changed []Claim) []byte {
	slices.SortFunc(changed, func(x, y Claim) int {
		return cmp.Or(strings.Compare(x.Node, y.Node), strings.Compare(x.Field, y.Field), strings.Compare(x.Value, y.Value))
	})
	buf = append(buf, "{\"claims\":["...)
	for i, c := range slices.Compact(changed) {
		if i > 0 {
			buf = append(buf, ',')
		}
		s, ok := seen[c]
		buf = appendLedgerEntry(buf, c, s.Sighting(), !ok)
	}
	return append(buf, "]}\n"...)
}

// appendLedgerEntry appends one ledgerEntry as JSON.
func appendLedgerEntry(buf []byte, c Claim, s Sighting, forgotten bool) []byte {
	buf = append(buf, "{\"node\":"...)
	buf = appendJSONString(buf, c.Node)
	buf = append(buf, ",\"field\":"...)
	buf = appendJSONString(buf, c.Field)
	buf = append(buf, ",\"value\":"...)
	buf = appendJSONString(buf, c.Value)
	if forgotten {
		return append(buf, ",\"forgotten\":true}"...)
	}
	buf = append(buf, ",\"firstSeen\":\""...)
	buf = s.First.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, '"')
	if !s.Gone.IsZero() {
		buf = append(buf, ",\"gone\":\""...)
		buf = s.Gone.UTC().AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	return append(buf, '}')
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
