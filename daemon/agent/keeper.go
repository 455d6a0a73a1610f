package agent

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/pkg/podnet"
)

// Keeper is the part of *podnet.Keeper the loop drives: it re-asserts the
// per-veth and node settings the plugin's ADD made (sysctls, veth up, IPv6
// pod neighbours).
type Keeper interface {
	SetVeths(vs []podnet.HostVeth)
	LinkChanged(name string)
	NeighChanged(name string)
	CheckAll()
	Check(sysctls bool) (podnet.Repairs, error)
}

// DefaultKeepPeriod is how often, at most, the sysctls of owned veths are
// read: they have no change events.
const DefaultKeepPeriod = time.Second

// SetKeeper makes the loop keep the workloads' veths with k: sysctls every
// period (at most 1s; 0 means 1s), links and neighbours when their events
// arrive, everything on each full sync. Call it before Run.
func (a *Agent) SetKeeper(k Keeper, period time.Duration) {
	if period <= 0 || period > DefaultKeepPeriod {
		period = DefaultKeepPeriod
	}
	a.keeper, a.keepPeriod = k, period
}

// keeperVeths hands the served workloads' host veths to the keeper: only
// records syncDesired accepted, each with the IPv6 addresses routed to it
// (owner: address → record file).
func (a *Agent) keeperVeths(owner map[netip.Addr]string) {
	if a.keeper == nil {
		return
	}
	var vs []podnet.HostVeth
	for _, name := range slices.Sorted(maps.Keys(a.workloads)) {
		w := a.workloads[name]
		if _, bad := a.refused[name]; bad || !strings.HasPrefix(w.HostIface, a.opts.IfacePrefix) {
			continue
		}
		v := podnet.HostVeth{Name: w.HostIface}
		v.MAC, _ = net.ParseMAC(w.ContainerMAC)
		for _, addr := range workloadAddrs(w) {
			if addr.Is6() {
				v.IPv6 = true
				if owner[addr] == name {
					v.Neighbours = append(v.Neighbours, addr)
				}
			}
		}
		vs = append(vs, v)
	}
	a.keeper.SetVeths(vs)
}

// keep runs the keeper: the sysctls when due, the hinted links and
// neighbours always. Repairs are counted in routelet_repairs_total; errors
// are logged (the keeper retries them on its next run).
func (a *Agent) keep(sysctls bool) {
	if a.keeper == nil {
		return
	}
	rep, err := a.keeper.Check(sysctls)
	a.metrics.Repairs.WithLabelValues("sysctl").Add(float64(rep.Sysctls))
	a.metrics.Repairs.WithLabelValues("link").Add(float64(rep.Links))
	a.metrics.Repairs.WithLabelValues("neigh").Add(float64(rep.Neighbours))
	a.snap.repairs.Add("sysctl", "", rep.Sysctls)
	a.snap.repairs.Add("link", "", rep.Links)
	a.snap.repairs.Add("neigh", "", rep.Neighbours)
	if err != nil {
		a.log.Warn("keeping pod veths", "err", err)
	}
}
