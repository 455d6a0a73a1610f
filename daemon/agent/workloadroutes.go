package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/state"
)

// workloadRoutes is the workload routes manager: it reads the workload
// records (a Workloads source), derives their desired routes one record
// at a time (desiredSet) and hands them to the RouteTables, whose Apply
// is its own; it checks route and neighbour events for tampering with
// what it owns, collects leaked records (and stale temp files), and
// serves the workloads to the other managers (Served). It is the first
// of the loop's managers, so a pass programs the pods' routes first.
// Everything in it belongs to the loop goroutine.
type workloadRoutes struct {
	opts     *Options // the Agent's, defaults applied
	wls      Workloads
	rt4, rt6 RouteTable
	releaser Releaser      // nil: leaked records are deleted without IPAM release
	host     Host          // link dumps and netns checks
	temps    TempCollector // nil: no temp files collected
	repairs  RepairRecorder
	metrics  *health.Metrics
	log      *slog.Logger
	now      func() time.Time

	workloads    map[string]*state.Workload // by source key
	absentSince  map[string]time.Time       // host iface → first seen missing (leak collection)
	links        map[string]string          // prefix links that exist → kind, from link events and dumps
	badSeen      map[string]bool            // bad-record messages already logged
	badFiles     map[string]string          // workload keys that cannot be read → why (served from their last good read when there is one)
	held         map[string]struct{}        // veths whose routes the tables keep while a record no good read ever came from is unreadable
	desired      *desiredSet                // the desired routes of workloads and links (syncDesired)
	changedKeys  map[string]struct{}        // workload keys changed since the last syncDesired
	changedLinks map[string]struct{}        // prefix links that appeared, vanished or changed kind since then
	refused      map[string]string          // workload keys refused by checkWorkload → why (logged)
	winners      map[netip.Addr]string      // addresses several records claim → the key served (logged)
	superseded   map[string]string          // workload keys whose veth another record owns → its key (logged)
	tempErr      string                     // the temp collector's last error, logged once
	needApply    bool                       // the tables were handed something since the last takeApply
	graceWait    time.Duration              // > 0: apply again after this (a table's grace period ends)
	servedAll    bool                       // every record changed for the other managers (a full read) since takeServed
	servedKeys   map[string]struct{}        // else the keys that did (noteDesired)
	servedSpare  map[string]struct{}        // the Changed handed out last (takeServed swaps the two)
	badNodes     func() int                 // the unreadable peer records of the last full read (routelet_bad_records)
}

// newWorkloadRoutes returns the manager with nothing read yet.
func newWorkloadRoutes(opts *Options, d Deps, metrics *health.Metrics, log *slog.Logger, repairs RepairRecorder) *workloadRoutes {
	return &workloadRoutes{
		opts: opts, wls: d.Workloads, rt4: d.RT4, rt6: d.RT6, releaser: d.Releaser, host: d.Host, temps: d.Temps,
		repairs: repairs, metrics: metrics, log: log, now: time.Now,
		workloads:    map[string]*state.Workload{},
		absentSince:  map[string]time.Time{},
		links:        map[string]string{},
		badSeen:      map[string]bool{},
		badFiles:     map[string]string{},
		held:         map[string]struct{}{},
		changedKeys:  map[string]struct{}{},
		changedLinks: map[string]struct{}{},
		refused:      map[string]string{},
		winners:      map[netip.Addr]string{},
		superseded:   map[string]string{},
		servedKeys:   map[string]struct{}{},
		servedSpare:  map[string]struct{}{},
		badNodes:     func() int { return 0 },
	}
}

var _ Manager = (*workloadRoutes)(nil)

// watch starts watching the workload records: changed gets a record's
// key, rescan asks for a full re-read (events were lost).
func (r *workloadRoutes) watch(ctx context.Context, changed func(key string), rescan func()) error {
	return r.wls.Watch(ctx, changed, rescan)
}

// tables returns the route tables (rt6 may be nil).
func (r *workloadRoutes) tables() [2]RouteTable { return [2]RouteTable{r.rt4, r.rt6} }

// OnNodes implements Manager: the workload routes do not depend on peers.
func (r *workloadRoutes) OnNodes([]peers.NodeInfo) {}

// OnWorkloads implements Manager: the workloads are this manager's own.
func (r *workloadRoutes) OnWorkloads(Served) {}

// Apply implements Manager: the route tables' Apply; it updates their
// metrics and notes when a table's grace period ends (retryAfter).
func (r *workloadRoutes) Apply() error {
	var errs []error
	for i, rt := range r.tables() {
		if rt == nil {
			continue
		}
		if err := rt.Apply(); err != nil {
			errs = append(errs, err)
		}
		if d, ok := rt.RetryAfter(); ok && (r.graceWait == 0 || d < r.graceWait) {
			r.graceWait = max(d, time.Millisecond)
		}
		st := rt.Stats()
		table := [2]string{"ipv4", "ipv6"}[i]
		r.metrics.RoutesProgrammed.WithLabelValues(table).Set(float64(st.Routes))
		r.metrics.DirtyInterfaces.WithLabelValues(table).Set(float64(st.DirtyIfaces))
	}
	return errors.Join(errs...)
}

// retryAfter returns, once, how long until a table's grace period ends
// (0: none pending).
func (r *workloadRoutes) retryAfter() time.Duration {
	d := r.graceWait
	r.graceWait = 0
	return d
}

// takeApply reports whether the tables were handed something (or an
// event showed tampering) since the last call.
func (r *workloadRoutes) takeApply() bool {
	need := r.needApply
	r.needApply = false
	return need
}

// takeServed returns what changed for the other managers since the last
// call, and whether anything did. The Changed map it returns is reused
// (cleared) by the next call: valid for one OnWorkloads round.
func (r *workloadRoutes) takeServed() (Served, bool) {
	if !r.servedAll && len(r.servedKeys) == 0 {
		return Served{}, false
	}
	s := Served{All: r.servedAll, Changed: r.servedKeys, src: r}
	clear(r.servedSpare)
	r.servedAll, r.servedKeys, r.servedSpare = false, r.servedSpare, r.servedKeys
	return s, true
}

// served implements Served.Record.
func (r *workloadRoutes) served(key string) (w *state.Workload, addrs, routed []netip.Addr, ok bool) {
	w = r.workloads[key]
	if w == nil || r.desired == nil {
		return w, nil, nil, false
	}
	_, superseded := r.desired.d.Superseded[key]
	if _, bad := r.refused[key]; bad || superseded || !strings.HasPrefix(w.HostIface, r.opts.IfacePrefix) {
		return w, nil, nil, false
	}
	addrs = r.desired.recs[key].addrs
	for _, addr := range addrs {
		if r.desired.d.Owner[addr] == key {
			routed = append(routed, addr)
		}
	}
	return w, addrs, routed, true
}

// readAll re-reads every record and derives every desired route again,
// and queues a full resync of the tables. A record that cannot be read is
// served from its last good read; one without is returned as an error
// (the caller logs them with reportBad). A source that cannot be listed
// says nothing about the records in it: what was read stays served.
func (r *workloadRoutes) readAll() []error {
	ws, bad, wdirErr := r.wls.All()
	var errs []error
	for key, msg := range bad {
		if last := r.workloads[key]; last != nil && wdirErr == nil {
			ws[key] = last
			r.unreadable(key, msg, last)
			continue
		}
		errs = append(errs, errors.New(msg))
	}
	if wdirErr == nil {
		r.workloads = ws
		r.badFiles = bad
	} else {
		r.log.Error("cannot list workload records, keeping the last known set", "err", wdirErr)
	}
	return errs
}

// resync derives every desired route again (after readAll and the
// pass's peers) and queues a full resync of the tables.
func (r *workloadRoutes) resync() {
	r.desired = nil // derived again from every record
	r.syncDesired()
	for _, rt := range r.tables() {
		if rt != nil {
			rt.QueueResync()
		}
	}
}

// applyLinks hands link states to the tables and records which workload
// links exist and of what kind; a link that appeared, vanished or changed
// kind (which can change which record an address is routed to) goes into
// changedLinks.
func (r *workloadRoutes) applyLinks(links map[string]linkState) {
	for name, ls := range links {
		for _, rt := range r.tables() {
			if rt != nil {
				rt.OnIfaceStateChanged(name, ls.up)
			}
		}
		if _, had := r.links[name]; ls.exists {
			r.setLink(name, ls.kind)
			if ls.kind == "veth" {
				delete(r.absentSince, name)
			}
		} else if had {
			delete(r.links, name)
			r.changedLinks[name] = struct{}{}
		}
		r.needApply = true
	}
}

// routeInput is the desired routes' input over the current records and
// links.
func (r *workloadRoutes) routeInput() RouteInput {
	return RouteInput{
		Workloads: r.workloads, Links: r.links, LocalBlocks: r.opts.LocalBlocks, NodeSpace: r.opts.NodeSpace,
		IfacePrefix: r.opts.IfacePrefix, StaticARP: r.opts.StaticARP,
	}
}

// snapshot adds the records, their routes and refusals to s (copies).
func (r *workloadRoutes) snapshot(s *Snapshot) {
	s.Workloads = maps.Clone(r.workloads)
	dr := DesiredRoutes(r.routeInput())
	s.WorkloadRoutes, s.Refused = dr.Routes, dr.Refused
}

// noteErrors adds the records that cannot be read or were refused to cur
// (object → error).
func (r *workloadRoutes) noteErrors(cur map[string]string) {
	for key, why := range r.badFiles {
		cur["workload/"+key] = why
	}
	for key, why := range r.refused {
		cur["workload/"+key] = "refused: " + why
	}
}

// setLink records that the prefix link name exists with kind, noting it in
// changedLinks when that is news.
func (r *workloadRoutes) setLink(name, kind string) {
	if old, had := r.links[name]; !had || old != kind {
		r.links[name] = kind
		r.changedLinks[name] = struct{}{}
	}
}

// refreshLinks replaces what link events said with one dump; on failure the
// event-derived knowledge stays.
func (r *workloadRoutes) refreshLinks() {
	all, err := r.host.Links()
	if err != nil {
		r.log.Warn("cannot list links, keeping what link events said", "err", err)
		return
	}
	clear(r.links)
	for name, kind := range all {
		if strings.HasPrefix(name, r.opts.IfacePrefix) {
			r.links[name] = kind
		}
	}
}

// ownVeth reports whether name is one of routelet's veths that exists: it
// has the interface prefix and is a veth.
func (r *workloadRoutes) ownVeth(name string) bool {
	return ownVeth(r.opts.IfacePrefix, r.links, name)
}

// reloadWorkload re-reads one workload record and notes it in changedKeys
// when it was or is served. A record that is gone is no longer served; one
// that cannot be read is served as its last good read said (unreadable),
// and, without one, is logged and not served.
func (r *workloadRoutes) reloadWorkload(name string) {
	old := r.workloads[name]
	w, err := r.wls.Get(name)
	switch {
	case errors.Is(err, state.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		delete(r.workloads, name)
		delete(r.badFiles, name)
	case err != nil && old != nil:
		r.unreadable(name, err.Error(), old)
		r.badFiles[name] = err.Error()
	case err != nil:
		if r.badFiles[name] != err.Error() {
			r.log.Warn("skipping bad workload record", "file", name, "err", err)
		}
		r.badFiles[name] = err.Error()
	default:
		r.workloads[name] = w
		delete(r.badFiles, name)
	}
	r.metrics.Workloads.Set(float64(len(r.workloads)))
	r.setBadRecords()
	if (old != nil || r.workloads[name] != nil) && old != r.workloads[name] {
		r.changedKeys[name] = struct{}{}
	}
}

// unreadable handles a record that cannot be read (why) while its last
// good read (last) is served: a record that cannot be read is not one that
// is gone, so the pod keeps its routes, guard and leak-collection rules as
// last read. It is logged when why is news, and a file holding no JSON at
// all is written back from last (Workloads.Repair; counted as a "record"
// repair). A file of another version or otherwise unreadable is left to
// whoever wrote it.
func (r *workloadRoutes) unreadable(key, why string, last *state.Workload) {
	if r.badFiles[key] != why {
		r.log.Warn("workload record unreadable: serving its last good read", "file", key, "err", why,
			"container", last.ContainerID, "iface", last.HostIface, "ips", last.IPs)
	}
	fixed, err := r.wls.Repair(key, last)
	switch {
	case err != nil:
		r.log.Warn("cannot repair workload record, serving its last good read", "file", key, "err", err)
	case fixed:
		r.log.Info("workload record repaired from its last good read", "file", key, "container", last.ContainerID, "iface", last.HostIface)
		r.metrics.Repairs.WithLabelValues("record").Inc()
		r.repairs.Add("record", key, 1)
	}
}

// reportBad logs each bad workload record once (until it is fixed or
// changes).
func (r *workloadRoutes) reportBad(bad []error) {
	r.badSeen = logBad(r.log, r.badSeen, bad)
	r.setBadRecords()
}

// setBadRecords publishes routelet_bad_records: workload files that cannot
// be read or were refused, and bad node records of the last full read
// (badNodes).
func (r *workloadRoutes) setBadRecords() {
	r.metrics.BadRecords.Set(float64(len(r.badFiles) + len(r.refused) + r.badNodes()))
}

// holdUnnamed makes the route tables keep the routes of every routelet veth
// that no served record names while some record that cannot be read has
// no good read to serve (the daemon started with it, or never read it
// whole): that record may be the veth's, so what the kernel holds there
// stays, as the plugin left it, until the record can be read. The leak
// collector never sees such a record, so it is not collected either. Held
// veths are released once no such record is left (or a record names them).
func (r *workloadRoutes) holdUnnamed() {
	blind := false
	for key := range r.badFiles {
		if r.workloads[key] == nil {
			blind = true
			break
		}
	}
	if !blind && len(r.held) == 0 {
		return
	}
	want := map[string]struct{}{}
	if blind {
		named := make(map[string]struct{}, len(r.workloads))
		for _, w := range r.workloads {
			named[w.HostIface] = struct{}{}
		}
		for name := range r.links {
			if _, ok := named[name]; !ok && r.ownVeth(name) {
				want[name] = struct{}{}
			}
		}
	}
	hold := func(name string, on bool) {
		for _, rt := range []RouteTable{r.rt4, r.rt6} {
			if rt != nil {
				rt.Hold(name, on)
			}
		}
		r.needApply = true
	}
	for name := range r.held {
		if _, ok := want[name]; !ok {
			delete(r.held, name)
			hold(name, false)
		}
	}
	for name := range want {
		if _, ok := r.held[name]; !ok {
			r.held[name] = struct{}{}
			hold(name, true)
			r.log.Warn("keeping the routes of a veth no record names: an unreadable workload record may be its", "iface", name)
		}
	}
}

// syncDesired brings the desired routes up to date with the records in
// changedKeys and the links in changedLinks (desiredSet.update: only what
// they can affect is derived again), or, after a full read (desired nil),
// with every record, and hands the interfaces whose routes changed to the
// tables; it reports whether it handed them any. Refused records and
// addresses several records claim are logged when that changes. First it
// brings the tables' held veths up to date (holdUnnamed).
func (r *workloadRoutes) syncDesired() bool {
	r.holdUnnamed()
	if r.desired != nil && len(r.changedKeys) == 0 && len(r.changedLinks) == 0 {
		return false
	}
	routed := false
	var delta desiredDelta
	if r.desired == nil {
		r.desired, delta = newDesiredSet(r.routeInput())
		d := r.desired.d
		// What was noted of records and addresses no longer there goes.
		maps.DeleteFunc(r.refused, func(key, _ string) bool { _, ok := d.Refused[key]; return !ok })
		maps.DeleteFunc(r.winners, func(addr netip.Addr, _ string) bool { _, ok := d.Contested[addr]; return !ok })
		maps.DeleteFunc(r.superseded, func(key, _ string) bool { _, ok := d.Superseded[key]; return !ok })
		for fam, rt := range []RouteTable{r.rt4, r.rt6} {
			if rt != nil && rt.SetAllRoutes(d.Routes[fam]) {
				routed = true
			}
		}
		r.servedAll = true
		clear(r.servedKeys)
	} else {
		delta = r.desired.update(r.changedKeys, r.changedLinks)
		for fam, rt := range []RouteTable{r.rt4, r.rt6} {
			if rt == nil {
				continue
			}
			for _, iface := range delta.ifaces[fam] {
				rt.SetRoutes(iface, r.desired.d.Routes[fam][iface])
				routed = true
			}
		}
	}
	clear(r.changedKeys)
	clear(r.changedLinks)
	r.noteDesired(delta)
	r.metrics.Workloads.Set(float64(len(r.workloads)))
	r.needApply = r.needApply || routed
	return routed
}

// noteDesired logs what delta decided anew: records refused (or refused
// for another reason), records whose veth another record owns (or a new
// one) and addresses several records claim that went to another record.
// It also notes for the other managers (Served.Changed) the records
// derived again and those claiming an address decided again, IPv4 as
// IPv6 (a pod guard lets through the addresses routed to its record).
func (r *workloadRoutes) noteDesired(delta desiredDelta) {
	d := r.desired.d
	defer r.setBadRecords()
	for _, name := range delta.keys {
		if why, news := noteChange(r.refused, d.Refused, name); news {
			w := r.workloads[name]
			r.log.Warn("refusing workload record: no route is programmed for it", "file", name,
				"container", w.ContainerID, "iface", w.HostIface, "ips", w.IPs, "err", why)
		}
	}
	for _, name := range delta.keys {
		if owner, news := noteChange(r.superseded, d.Superseded, name); news {
			w, o := r.workloads[name], r.workloads[owner]
			r.log.Warn("workload record superseded: another record owns its veth; nothing is routed or allowed for it", "file", name,
				"container", w.ContainerID, "iface", w.HostIface, "ips", w.IPs, "created", w.Created,
				"owner", owner, "ownerContainer", o.ContainerID, "ownerCreated", o.Created)
		}
	}
	for _, addr := range delta.addrs {
		if name, news := noteChange(r.winners, d.Contested, addr); news {
			w := r.workloads[name]
			r.log.Warn("several workload records claim one address; routing it to one", "ip", addr,
				"file", name, "container", w.ContainerID, "iface", w.HostIface, "ifaceExists", r.ownVeth(w.HostIface))
		}
	}
	if r.servedAll {
		return
	}
	for _, key := range delta.keys {
		r.servedKeys[key] = struct{}{}
	}
	for _, addr := range delta.addrs {
		for _, key := range r.desired.claims[addr] {
			r.servedKeys[key] = struct{}{}
		}
	}
}

// noteChange brings noted[k] in line with now[k] (deleted when now has
// none) and returns now's value and whether it is one noted did not hold.
func noteChange[K comparable](noted, now map[K]string, k K) (string, bool) {
	v, ok := now[k]
	if !ok {
		delete(noted, k)
		return "", false
	}
	news := noted[k] != v
	noted[k] = v
	return v, news
}

// checkRouteEvent marks an owned interface dirty when a route event shows its
// routes differ from what is desired: a desired route deleted, or an
// unexpected or foreign-protocol route added. Events that match the desired
// state (the echo of routelet's own writes) are ignored. A repair is
// counted for what someone else did — a desired route deleted, a route of
// another protocol added — but not for a route of routelet's own protocol
// that no record wants yet: that is most often the plugin's route of a pod
// whose record the event beat, which the table keeps through the
// interface's grace period and removes after it only if still unwanted.
func (r *workloadRoutes) checkRouteEvent(ev RouteEvent) {
	if ev.Table != 0 && ev.Table != 254 {
		return
	}
	rt := r.rt4
	if ev.IPv6 {
		rt = r.rt6
	}
	if rt == nil {
		return
	}
	if ev.Dst.Addr().Is6() && ev.Dst.Addr().IsLinkLocalUnicast() {
		return // the kernel's fe80::/64 on every interface; the tables leave it alone
	}
	wanted := rt.Wants(ev.Iface, ev.Dst)
	ours := ev.Protocol == r.opts.RouteProtocol
	switch {
	case ev.Deleted && wanted, !ev.Deleted && !ours:
		r.log.Debug("route tampered with, repairing", "iface", ev.Iface, "cidr", ev.Dst, "deleted", ev.Deleted, "proto", ev.Protocol)
		rt.MarkDirty(ev.Iface)
		r.needApply = true
		r.repairs.Add("route", ev.Dst.String()+" dev "+ev.Iface, 1)
	case !ev.Deleted && !wanted:
		r.log.Debug("route of routelet's protocol that no record wants (yet)", "iface", ev.Iface, "cidr", ev.Dst)
		rt.MarkDirty(ev.Iface)
		r.needApply = true
	}
}

// checkNeighEvent marks a workload interface dirty when a neighbour entry for
// one of its desired IPv4 routes was deleted (the static ARP entry).
func (r *workloadRoutes) checkNeighEvent(ev NeighEvent) {
	if !r.opts.StaticARP || !ev.IP.Is4() {
		return
	}
	if r.rt4 != nil && r.rt4.Wants(ev.Iface, netip.PrefixFrom(ev.IP, 32)) {
		r.rt4.MarkDirty(ev.Iface)
		r.needApply = true
		r.repairs.Add("neigh", ev.IP.String()+" dev "+ev.Iface, 1)
	}
}

// applyTables runs the route tables' Apply ahead of the rest of a pass,
// whose own Apply still follows (it reports errors and retries what failed
// here).
func (r *workloadRoutes) applyTables() {
	for _, rt := range []RouteTable{r.rt4, r.rt6} {
		if rt != nil {
			_ = rt.Apply()
		}
	}
}

// collectTemps runs the temp collector, logging each file removed and an
// error once until it changes.
func (r *workloadRoutes) collectTemps() {
	removed, err := r.temps.RemoveStaleTemps()
	for _, p := range removed {
		r.log.Info("leak collection: removed a temp file a killed writer left", "path", p)
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		if msg != r.tempErr {
			r.log.Warn("leak collection: cannot remove every stale temp file, will retry", "err", err)
		}
	}
	r.tempErr = msg
}

// collectLeaks releases workloads whose host veth has been missing for the
// leak grace period and whose netns is gone. A record with a live veth or a
// live netns is never touched.
func (r *workloadRoutes) collectLeaks(ctx context.Context) {
	if len(r.workloads) == 0 {
		clear(r.absentSince)
		return
	}
	// Link events keep linkPresent current, so an idle node makes no
	// syscall here; an interface that looks absent is confirmed with one
	// link dump before its clock starts (events can be lost).
	var links map[string]string
	now := r.now()
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(r.workloads)) {
		w := r.workloads[name]
		seen[w.HostIface] = true
		// Only routelet's own veth keeps a record alive: a bridge or a
		// link without the prefix under that name is not the pod's.
		if r.ownVeth(w.HostIface) {
			delete(r.absentSince, w.HostIface)
			continue
		}
		if links == nil {
			var err error
			if links, err = r.host.Links(); err != nil {
				r.log.Warn("leak check: cannot list links", "err", err)
				return
			}
		}
		if kind, ok := links[w.HostIface]; ok && strings.HasPrefix(w.HostIface, r.opts.IfacePrefix) {
			r.setLink(w.HostIface, kind)
			if kind == "veth" {
				delete(r.absentSince, w.HostIface) // setLink noted it: it can now win addresses from absent records
				continue
			}
		}
		since, ok := r.absentSince[w.HostIface]
		if !ok {
			r.absentSince[w.HostIface] = now
			continue
		}
		if now.Sub(since) < r.opts.LeakGracePeriod || !r.host.NetnsGone(w.Netns) {
			continue
		}
		if r.releaser != nil {
			if err := r.releaser.Release(ctx, w.ContainerID, w.IfName); err != nil {
				r.log.Warn("leak collection: cannot release addresses, will retry", "container", w.ContainerID, "ifname", w.IfName, "err", err)
				continue
			}
		}
		if err := r.wls.Delete(w); err != nil {
			r.log.Warn("leak collection: cannot delete record, will retry", "container", w.ContainerID, "ifname", w.IfName, "err", err)
			continue
		}
		r.log.Info("released leaked workload: netns and host veth gone past the grace period",
			"container", w.ContainerID, "ifname", w.IfName, "iface", w.HostIface, "netns", w.Netns,
			"ips", w.IPs, "absent_for", now.Sub(since).Round(time.Millisecond))
		r.metrics.LeakCollections.Inc()
		delete(r.workloads, name)
		r.changedKeys[name] = struct{}{}
		delete(r.absentSince, w.HostIface)
	}
	for iface := range r.absentSince {
		if !seen[iface] {
			delete(r.absentSince, iface)
		}
	}
	r.syncDesired()
}
