// Package periods holds the default periods of routeletd's loop. Both
// sides read them from here: daemon/config as the defaults of its keys
// (resync-period, device-check-period, leak-grace-period,
// allowlist-check-period) and the managers (daemon/agent,
// daemon/allowmgr) for options left zero. It imports nothing, so the
// configuration does not depend on the managers it configures.
package periods

import "time"

const (
	// Resync is how often every record and the whole routing table are
	// re-read: the most a lost event can cost (resync-period).
	Resync = 90 * time.Second
	// Tick is the liveness and leak-check tick (device-check-period).
	Tick = 10 * time.Second
	// LeakGrace is how long a record's netns and host veth must be gone
	// before the record is released (leak-grace-period).
	LeakGrace = 15 * time.Minute
	// AllowlistCheck is how often routelet's sets and chains are re-read
	// and repaired (allowlist-check-period).
	AllowlistCheck = time.Second
)
