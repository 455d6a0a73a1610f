package main

import (
	"errors"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	delegated "github.com/containernetworking/plugins/pkg/ipam"

	"github.com/routelet/routelet/pkg/state"
)

// cmdStatus succeeds only when routeletd reports ready in daemon.json (and a
// delegated IPAM plugin reports ready too); otherwise code 50 with the reason.
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
	case !st.Ready:
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
