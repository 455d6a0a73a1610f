// Package nlutil holds the netlink handling every routelet package shares:
// taking again a dump the kernel interrupted (Retry), telling "that object
// is not there" from a real failure (NotFound, LinkNotFound), reading
// netlink's addresses as prefixes (Prefix), a raw netlink socket bound to
// a network namespace that reuses its receive buffer (Conn, Dial; Once for
// a single exchange, InNetNS for work on a thread moved into a namespace),
// walking a message's attributes (EachAttr, CString), the main table's
// routes (MainRoutes) and the nf_tables ruleset generation
// (NFTGeneration).
package nlutil

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// DumpAttempts is how many times Retry takes a dump before it gives up.
const DumpAttempts = 10

// Retry runs dump until the kernel answers it without NLM_F_DUMP_INTR (the
// table changed while it was being read), so callers never act on a
// half-read table. Any other outcome, success or error, is returned as it
// is. After DumpAttempts interrupted dumps the error says so and wraps
// nl.ErrDumpInterrupted (the same value as netlink.ErrDumpInterrupted).
func Retry[T any](dump func() (T, error)) (T, error) {
	var err error
	for range DumpAttempts {
		var out T
		out, err = dump()
		if !errors.Is(err, nl.ErrDumpInterrupted) {
			return out, err
		}
	}
	var zero T
	return zero, fmt.Errorf("dump interrupted %d times: %w", DumpAttempts, err)
}

// LinkNotFound reports whether err says the link a request named does not
// exist: the library's netlink.LinkNotFoundError or the kernel's ENODEV.
func LinkNotFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENODEV)
}

// NotFound reports whether err says the object a request named (link,
// route, neighbour, address) does not exist: LinkNotFound, or the kernel's
// ESRCH or ENOENT.
func NotFound(err error) bool {
	return LinkNotFound(err) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT)
}
