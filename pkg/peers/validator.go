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
// each and exported while they last; first-seen times are recorded.
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
	res := Resolve(Input{Self: v.opts.Self, Host: v.host, Records: records, Seen: v.seen, Now: v.opts.Now(), Retain: v.opts.Retain})
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
		v.gauge.WithLabelValues(r.Node, r.Field, r.Value).Set(1)
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

// writeLedger writes LedgerFile atomically, entries sorted.
func writeLedger(dir string, seen map[Claim]Sighting) error {
	l := ledger{Version: state.RecordVersion, Claims: []ledgerEntry{}}
	for c, s := range seen {
		e := ledgerEntry{Node: c.Node, Field: c.Field, Value: c.Value, FirstSeen: s.First.UTC()}
		if !s.Gone.IsZero() {
			e.Gone = s.Gone.UTC()
		}
		l.Claims = append(l.Claims, e)
	}
	slices.SortFunc(l.Claims, func(a, b ledgerEntry) int {
		return cmp.Or(a.FirstSeen.Compare(b.FirstSeen), strings.Compare(a.Node, b.Node), strings.Compare(a.Field, b.Field), strings.Compare(a.Value, b.Value))
	})
	data, err := json.MarshalIndent(&l, "", "  ")
	if err != nil {
		return err
	}
	return state.WriteFileAtomic(dir, LedgerFile, data)
}
