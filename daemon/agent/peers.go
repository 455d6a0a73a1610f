package agent

import (
	"bytes"
	"log/slog"
	"slices"
	"time"

	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/pkg/peers"
)

// peerFeed is the loop's side of the datastore: it publishes this node's
// record once, reads the validated peers, and keeps what snapshots show
// of them (the last read, when each peer last changed). Loop-owned.
type peerFeed struct {
	src       PeerSource
	self      peers.Record // this node's record (a SelfPublisher may change it)
	published bool         // self went through Publish
	records   int          // peer records at the last read
	badNodes  int          // unreadable peer records at the last full read
	badSeen   map[string]bool
	last      DatastoreRead
	known     []PeerState // the validated peers of the last read, each with its last change
	metrics   *health.Metrics
	log       *slog.Logger
	now       func() time.Time
}

// newPeerFeed returns a feed of src that publishes self.
func newPeerFeed(src PeerSource, self peers.Record, metrics *health.Metrics, log *slog.Logger) *peerFeed {
	return &peerFeed{src: src, self: self, badSeen: map[string]bool{}, metrics: metrics, log: log, now: time.Now}
}

// publish hands this node's record to the datastore once (retried at
// every full sync until it succeeds); the datastore keeps it published.
func (p *peerFeed) publish() {
	if p.published {
		return
	}
	if err := p.src.Publish(p.self); err != nil {
		p.log.Error("cannot publish own node record, will retry", "node", p.self.Name, "err", err)
		return
	}
	p.published = true
}

// read reads the validated peers from the datastore and updates the peer
// metric; hand says whether the managers are to be handed valid. A
// datastore that cannot list its peers says nothing about them: the
// managers keep the last ones. full: a full read, whose unreadable
// records are counted and returned. A read that is not full and
// validates to the peers the managers have (a hint that changed nothing,
// e.g. a host event) leaves them alone.
func (p *peerFeed) read(full bool) (valid []peers.NodeInfo, hand bool, bad []error) {
	valid, n, bad, err := p.src.Peers()
	same := !p.note(valid, n, bad, err, full) && !full
	if err != nil {
		p.log.Error("cannot list node records, keeping the last known set", "err", err)
		return nil, false, nil
	}
	if full {
		p.badNodes = len(bad)
	}
	p.records = n
	p.metrics.Peers.Set(float64(len(valid)))
	return valid, !same, bad
}

// reportBad logs each unreadable peer record once (until it is fixed or
// changes).
func (p *peerFeed) reportBad(bad []error) { p.badSeen = logBad(p.log, p.badSeen, bad) }

// note records a read of the peers: the datastore's last read and when
// each peer's validated values last changed. full: a full read, whose
// unreadable records replace the last ones. It reports whether the peers
// differ from the last read's (false after a failed read).
func (p *peerFeed) note(valid []peers.NodeInfo, n int, bad []error, err error, full bool) (changed bool) {
	now := p.now().UTC()
	if err != nil {
		p.last.OK, p.last.Error = false, err.Error()
		return false
	}
	p.last.OK, p.last.Error, p.last.LastRead, p.last.Records, p.last.Valid = true, "", now, n, len(valid)
	if full {
		p.last.Unreadable = nil
		for _, e := range bad {
			p.last.Unreadable = append(p.last.Unreadable, e.Error())
		}
	}
	if sameNames(valid, p.known) {
		// The common change (one peer's values among the same peers):
		// updated in place, nothing allocated. Snapshots hold a clone.
		for i, v := range valid {
			if !samePeer(p.known[i].NodeInfo, v) {
				p.known[i].LastChange = now
				changed = true
			}
			p.known[i].NodeInfo = v
		}
		return changed
	}
	// Both lists are sorted by name (the datastore's order), so one walk
	// pairs each peer with its last state.
	old := p.known
	next := make([]PeerState, 0, len(valid))
	for _, v := range valid {
		for len(old) > 0 && old[0].Name < v.Name {
			old = old[1:]
		}
		since := now
		if len(old) > 0 && samePeer(old[0].NodeInfo, v) {
			since = old[0].LastChange
		}
		next = append(next, PeerState{NodeInfo: v, LastChange: since})
	}
	p.known = next
	return true
}

// sameNames reports whether valid and known name the same peers in the
// same order.
func sameNames(valid []peers.NodeInfo, known []PeerState) bool {
	if len(valid) != len(known) {
		return false
	}
	for i := range valid {
		if valid[i].Name != known[i].Name {
			return false
		}
	}
	return true
}

// samePeer reports whether two validated peers carry the same values.
func samePeer(x, y peers.NodeInfo) bool {
	ep := func(a, b peers.Endpoint) bool {
		return a.HostIP == b.HostIP && a.TunnelAddr == b.TunnelAddr && bytes.Equal(a.VTEPMAC, b.VTEPMAC)
	}
	return x.Name == y.Name && ep(x.IPv4, y.IPv4) && ep(x.IPv6, y.IPv6) && slices.Equal(x.Blocks, y.Blocks) &&
		x.WireGuard == y.WireGuard
}

// logBad logs each bad record of bad that seen does not hold and returns
// the messages of bad (the next call's seen).
func logBad(log *slog.Logger, seen map[string]bool, bad []error) map[string]bool {
	next := map[string]bool{}
	for _, err := range bad {
		msg := err.Error()
		next[msg] = true
		if !seen[msg] {
			log.Warn("skipping bad record", "err", err)
		}
	}
	return next
}
