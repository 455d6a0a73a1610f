package agent

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"
)

// TempCollector removes the temp files killed writers left in the state
// directory (routeletd: the Store's directories and the IPAM directory's,
// each file unlocked and old enough): the leak collection runs it every
// tick, so a plugin killed mid-ADD leaves nothing behind for long.
type TempCollector interface {
	RemoveStaleTemps() (removed []string, err error)
}

// SetTempCollector makes the leak collection also run c every tick period.
// Call before Run.
func (a *Agent) SetTempCollector(c TempCollector) { a.temps = c }

// collectTemps runs the temp collector, logging each file removed and an
// error once until it changes.
func (a *Agent) collectTemps() {
	removed, err := a.temps.RemoveStaleTemps()
	for _, p := range removed {
		a.log.Info("leak collection: removed a temp file a killed writer left", "path", p)
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		if msg != a.tempErr {
			a.log.Warn("leak collection: cannot remove every stale temp file, will retry", "err", err)
		}
	}
	a.tempErr = msg
}

// collectLeaks releases workloads whose host veth has been missing for the
// leak grace period and whose netns is gone. A record with a live veth or a
// live netns is never touched.
func (a *Agent) collectLeaks(ctx context.Context) {
	if len(a.workloads) == 0 {
		clear(a.absentSince)
		return
	}
	// Link events keep linkPresent current, so an idle node makes no
	// syscall here; an interface that looks absent is confirmed with one
	// link dump before its clock starts (events can be lost).
	var links map[string]string
	now := a.now()
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(a.workloads)) {
		w := a.workloads[name]
		seen[w.HostIface] = true
		// Only routelet's own veth keeps a record alive: a bridge or a
		// link without the prefix under that name is not the pod's.
		if a.ownVeth(w.HostIface) {
			delete(a.absentSince, w.HostIface)
			continue
		}
		if links == nil {
			var err error
			if links, err = a.host.Links(); err != nil {
				a.log.Warn("leak check: cannot list links", "err", err)
				return
			}
		}
		if kind, ok := links[w.HostIface]; ok && strings.HasPrefix(w.HostIface, a.opts.IfacePrefix) {
			a.setLink(w.HostIface, kind)
			if kind == "veth" {
				delete(a.absentSince, w.HostIface) // setLink noted it: it can now win addresses from absent records
				continue
			}
		}
		since, ok := a.absentSince[w.HostIface]
		if !ok {
			a.absentSince[w.HostIface] = now
			continue
		}
		if now.Sub(since) < a.opts.LeakGracePeriod || !a.host.NetnsGone(w.Netns) {
			continue
		}
		if a.releaser != nil {
			if err := a.releaser.Release(ctx, w.ContainerID, w.IfName); err != nil {
				a.log.Warn("leak collection: cannot release addresses, will retry", "container", w.ContainerID, "ifname", w.IfName, "err", err)
				continue
			}
		}
		if err := a.wls.Delete(w); err != nil {
			a.log.Warn("leak collection: cannot delete record, will retry", "container", w.ContainerID, "ifname", w.IfName, "err", err)
			continue
		}
		a.log.Info("released leaked workload: netns and host veth gone past the grace period",
			"container", w.ContainerID, "ifname", w.IfName, "iface", w.HostIface, "netns", w.Netns,
			"ips", w.IPs, "absent_for", now.Sub(since).Round(time.Millisecond))
		a.metrics.LeakCollections.Inc()
		delete(a.workloads, name)
		a.changedKeys[name] = struct{}{}
		delete(a.absentSince, w.HostIface)
	}
	for iface := range a.absentSince {
		if !seen[iface] {
			delete(a.absentSince, iface)
		}
	}
	a.syncDesired()
}
