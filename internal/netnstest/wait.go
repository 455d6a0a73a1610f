package netnstest

import "time"

// ReadyTimeout bounds how long a test waits for a routeletd it started to
// report ready. Waits return as soon as the daemon is ready (well under a
// second on an idle host), so the bound only has to be generous: on a
// loaded machine or under emulation (the VM lane) a daemon's start — dozens
// of iptables and ipset runs — takes 20–40 s.
const ReadyTimeout = 2 * time.Minute

// SettleTimeout is the least time a test waits for the dataplane to reach a
// state it expects (routes, sets, rules, devices) before it fails.
const SettleTimeout = time.Minute

// Generous returns the timeout a wait for a condition should use when the
// condition takes about d on an idle host: d, but at least SettleTimeout.
// The wait ends as soon as the condition holds, so this costs nothing when
// things work; it keeps a loaded machine or an emulated kernel, many times
// slower, from failing a test that only asks whether something happens.
func Generous(d time.Duration) time.Duration { return max(d, SettleTimeout) }
