package agent

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// Keeper is the part of *podnet.Keeper the loop drives: it re-asserts the
// per-veth and node settings the plugin's ADD made (sysctls, veth up, IPv6
// pod neighbours).
type Keeper interface {
	SetVeths(vs []podnet.HostVeth)
	// UpdateVeths changes the veths of set and stops keeping those named
	// in gone; the others stay as they are.
	UpdateVeths(set []podnet.HostVeth, gone []string)
	LinkChanged(name string)
	NeighChanged(name string)
	SysctlsChanged(name string)
	CheckAll()
	Check(poll bool) (podnet.Repairs, error)
	// CheckGuards reads back and repairs the veths' pod guards.
	CheckGuards() (podnet.Repairs, error)
}

// DefaultKeepPeriod is how often, at most, the owned veths' sysctls whose
// changes the kernel does not announce (proxy_delay, accept_ra,
// accept_dad) are read: the longest such a change stays. The announced
// ones are read on their netconf events.
const DefaultKeepPeriod = DefaultTickPeriod

// SetKeeper makes the loop keep the workloads' veths with k: the silent
// sysctls every period (at most DefaultKeepPeriod; 0 means that), the
// announced sysctls, links and neighbours when their events arrive,
// everything on each full sync. Call it before Run.
func (a *Agent) SetKeeper(k Keeper, period time.Duration) {
	if period <= 0 || period > DefaultKeepPeriod {
		period = DefaultKeepPeriod
	}
	a.keeper, a.keepPeriod = k, period
}

// SetGuardPeriod makes the loop check the workloads' pod guards (the
// keeper's CheckGuards) every period; 0 leaves them to link events. Call
// it before Run.
func (a *Agent) SetGuardPeriod(period time.Duration) { a.guardPeriod = period }

// keepGuards runs the keeper's guard check, handing it the veths first
// when the desired routes were derived again since; repairs are counted
// in routelet_repairs_total{object="guard"}.
func (a *Agent) keepGuards() {
	a.keeperVeths()
	rep, err := a.keeper.CheckGuards()
	a.countRepairs(rep)
	if err != nil {
		a.log.Warn("keeping pod guards", "err", err)
	}
}

// NotifySysctls records that a device configuration event named the
// workload interface iface, or with iface "" the node.
func (a *Agent) NotifySysctls(iface string) {
	if iface != "" && !strings.HasPrefix(iface, a.opts.IfacePrefix) {
		return
	}
	a.notifyKey(&a.pending.sysctls, iface)
}

// keptVeth is what keeperVeths last derived from one record: the veth
// handed to the keeper and the record's addresses.
type keptVeth struct {
	w     *state.Workload
	v     podnet.HostVeth
	addrs []netip.Addr
}

// current reports whether kv still holds for the record name: its Addrs
// (the pod guard's sources) are exactly the addresses routed to it
// (owner), and so its neighbours the IPv6 ones among them.
func (kv keptVeth) current(owner map[netip.Addr]string, name string) bool {
	i := 0
	for _, addr := range kv.addrs {
		if owner[addr] != name {
			continue
		}
		if i >= len(kv.v.Addrs) || kv.v.Addrs[i] != addr {
			return false
		}
		i++
	}
	return i == len(kv.v.Addrs)
}

// keeperVeths hands the served workloads' host veths to the keeper: only
// records syncDesired accepted that own their veth (not superseded, so one
// record per veth name, whatever the keys' order), each with the addresses
// routed to it (its pod guard's sources; the IPv6 ones its neighbours). It
// derives a veth again only for a record in keepKeys (read again, a
// claimant of an address decided again, or one whose veth changed owner)
// and hands over only the veths those name (UpdateVeths); after a full
// read (keepAll) it derives every record's and hands over the whole list
// (SetVeths). Nothing is handed over when nothing changed.
func (a *Agent) keeperVeths() {
	if a.keeper == nil || a.desired == nil || (!a.keepAll && len(a.keepKeys) == 0) {
		return
	}
	if a.kept == nil {
		a.kept, a.keptBy = map[string]keptVeth{}, map[string]map[string]struct{}{}
	}
	owner := a.desired.d.Owner
	changed := map[string]struct{}{} // veth names
	derive := func(name string) {
		old, had := a.kept[name]
		w := a.workloads[name]
		_, superseded := a.desired.d.Superseded[name]
		if _, bad := a.refused[name]; w == nil || bad || superseded || !strings.HasPrefix(w.HostIface, a.opts.IfacePrefix) {
			if had {
				a.unkeep(name, old)
				changed[old.v.Name] = struct{}{}
			}
			return
		}
		if had && old.w == w && old.current(owner, name) {
			return
		}
		kv := keptVeth{w: w, v: podnet.HostVeth{Name: w.HostIface}}
		kv.v.MAC, _ = net.ParseMAC(w.ContainerMAC)
		kv.addrs = a.desired.recs[name].addrs
		for _, addr := range kv.addrs {
			if owner[addr] == name {
				kv.v.Addrs = append(kv.v.Addrs, addr)
			}
			if addr.Is6() {
				kv.v.IPv6 = true
				if owner[addr] == name {
					kv.v.Neighbours = append(kv.v.Neighbours, addr)
				}
			}
		}
		if had {
			a.unkeep(name, old)
			changed[old.v.Name] = struct{}{}
		}
		a.kept[name] = kv
		if a.keptBy[kv.v.Name] == nil {
			a.keptBy[kv.v.Name] = map[string]struct{}{}
		}
		a.keptBy[kv.v.Name][name] = struct{}{}
		changed[kv.v.Name] = struct{}{}
	}
	all := a.keepAll
	if all {
		for name := range a.kept {
			if _, ok := a.workloads[name]; !ok {
				derive(name)
			}
		}
		for name := range a.workloads {
			derive(name)
		}
	} else {
		for name := range a.keepKeys {
			derive(name)
		}
	}
	a.keepAll = false
	clear(a.keepKeys)
	switch {
	case len(changed) == 0:
	case all:
		vs := make([]podnet.HostVeth, 0, len(a.kept))
		for _, name := range slices.Sorted(maps.Keys(a.kept)) {
			vs = append(vs, a.kept[name].v)
		}
		a.keeper.SetVeths(vs)
	default:
		var set []podnet.HostVeth
		var gone []string
		for veth := range changed {
			if keys := a.keptBy[veth]; len(keys) > 0 {
				set = append(set, a.kept[slices.Max(slices.Collect(maps.Keys(keys)))].v)
			} else {
				gone = append(gone, veth)
			}
		}
		a.keeper.UpdateVeths(set, gone)
	}
}

// unkeep forgets what keeperVeths derived from record name (kv).
func (a *Agent) unkeep(name string, kv keptVeth) {
	delete(a.kept, name)
	if keys := a.keptBy[kv.v.Name]; keys != nil {
		delete(keys, name)
		if len(keys) == 0 {
			delete(a.keptBy, kv.v.Name)
		}
	}
}

// keep runs the keeper: first hands it the veths of the records whose
// desired routes were derived again since (keeperVeths), then the silent sysctls when due
// (poll), the hinted sysctls, links and neighbours always. Repairs are
// counted in routelet_repairs_total; errors are logged (the keeper retries
// them on its next run).
func (a *Agent) keep(poll bool) {
	if a.keeper == nil {
		return
	}
	a.keeperVeths()
	rep, err := a.keeper.Check(poll)
	a.countRepairs(rep)
	if err != nil {
		a.log.Warn("keeping pod veths", "err", err)
	}
}

// countRepairs counts what the keeper put back.
func (a *Agent) countRepairs(rep podnet.Repairs) {
	for _, r := range []struct {
		object string
		n      int
	}{{"sysctl", rep.Sysctls}, {"link", rep.Links}, {"neigh", rep.Neighbours}, {"guard", rep.Guards}} {
		a.metrics.Repairs.WithLabelValues(r.object).Add(float64(r.n))
		a.snap.repairs.Add(r.object, "", r.n)
	}
}
