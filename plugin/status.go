package main

import (
	"errors"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/routelet/routelet/pkg/state"
)

// cmdStatus succeeds only when routeletd runs (it holds its lock on
// <stateDir>/routeletd.lock) and reports ready in daemon.json (and a
// delegated IPAM plugin reports ready too); otherwise code 50 with the
// reason. daemon.json alone outlives a killed daemon.
func cmdStatus(args *skel.CmdArgs) error {
	c, e := loadConfig(args.StdinData)
	if e != nil {
		return e
	}
	path := filepath.Join(c.StateDir, "daemon.json")
	store, err := state.Open(c.StateDir)
	if err != nil {
		return cniErr(codeStatusNotReady, "not ready: stateDir %s unusable: %v", c.StateDir, err)
	}
	st, err := store.ReadDaemonStatus()
	switch {
	case errors.Is(err, state.ErrNotFound):
		return cniErr(codeStatusNotReady, "not ready: %s does not exist (is routeletd running?)", path)
	case err != nil:
		return cniErr(codeStatusNotReady, "not ready: daemon status unreadable: %v", err)
	}
	if up, why, err := daemonRunning(c.StateDir); err != nil {
		return cniErr(codeStatusNotReady, "not ready: cannot tell whether routeletd is running: %v", err)
	} else if !up {
		return cniErr(codeStatusNotReady, "not ready: routeletd is not running (%s), although %s is still there", why, path)
	}
	if !st.Ready {
		reason := st.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return cniErr(codeStatusNotReady, "not ready: routeletd reports: %s", reason)
	}
	if c.Delegate != "" {
		if err := delegated.ExecStatus(c.Delegate, args.StdinData); err != nil {
			return asCNIErr("ipam plugin "+c.Delegate+" status", err)
		}
	}
	return nil
}
