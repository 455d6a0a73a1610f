package overlay

import (
	"net/netip"
	"time"

	"github.com/routelet/routelet/internal/compact"
)

// echoTTL is how long a write's notification is waited for; one that
// never comes (the kernel does not notify a write that changed nothing)
// is forgotten after it.
const echoTTL = 5 * time.Second

// echoes remembers the ARP/NDP and FDB writes whose notifications may
// still be on their way. Notifications arrive in the order of the writes,
// but can lag behind the next Apply: the echo of a write the manager has
// since overwritten matches neither what the kernel had at that Apply nor
// what is wanted, and without this memory it would look like drift.
type echoes struct {
	pending map[echoKey][]echo
	peak    int // the most entries pending held since it was last empty
	swept   time.Time
}

// echoKey names one entry: an ARP/NDP entry by IP, an FDB entry by MAC
// and destination.
type echoKey struct {
	fdb bool
	ip  netip.Addr
	mac [6]byte // FDB only
}

// echo is one write: the MAC written (ARP/NDP), or a delete.
type echo struct {
	mac     [6]byte
	deleted bool
	at      time.Time
}

// wrote records a write whose notification is expected.
func (e *echoes) wrote(k echoKey, w echo) {
	if e == nil {
		return
	}
	now := time.Now()
	if now.Sub(e.swept) > echoTTL {
		for key, ws := range e.pending {
			if now.Sub(ws[len(ws)-1].at) > echoTTL {
				e.forget(key)
			}
		}
		e.swept = now
	}
	w.at = now
	if e.pending == nil {
		e.pending = map[echoKey][]echo{}
	}
	e.pending[k] = append(e.pending[k], w)
	e.peak = max(e.peak, len(e.pending))
}

// forget drops k's pending writes; once none is left, a map that held
// many (the start-up burst: an entry per peer) is let go with its buckets.
func (e *echoes) forget(k echoKey) {
	delete(e.pending, k)
	if len(e.pending) == 0 && e.peak > compact.Small {
		e.pending, e.peak = nil, 0
	}
}

// seen reports whether a notification (k, w) is the echo of a recorded
// write. The writes before the matched one were notified before it, so
// they are done with too.
func (e *echoes) seen(k echoKey, w echo) bool {
	ws := e.pending[k]
	for i, x := range ws {
		if x.mac != w.mac || x.deleted != w.deleted || time.Since(x.at) > echoTTL {
			continue
		}
		if i == len(ws)-1 {
			e.forget(k)
		} else {
			e.pending[k] = ws[i+1:]
		}
		return true
	}
	return false
}

// neighEcho is the key and write of an ARP/NDP entry.
func neighEcho(ip netip.Addr, mac []byte, deleted bool) (echoKey, echo) {
	w := echo{deleted: deleted}
	if !deleted && len(mac) == 6 {
		w.mac = [6]byte(mac)
	}
	return echoKey{ip: ip.Unmap()}, w
}

// fdbEcho is the key and write of an FDB entry.
func fdbEcho(mac [6]byte, dst netip.Addr, deleted bool) (echoKey, echo) {
	return echoKey{fdb: true, ip: dst.Unmap(), mac: mac}, echo{deleted: deleted}
}
