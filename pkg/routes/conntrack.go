package routes

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	mdnetlink "github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
)

// Conntrack is the narrow seam to the kernel's connection tracking table:
// only the calls the RouteTable makes. Implementations must be safe for use
// by one goroutine at a time (the cleaner serialises its calls).
type Conntrack interface {
	// Dump lists every flow (IPv4 and IPv6).
	Dump() ([]conntrack.Flow, error)
	// Delete removes one flow; a flow that is already gone is not an error
	// worth reporting, but implementations may return ENOENT for it.
	Delete(f conntrack.Flow) error
	// Close releases the socket.
	Close() error
}

var _ Conntrack = (*realConntrack)(nil)

// realConntrack implements Conntrack with ti-mo/conntrack.
type realConntrack struct {
	conn *conntrack.Conn
}

// newRealConntrack opens a conntrack netlink socket in the network namespace
// nsFD (a file descriptor of /proc/.../ns/net).
func newRealConntrack(nsFD int) (*realConntrack, error) {
	c, err := conntrack.Dial(&mdnetlink.Config{NetNS: nsFD})
	if err != nil {
		return nil, fmt.Errorf("conntrack: dial: %w", err)
	}
	return &realConntrack{conn: c}, nil
}

// Dump implements Conntrack.
func (r *realConntrack) Dump() ([]conntrack.Flow, error) {
	flows, err := r.conn.Dump(nil)
	if err != nil {
		return nil, fmt.Errorf("conntrack: dump: %w", err)
	}
	return flows, nil
}

// Delete implements Conntrack.
func (r *realConntrack) Delete(f conntrack.Flow) error {
	if err := r.conn.Delete(f); err != nil {
		return fmt.Errorf("conntrack: delete %s: %w", f.TupleOrig, err)
	}
	return nil
}

// Close implements Conntrack.
func (r *realConntrack) Close() error { return r.conn.Close() }

// conntrackCleaner deletes the conntrack flows of IPs whose route went away,
// in the background. Each batch is one dump plus one delete per matching
// flow; batches run one at a time (mu), so the Conntrack seam never sees
// concurrent calls.
//
// Why background: a node with many flows can take tens of milliseconds to
// dump, and a removed pod's flows only matter again when its IP is reused.
// The RouteTable therefore keeps, per IP, the channel of the batch cleaning
// it, and waits on that channel before it programs a route for the same IP
// again (see RouteTable.waitConntrack).
type conntrackCleaner struct {
	ct      Conntrack
	log     *slog.Logger
	mu      sync.Mutex // serialises batches
	wg      sync.WaitGroup
	deleted atomic.Uint64
}

// start launches a cleanup of every flow whose original or reply source is
// one of ips and returns a channel that is closed when it has finished.
func (c *conntrackCleaner) start(ips []netip.Addr) <-chan struct{} {
	done := make(chan struct{})
	set := make(map[netip.Addr]struct{}, len(ips))
	for _, ip := range ips {
		set[ip] = struct{}{}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(done)
		c.mu.Lock()
		defer c.mu.Unlock()
		n, err := deleteFlowsFrom(c.ct, set)
		c.deleted.Add(uint64(n))
		if err != nil {
			c.log.Warn("conntrack cleanup incomplete", "ips", ips, "deleted", n, "err", err)
			return
		}
		c.log.Debug("conntrack cleanup done", "ips", ips, "deleted", n)
	}()
	return done
}

// wait blocks until every started cleanup has finished.
func (c *conntrackCleaner) wait() { c.wg.Wait() }

// deleteFlowsFrom deletes the flows whose original or reply source address is
// in ips. The reply source covers flows towards the IP that were DNATed to
// it (a service VIP in the original direction). It returns how many flows it
// deleted; a flow that vanished between dump and delete counts as done.
func deleteFlowsFrom(ct Conntrack, ips map[netip.Addr]struct{}) (int, error) {
	flows, err := ct.Dump()
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, f := range flows {
		_, orig := ips[f.TupleOrig.IP.SourceAddress.Unmap()]
		_, reply := ips[f.TupleReply.IP.SourceAddress.Unmap()]
		if !orig && !reply {
			continue
		}
		if err := ct.Delete(f); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
