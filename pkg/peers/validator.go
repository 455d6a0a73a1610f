package peers

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"strings"
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
	// ReadHost snapshots the node's own address space; it is called at
	// every Validate, so addresses added later are protected too. nil: an
	// empty Host (only the record-level checks and Self apply).
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
	opts    Options
	log     *slog.Logger
	seen    map[Claim]Sighting
	host    netguard.Host
	hostErr string               // last ReadHost error logged
	logged  map[string]bool      // refusals already logged, by message
	refused []Refusal            // current refusals
	gauge   *prometheus.GaugeVec // routelet_peer_values_refused
	cache   parseCache           // records parsed by earlier passes
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
	return v
}

// Register adds the refusal gauge to reg.
func (v *Validator) Register(reg prometheus.Registerer) error { return reg.Register(v.gauge) }

// Validate checks records (every peer record the datastore holds now) and
// returns the validated peers, sorted by name. Refusals are logged once
// each and exported while they last; first-seen times are recorded. Every
// record is checked against this node and the others at every call; a
// record identical to one of the last call is not parsed again.
func (v *Validator) Validate(records []Record) []NodeInfo {
	if v.opts.ReadHost != nil {
		h, err := v.opts.ReadHost()
		switch {
		case err != nil:
			if err.Error() != v.hostErr {
				v.hostErr = err.Error()
				v.log.Warn("cannot read the node's addresses; checking peer blocks against the last known ones", "err", err)
			}
		default:
			v.host, v.hostErr = h, ""
		}
	}
	res := Resolve(Input{Self: v.opts.Self, Host: v.host, Records: records, Seen: v.seen, Now: v.opts.Now(), Retain: v.opts.Retain, cache: &v.cache})
	if !maps.EqualFunc(res.Seen, v.seen, func(a, b Sighting) bool { return a.First.Equal(b.First) && a.Gone.Equal(b.Gone) }) {
		v.seen = res.Seen
		if v.opts.StateDir != "" {
			if err := writeLedger(v.opts.StateDir, v.seen); err != nil {
				v.log.Error("cannot write the peer claim ledger; established claims are kept in memory only", "err", err)
			}
		}
	}
	v.report(res.Refused)
	return res.Peers
}

// Refused returns the refusals of the last Validate.
func (v *Validator) Refused() []Refusal { return slices.Clone(v.refused) }

// report logs new refusals and sets the gauge to the current ones.
func (v *Validator) report(refused []Refusal) {
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

// writeLedger writes LedgerFile atomically, entries sorted by first-seen
// time, one claim per line. Validate calls it only when a sighting changed
// (a value appeared, went, or was forgotten), so a re-validation that
// changes nothing writes nothing. The encoding is appended by hand into one
// buffer sized up front (json.Marshal of a few thousand entries with their
// times cost milliseconds per peer change); readLedger parses it with
// encoding/json.
//
// Crash reasoning: the file is replaced by rename, so a reader (the next
// daemon, status) sees the old ledger or the new one, never a mix. The
// state directory is normally a tmpfs under /run, where the fsyncs
// WriteFileAtomic makes cost nothing and a process crash loses nothing
// already written; a reboot empties the tmpfs and the records with it. On
// a state directory on disk the fsyncs keep the rename durable, so an
// established claim is not lost to a power cut after it was recorded.
func writeLedger(dir string, seen map[Claim]Sighting) error {
	// Sorted by the first-seen instant as an integer (all but the ties of
	// a clock that stood still differ there), then by claim. The sort moves
	// pointer-free keys, not the entries.
	type entry struct {
		c Claim
		s Sighting
	}
	type key struct {
		first int64
		i     int
	}
	entries := make([]entry, 0, len(seen))
	keys := make([]key, 0, len(seen))
	for c, s := range seen {
		keys = append(keys, key{first: s.First.UnixNano(), i: len(entries)})
		entries = append(entries, entry{c: c, s: s})
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.first != b.first {
			return cmp.Compare(a.first, b.first)
		}
		x, y := entries[a.i].c, entries[b.i].c
		return cmp.Or(strings.Compare(x.Node, y.Node), strings.Compare(x.Field, y.Field), strings.Compare(x.Value, y.Value))
	})
	// Room for 160 bytes a claim: its names, a prefix or address, two times.
	buf := fmt.Appendf(make([]byte, 0, 64+160*len(keys)), "{\"version\":%d,\"claims\":[", state.RecordVersion)
	for i, k := range keys {
		e := &entries[k.i]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, "\n{\"node\":"...)
		buf = appendJSONString(buf, e.c.Node)
		buf = append(buf, ",\"field\":"...)
		buf = appendJSONString(buf, e.c.Field)
		buf = append(buf, ",\"value\":"...)
		buf = appendJSONString(buf, e.c.Value)
		buf = append(buf, ",\"firstSeen\":\""...)
		buf = e.s.First.UTC().AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
		if !e.s.Gone.IsZero() {
			buf = append(buf, ",\"gone\":\""...)
			buf = e.s.Gone.UTC().AppendFormat(buf, time.RFC3339Nano)
			buf = append(buf, '"')
		}
		buf = append(buf, '}')
	}
	buf = append(buf, "\n]}\n"...)
	return state.WriteFileAtomic(dir, LedgerFile, buf)
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
