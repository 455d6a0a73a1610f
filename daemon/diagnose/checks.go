package diagnose

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/daemon/allowmgr"
	"github.com/routelet/routelet/pkg/ipset"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
)

// Step IDs (docs/daemon.md lists each with its fix).
const (
	StepNode          = "node"
	StepPeers         = "peers"       // whether the peers can be known at all
	StepRecord        = "record"      // prefixed src- / dst-
	StepVeth          = "veth"        // prefixed
	StepSysctls       = "sysctls"     // prefixed
	StepHostRoute     = "host-route"  // prefixed
	StepPodMTU        = "pod-mtu"     // prefixed
	StepPeerRecord    = "peer-record" // the far end's node record
	StepRoute         = "route"       // towards the far end's block
	StepOverlayDevice = "overlay-device"
	StepVTEP          = "vtep"
	StepVTEPARP       = "vtep-arp"
	StepVTEPFDB       = "vtep-fdb"
	StepAllowlist     = "allowlist"     // the far node in our allowlist
	StepAllowlistFar  = "allowlist-far" // our node in the far node's (Info)
	StepPathMTU       = "path-mtu"
	StepFamily        = "family"
	StepConntrack     = "conntrack"
	StepProbe         = "probe"
	StepBlockClaims   = "block-claims" // this node's blocks claimed by another in the datastore
)

// walk lists the steps of the path from s to d through this node.
func (w *world) walk(s, d End) []Step {
	steps := []Step{w.nodeStep()}
	if len(w.conflicts) > 0 {
		steps = append(steps, w.blockClaimsStep(s, d))
	}
	if w.peersUnknown != "" {
		steps = append(steps, w.unknownPeersStep())
	}
	fams := intersect(w.families(s), w.families(d))
	if s.Kind == KindPod {
		steps = append(steps, w.localPod("src-", s)...)
	}
	if len(fams) == 0 {
		steps = append(steps, Step{ID: StepFamily, Status: Fail,
			Fact:    fmt.Sprintf("SRC has IPv%v, DST IPv%v", w.families(s), w.families(d)),
			Problem: "the two ends share no IP family", Fix: "give an address of the other end's family"})
	}
	remote, ok := d, !d.local
	if !ok {
		remote, ok = s, !s.local
	}
	if ok && w.cfg.BGP && !w.cfg.BGPProgram {
		steps = append(steps, w.bgpAnnounceStep())
	}
	for _, v := range fams {
		if ok {
			steps = append(steps, w.remote(remote, v)...)
		}
	}
	if d.Kind == KindPod {
		steps = append(steps, w.localPod("dst-", d)...)
	}
	for _, v := range fams {
		a, okA := w.addr(s, v)
		b, okB := w.addr(d, v)
		if okA && okB && s.Kind != KindNode && d.Kind != KindNode {
			steps = append(steps, w.conntrack(a, b, v))
		}
	}
	return steps
}

// intersect returns the families both lists hold.
func intersect(a, b []int) []int {
	var out []int
	for _, v := range a {
		if slices.Contains(b, v) {
			out = append(out, v)
		}
	}
	return out
}

// nodeStep reports this node's own record and daemon.
func (w *world) nodeStep() Step {
	st := Step{ID: StepNode, Status: Pass}
	daemon := "routeletd is not running"
	if w.running {
		daemon = "routeletd is running"
	}
	switch {
	case w.status == nil:
		daemon += ", no daemon.json"
	case w.status.Ready:
		daemon += ", ready"
	default:
		daemon += ", not ready: " + w.status.Reason
	}
	st.Fact = fmt.Sprintf("node %s (%s): %s; pod MTU %d; blocks %s", w.cfg.NodeName, w.cfg.Mode, daemon, w.podMTU(), prefixList(w.local))
	if len(w.notes) > 0 {
		st.Fact += "; " + strings.Join(w.notes, "; ")
	}
	switch {
	case w.selfRec == nil && w.peersUnknown != "":
		st.Status, st.Problem = Fail, fmt.Sprintf("this node's own record is in the %s datastore: unknown until routeletd runs and has read it", w.datastore())
		st.Fix = "start routeletd with this configuration, and let it become ready"
	case w.selfRec == nil:
		st.Status, st.Problem = Fail, fmt.Sprintf("this node's record %s/nodes/%s.json is missing: peers cannot reach its pods and nothing here knows its VTEP", w.cfg.StateDir, w.cfg.NodeName)
		st.Fix = "routeletd writes it once it knows the node IP; check --node-name and --state-dir match the daemon's, and that it is running"
	case w.status != nil && w.status.RouteProtocol != 0 && w.status.RouteProtocol != w.cfg.RouteProtocol:
		st.Status, st.Problem = Fail, fmt.Sprintf("diagnose runs with route-protocol %d, the daemon with %d (daemon.json)", w.cfg.RouteProtocol, w.status.RouteProtocol)
		st.Fix = "give diagnose the daemon's configuration (--config, flags or ROUTELET_* variables)"
	case w.self.IPv4.HostIP.IsValid() && w.cfg.Mode.VXLAN() != (w.selfRec.VTEPMAC != ""):
		st.Status = Fail
		st.Problem = fmt.Sprintf("diagnose runs with encapsulation %s, but this node's record %s a VTEP MAC: the daemon runs another encapsulation", w.cfg.Mode, map[bool]string{true: "has", false: "has no"}[w.selfRec.VTEPMAC != ""])
		st.Fix = "give diagnose the daemon's configuration (--config, flags or ROUTELET_* variables)"
	case w.status == nil || w.status.PodMTU == 0:
		st.Status, st.Problem = Fail, "daemon.json is missing or has no pod MTU: the plugin cannot attach pods with the right MTU"
		st.Fix = "start routeletd with this state directory; it writes daemon.json at start-up"
	case !w.running || !w.status.Ready:
		st.Status = Info
		st.Fix = "start routeletd (or see why it is not ready): while it is down nothing below is repaired"
	}
	return st
}

// blockClaimsStep reports the blocks of this node whose claim in the
// datastore the running daemon found naming another holder: it keeps
// serving them, so the path here is intact, but a peer that trusts the
// other claim may route the block there. It fails when an end of the path
// is in such a block, and is Info otherwise.
func (w *world) blockClaimsStep(s, d End) Step {
	st := Step{ID: StepBlockClaims, Status: Info}
	var facts []string
	for _, c := range w.conflicts {
		facts = append(facts, fmt.Sprintf("block %s: key %q holds %q (since %s)", c.Block, c.Key, c.Holder, c.Since.UTC().Format(time.RFC3339)))
		b, err := netip.ParsePrefix(c.Block)
		if err != nil {
			continue
		}
		for _, e := range []End{s, d} {
			if e.local && slices.ContainsFunc(e.Addrs, b.Contains) {
				st.Status = Fail
			}
		}
	}
	st.Fact = fmt.Sprintf("the %s datastore names another holder for this node's blocks: %s; routeletd keeps serving them (their pods are here) and does not overwrite the claims", w.datastore(), strings.Join(facts, "; "))
	if st.Status == Fail {
		st.Problem = "an end of the path is in a block whose claim in the datastore is another's: a node that trusts the claim may take the block and peers may route it away from here"
	}
	st.Fix = "find who wrote the key; once the named holder is known not to use the block, delete the key (routeletd claims the block again) or write this node's name into it"
	return st
}

// localPod checks a pod on this node: record, veth, sysctls, host route,
// MTU. A step that depends on a failed one is left out, so the first
// cause is the one named.
func (w *world) localPod(role string, e End) []Step {
	rec := Step{ID: role + StepRecord, Status: Pass}
	if e.w == nil {
		rec.Status = Fail
		rec.Fact = fmt.Sprintf("no workload record in %s/workloads holds %s", w.cfg.StateDir, addrList(e.Addrs))
		rec.Problem = fmt.Sprintf("no pod on node %s has this address (it is in our block)", w.cfg.NodeName)
		rec.Fix = "check the address; a pod whose record is gone was deleted (CNI DEL) or released by leak collection, and its route with it"
		return []Step{rec}
	}
	wl := e.w
	rec.Fact = fmt.Sprintf("pod %s (container %s, %s): %s on %s, netns %s", e.Pod, shortID(wl.ContainerID), wl.IfName, strings.Join(wl.IPs, ", "), wl.HostIface, wl.Netns)
	if why, refused := w.desired.Refused[e.key]; refused {
		rec.Status, rec.Problem = Fail, "routeletd refuses this record: "+why
		rec.Fact += w.daemonSays("workload/"+e.key, "")
		rec.Fix = "the record was not written by the plugin for this node's blocks; delete the pod and create it again"
		return []Step{rec}
	}
	if owner, superseded := w.desired.Superseded[e.key]; superseded {
		rec.Status = Fail
		rec.Problem = fmt.Sprintf("the host veth %s belongs to another record, %s (a newer sandbox of the pod): nothing is routed or allowed for this one", wl.HostIface, owner)
		rec.Fix = "delete the old sandbox (CNI DEL) or its record"
		return []Step{rec}
	}
	for _, a := range e.Addrs {
		if owner := w.desired.Owner[a]; owner != e.key {
			rec.Status = Fail
			rec.Problem = fmt.Sprintf("address %s is routed to another record, %s (several records claim it; a live veth and the newer record win)", a, owner)
			rec.Fix = "delete the stale pod (CNI DEL) or its record"
			return []Step{rec}
		}
	}
	steps := []Step{rec}
	veth, up := w.vethStep(role, e)
	steps = append(steps, veth)
	if !up {
		return steps
	}
	steps = append(steps, w.sysctlStep(role, e))
	steps = append(steps, w.hostRouteStep(role, e)...)
	steps = append(steps, w.podMTUStep(role, e))
	return steps
}

// hasV6 reports whether any address is IPv6.
func hasV6(as []netip.Addr) bool {
	return slices.ContainsFunc(as, func(a netip.Addr) bool { return a.Is6() })
}

// vethStep checks the pod's host veth; up says whether the steps after it
// make sense.
func (w *world) vethStep(role string, e End) (Step, bool) {
	name := e.w.HostIface
	st := Step{ID: role + StepVeth, Status: Fail}
	l, ok := w.links[name]
	switch {
	case !ok:
		st.Fact = fmt.Sprintf("no link %s", name)
		st.Problem = "the pod's host veth does not exist: its sandbox is gone or was torn down"
		st.Fix = "re-create the pod (CNI ADD); a record whose netns and veth are gone is released after leak-grace-period"
	case l.Kind != "veth":
		st.Fact = fmt.Sprintf("%s is a %s link", name, l.Kind)
		st.Problem = "the record's host interface is not a veth"
		st.Fix = "re-create the pod"
	case !l.Up:
		st.Fact = fmt.Sprintf("%s is a veth, administratively down, mtu %d", name, l.MTU)
		st.Problem = fmt.Sprintf("%s is down: the pod's packets are not received and its routes are withdrawn", name)
		st.Fix = fmt.Sprintf("ip link set %s up; %s", name, w.daemonHint("sets it up again"))
	case !l.LowerUp:
		st.Fact = fmt.Sprintf("%s is a veth, up, no carrier, mtu %d", name, l.MTU)
		st.Problem = fmt.Sprintf("%s has no carrier: the pod's end (%s in its netns) is down", name, e.w.IfName)
		st.Fix = fmt.Sprintf("ip -n %s link set %s up (routeletd does not manage the pod's side)", e.w.Netns, e.w.IfName)
	default:
		st.Status = Pass
		st.Fact = fmt.Sprintf("%s is a veth, up, carrier, mtu %d", name, l.MTU)
		return st, true
	}
	return st, false
}

// sysctlStep checks the veth's and the node's settings against the one
// table ADD writes and the daemon re-asserts.
func (w *world) sysctlStep(role string, e End) Step {
	v6 := hasV6(e.Addrs)
	want := append(podnet.HostSysctls(e.w.HostIface, v6), podnet.NodeSysctls(v6)...)
	var facts, bad []string
	for _, s := range want {
		got, err := w.k.Sysctl(s.Key)
		short := strings.TrimPrefix(strings.Replace(s.Key, "/"+e.w.HostIface+"/", "/…/", 1), "net/")
		switch {
		case err != nil && s.IfPresent && notExist(err):
			continue
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s unreadable (%v), want %s", s.Key, err, s.Value))
		case got != s.Value:
			bad = append(bad, fmt.Sprintf("%s=%s (want %s)", s.Key, got, s.Value))
		}
		facts = append(facts, short+"="+got)
	}
	st := Step{ID: role + StepSysctls, Status: Pass, Fact: strings.Join(facts, " ")}
	if len(bad) > 0 {
		st.Status, st.Problem = Fail, strings.Join(bad, "; ")
		st.Fix = fmt.Sprintf("sysctl -w each key to its value (dots for slashes); %s", w.daemonHint("re-asserts them every device-check-period"))
	}
	return st
}

// hostRouteStep checks the pod's routes (and IPv4 static ARP) as
// agent.DesiredRoutes wants them.
func (w *world) hostRouteStep(role string, e End) []Step {
	var out []Step
	for _, v := range []int{4, 6} {
		var want []routes.Target
		for _, t := range w.desired.Routes[v/6][e.w.HostIface] {
			if slices.Contains(e.Addrs, t.CIDR.Addr()) {
				want = append(want, t)
			}
		}
		if len(want) == 0 {
			continue
		}
		st := Step{ID: role + StepHostRoute, Family: v, Status: Pass}
		kr, err := w.routes(v)
		if err != nil {
			st.Status, st.Fact, st.Problem = Fail, err.Error(), "cannot read the routing table"
			out = append(out, st)
			continue
		}
		var facts []string
		for _, t := range want {
			got := findRoute(kr, t.CIDR)
			diff := ""
			if got != nil && got.Iface == e.w.HostIface {
				diff = got.Mismatch(t, w.cfg.RouteProtocol)
			}
			switch {
			case got == nil:
				st.Status = Fail
				facts = append(facts, fmt.Sprintf("no route %s", t.CIDR))
				st.Problem = fmt.Sprintf("route %s dev %s is missing: traffic to the pod follows the block's blackhole", t.CIDR, e.w.HostIface)
				st.Fix = w.daemonHint("re-adds it")
			case got.Iface != e.w.HostIface || diff != "":
				st.Status = Fail
				facts = append(facts, describeRoute(*got))
				st.Problem = fmt.Sprintf("%s is routed %s, not dev %s proto %d", t.CIDR, describeRoute(*got), e.w.HostIface, w.cfg.RouteProtocol)
				if diff != "" {
					st.Problem += fmt.Sprintf(" as routeletd writes it (the kernel's has %s)", diff)
				}
				if got.Protocol != w.cfg.RouteProtocol {
					st.Fix = fmt.Sprintf("that route is not routelet's (routelet never replaces it): ip route del %s; then routeletd adds its own", t.CIDR)
				} else {
					st.Fix = w.daemonHint("corrects it")
				}
			default:
				facts = append(facts, describeRoute(*got))
			}
			if v == 4 && len(t.DestMAC) > 0 && got != nil {
				if f := w.staticARP(e.w.HostIface, t.CIDR.Addr(), t.DestMAC); f != "" {
					st.Status = Fail
					facts = append(facts, f)
					st.Problem = fmt.Sprintf("the permanent neighbour %s → %s on %s is missing or wrong", t.CIDR.Addr(), t.DestMAC, e.w.HostIface)
					st.Fix = w.daemonHint("re-adds it")
				}
			}
		}
		st.Fact = strings.Join(facts, "; ")
		if st.Status == Fail {
			for _, t := range want {
				if note := w.daemonSays("", t.CIDR.String()); note != "" {
					st.Fact += note
					break
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// staticARP returns "" when dev holds the permanent neighbour ip → mac,
// else what it holds.
func (w *world) staticARP(dev string, ip netip.Addr, mac net.HardwareAddr) string {
	ns, err := w.neighs(dev, 4)
	if err != nil {
		return err.Error()
	}
	for _, n := range ns {
		if n.IP == ip {
			if n.MAC == mac.String() && n.Permanent() {
				return ""
			}
			return fmt.Sprintf("neighbour %s → %s (permanent %v)", ip, n.MAC, n.Permanent())
		}
	}
	return fmt.Sprintf("no neighbour %s on %s", ip, dev)
}

// findRoute returns the route with exactly dst, or nil.
func findRoute(rs []Route, dst netip.Prefix) *Route {
	for i := range rs {
		if rs[i].Dst == dst {
			return &rs[i]
		}
	}
	return nil
}

// describeRoute renders a route as ip route prints it.
func describeRoute(r Route) string {
	var b strings.Builder
	switch r.Target() {
	case routes.TypeBlackhole:
		b.WriteString("blackhole ")
	case routes.TypeUnreachable:
		b.WriteString("unreachable ")
	}
	b.WriteString(r.Dst.String())
	if r.Gateway.IsValid() {
		fmt.Fprintf(&b, " via %s", r.Gateway)
	}
	if r.Iface != "" && r.Iface != routes.InterfaceNone {
		fmt.Fprintf(&b, " dev %s", r.Iface)
	}
	if r.OnLink {
		b.WriteString(" onlink")
	}
	if r.MTU > 0 {
		fmt.Fprintf(&b, " mtu %d", r.MTU)
	}
	fmt.Fprintf(&b, " proto %d", r.Protocol)
	return b.String()
}

// podMTUStep compares the pod's interface MTU with the pod MTU the node
// publishes.
func (w *world) podMTUStep(role string, e End) Step {
	st := Step{ID: role + StepPodMTU, Status: Pass}
	l, err := w.k.PodLink(e.w.Netns, e.w.IfName)
	if err != nil {
		st.Status, st.Fact = Fail, err.Error()
		st.Problem = fmt.Sprintf("cannot read %s in the pod's netns", e.w.IfName)
		st.Fix = "the pod's netns is gone or was replaced: re-create the pod"
		return st
	}
	st.Fact = fmt.Sprintf("%s in the pod: mtu %d; node pod MTU %d", e.w.IfName, l.MTU, w.podMTU())
	if mtu := w.podMTU(); mtu > 0 && l.MTU != mtu {
		st.Status = Fail
		st.Problem = fmt.Sprintf("the pod's %s has MTU %d, the node's pod MTU is %d: packets over %d bytes are dropped or fragmented on the way", e.w.IfName, l.MTU, mtu, min(l.MTU, mtu))
		st.Fix = fmt.Sprintf("ip -n %s link set %s mtu %d, or re-create the pod (ADD takes daemon.json's podMTU)", e.w.Netns, e.w.IfName, mtu)
	}
	return st
}

// remote checks, for family v, what this node needs to reach the far end
// e (a pod or node elsewhere, or an address nobody claims): its record,
// the route to its block(s), the overlay device, VTEP, ARP and FDB, the
// allowlists and the MTU along the path.
func (w *world) remote(e End, v int) []Step {
	pr := Step{ID: StepPeerRecord, Family: v, Status: Pass}
	if w.peersUnknown != "" {
		pr.Status, pr.Fact = Fail, "peers: "+w.peersUnknown
		pr.Problem = fmt.Sprintf("whether a node claims %s is unknown", addrList(e.Addrs))
		pr.Fix = fmt.Sprintf("start routeletd on node %s and run diagnose again", w.cfg.NodeName)
		return []Step{pr}
	}
	if e.Kind == KindUnknown {
		pr.Status = Fail
		pr.Fact = fmt.Sprintf("no node record in %s claims a block holding %s (%d peers known)", w.peerSource(), addrList(e.Addrs), len(w.records))
		if len(w.badNodes) > 0 {
			pr.Fact += fmt.Sprintf("; unreadable records: %v", w.badNodes)
		}
		pr.Problem = fmt.Sprintf("node %s does not know the node of %s: its peer record is missing", w.cfg.NodeName, addrList(e.Addrs))
		pr.Fix = fmt.Sprintf("copy that node's nodes/<name>.json into %s/nodes/ (routeletd picks it up at once)", w.cfg.StateDir)
		if w.datastore() != DatastoreFile {
			pr.Fix = fmt.Sprintf("that node's routeletd publishes its record to the %s datastore: check that it runs there and is ready", w.datastore())
		}
		return []Step{pr}
	}
	rec := w.records[e.Node]
	n, valid := w.valid[e.Node]
	pr.Fact = fmt.Sprintf("node %s: host %s, VTEP MAC %s, tunnel %s, blocks %s", e.Node, orNone(pick(rec.HostIPv4, rec.HostIPv6, v)),
		orNone(pick(rec.VTEPMAC, rec.VTEPMACv6, v)), orNone(pick(rec.TunnelIPv4, rec.TunnelIPv6, v)), orNone(strings.Join(rec.Blocks, ", ")))
	if !valid {
		pr.Status = Fail
		pr.Problem = "routeletd refuses the record: " + refusalsOf(w.res.Refused, e.Node, peers.FieldRecord)
		pr.Fix = "fix the record at its source (a record carrying this node's host IP, VTEP MAC or tunnel address, or a bad name, is refused whole)"
		return []Step{pr}
	}
	if r := refusalsOf(w.res.Refused, e.Node, ""); r != "" {
		pr.Fact += "; refused values: " + r
	}
	steps := []Step{pr}
	f := w.family(v)
	blocks := []netip.Prefix{e.Block}
	if e.Kind == KindNode {
		blocks = blocksOf(rawBlocks(rec), v)
	}
	if w.cfg.Encrypted {
		first := !w.wgWalked[e.Node]
		w.wgWalked[e.Node] = true
		return append(steps, w.remoteWireGuard(e, rec, n, blocks, v, first)...)
	}
	if w.cfg.BGP && w.cfg.BGPProgram {
		return append(steps, w.remoteBGP(e, n, blocks, v)...)
	}
	var via []string
	for _, b := range blocks {
		st, dev := w.routeStep(f, e.Node, b, v)
		if st.Status == Pass && e.Kind == KindRemotePod {
			w.shadowed(&st, b, e.Addrs[0], v)
		}
		steps = append(steps, st)
		if dev != "" && !slices.Contains(via, dev) {
			via = append(via, dev)
		}
	}
	ep := n.Endpoint(v)
	for _, dev := range via {
		switch {
		case w.cfg.Mode.VXLAN() && dev == f.in.VXLANDevice:
			steps = append(steps, w.deviceStep(f, dev, v))
			vt, ok := w.vtepStep(e.Node, rec, ep, v)
			steps = append(steps, vt)
			if ok {
				steps = append(steps, w.arpStep(dev, e.Node, ep, v), w.fdbStep(dev, e.Node, ep, v))
			}
			steps = append(steps, w.allowStep(ipset.Name(ipset.VXLANPeers, setFamily(v)), "VXLAN", e.Node, ep.HostIP, v)...)
		case w.cfg.Mode.IPIP() && dev == overlay.DeviceIPIP:
			steps = append(steps, w.deviceStep(f, dev, v))
			steps = append(steps, w.allowStep(ipset.IPIPPeers, "IPIP", e.Node, ep.HostIP, v)...)
		}
		steps = append(steps, w.pathMTUStep(f, dev, v))
	}
	return steps
}

// setFamily maps 4/6 to the ipset family.
func setFamily(v int) ipset.Family {
	if v == 6 {
		return ipset.IPv6
	}
	return ipset.IPv4
}

// pick returns the value of family v.
func pick(v4, v6 string, v int) string {
	if v == 6 {
		return v6
	}
	return v4
}

// orNone returns s, or "none" for "".
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// refusalsOf lists node's refusals (of field, or all when field is "").
func refusalsOf(rs []peers.Refusal, node, field string) string {
	var out []string
	for _, r := range rs {
		if r.Node == node && (field == "" || r.Field == field) {
			out = append(out, fmt.Sprintf("%s %s: %s", r.Field, r.Value, r.Reason))
		}
	}
	return strings.Join(out, "; ")
}

// routeStep checks the route to block b of node: as overlay.Routes wants
// it, and as the kernel has it. It returns the device the route uses when
// one is wanted.
func (w *world) routeStep(f *family, node string, b netip.Prefix, v int) (Step, string) {
	st := Step{ID: StepRoute, Family: v, Status: Fail}
	if f.why != "" {
		st.Fact = fmt.Sprintf("no IPv%d overlay on node %s: %s", v, w.cfg.NodeName, f.why)
		st.Problem = fmt.Sprintf("block %s of node %s cannot be routed from here", b, node)
		st.Fix = "give this node a host IP and a block of the family (node-ip, pod-cidr) and let routeletd publish its record"
		return st, ""
	}
	dev, want, found := "", routes.Target{}, false
	for name, ts := range f.want {
		for _, t := range ts {
			if t.CIDR == b {
				dev, want, found = name, t, true
			}
		}
	}
	if !found {
		st.Fact = fmt.Sprintf("routeletd wants no route to %s (node %s)", b, node)
		if w.refusedBlock(&st, node, b, "") {
			return st, ""
		}
		for _, err := range f.probs {
			if strings.HasPrefix(err.Error(), "peer "+node+":") {
				st.Problem = fmt.Sprintf("route %s missing: %v", b, err)
				st.Fix = routeProblemFix(err.Error(), node)
				return st, ""
			}
		}
		st.Problem = fmt.Sprintf("route %s missing: node %s's record yields no route for it", b, node)
		st.Fix = "compare the record with the node's actual blocks"
		return st, ""
	}
	path := "direct"
	if dev != f.in.Parent {
		path = "overlay " + dev
	}
	wantDesc := describeRoute(Route{Dst: b, Iface: dev, Type: want.Type.KernelType(), Gateway: want.Gateway, OnLink: want.OnLink, MTU: want.MTU, Protocol: w.cfg.RouteProtocol})
	kr, err := w.routes(v)
	if err != nil {
		st.Fact, st.Problem = err.Error(), "cannot read the routing table"
		return st, dev
	}
	got := findRoute(kr, b)
	diff := ""
	if got != nil && got.Iface == dev {
		diff = got.Mismatch(want, w.cfg.RouteProtocol)
	}
	switch {
	case got == nil:
		st.Fact = fmt.Sprintf("no route %s (want %s, %s)", b, wantDesc, path) + w.daemonSays("", b.String())
		st.Problem = fmt.Sprintf("route %s to node %s is missing", b, node)
		st.Fix = w.daemonHint("re-adds it")
	case got.Iface != dev || diff != "":
		st.Fact = fmt.Sprintf("%s (want %s, %s)", describeRoute(*got), wantDesc, path)
		if diff != "" {
			st.Fact += "; the kernel's has " + diff
		}
		st.Fact += w.daemonSays("", b.String())
		st.Problem = fmt.Sprintf("route %s to node %s differs from what routeletd wants", b, node)
		if got.Protocol != w.cfg.RouteProtocol {
			st.Fix = fmt.Sprintf("that route is not routelet's (proto %d) and routelet never replaces it: ip route del %s", got.Protocol, b)
		} else {
			st.Fix = w.daemonHint("corrects it")
		}
	default:
		st.Status = Pass
		st.Fact = fmt.Sprintf("%s (%s)", describeRoute(*got), path)
	}
	return st, dev
}

// shadowed fails a passed route step when a more specific route takes
// addr away from block b's route (an operator's static route, say).
func (w *world) shadowed(st *Step, b netip.Prefix, addr netip.Addr, v int) {
	kr, _ := w.routes(v)
	for _, r := range kr {
		if r.Dst.Contains(addr) && r.Dst.Bits() > b.Bits() {
			st.Status = Fail
			st.Fact += "; but " + describeRoute(r)
			st.Problem = fmt.Sprintf("%s is more specific than %s and takes %s elsewhere", r.Dst, b, addr)
			st.Fix = fmt.Sprintf("remove it (ip route del %s) unless that detour is meant", r.Dst)
			return
		}
	}
}

// routeProblemFix is the fix for an overlay.Routes problem.
func routeProblemFix(msg, node string) string {
	switch {
	case strings.Contains(msg, "VTEP"):
		return fmt.Sprintf("peer record for %s has no VTEP MAC or tunnel address: its routeletd runs without VXLAN or is older than the VTEP fields; run the same encapsulation there and copy its current record", node)
	case strings.Contains(msg, "L2 adjacency"):
		return "encapsulation none only reaches peers on this node's subnet: use vxlan or ipip (with cross-subnet)"
	}
	return fmt.Sprintf("fix node %s's record (host IP of the family)", node)
}

// deviceStep checks the overlay device the route uses.
func (w *world) deviceStep(f *family, dev string, v int) Step {
	st := Step{ID: StepOverlayDevice, Family: v, Status: Fail}
	l, ok := w.links[dev]
	if !ok {
		st.Fact = fmt.Sprintf("no link %s", dev)
		st.Problem = fmt.Sprintf("the overlay device %s is missing: routes through it are gone with it", dev)
		st.Fix = w.daemonHint("re-creates it")
		return st
	}
	state := "up"
	if !l.Up {
		state = "down"
	}
	st.Fact = fmt.Sprintf("%s: %s, %s, mtu %d, mac %s", dev, l.Kind, state, l.MTU, l.MAC)
	if l.Kind == "vxlan" {
		st.Fact += fmt.Sprintf(", vni %d, port %d", l.VNI, l.Port)
	}
	var bad []string
	if !l.Up {
		bad = append(bad, "down")
	}
	if l.MTU != f.mtu {
		bad = append(bad, fmt.Sprintf("mtu %d (want %d)", l.MTU, f.mtu))
	}
	if l.MasterIndex != 0 {
		bad = append(bad, "enslaved to another link")
	}
	if dev == f.in.VXLANDevice {
		vni, port := orDefault(w.cfg.VNI, overlay.DefaultVNI), orDefault(w.cfg.Port, overlay.DefaultPort)
		if l.Kind != "vxlan" {
			bad = append(bad, "not a vxlan link")
		}
		if l.VNI != vni || l.Port != port {
			bad = append(bad, fmt.Sprintf("vni %d port %d (want %d, %d)", l.VNI, l.Port, vni, port))
		}
		if mac := overlay.VTEPMAC(w.cfg.NodeName, v); l.MAC != mac.String() {
			bad = append(bad, fmt.Sprintf("mac %s (want %s, which peers have in their FDB)", l.MAC, mac))
		}
	}
	if len(bad) > 0 {
		st.Problem = strings.Join(bad, "; ")
		st.Fix = w.daemonHint("re-asserts the device (and at once on a link event)")
		return st
	}
	st.Status = Pass
	return st
}

// orDefault returns v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// vtepStep checks the peer's VTEP facts against what its routeletd
// derives (the MAC from its name). ok says whether the record has a MAC
// and tunnel address to check ARP and FDB against.
func (w *world) vtepStep(node string, rec peers.Record, ep peers.Endpoint, v int) (Step, bool) {
	st := Step{ID: StepVTEP, Family: v, Status: Pass}
	derived := overlay.VTEPMAC(node, v)
	st.Fact = fmt.Sprintf("node %s: VTEP MAC %s, tunnel %s, host %s", node, orNone(pick(rec.VTEPMAC, rec.VTEPMACv6, v)), orNone(pick(rec.TunnelIPv4, rec.TunnelIPv6, v)), ep.HostIP)
	if len(ep.VTEPMAC) == 0 || !ep.TunnelAddr.IsValid() || !ep.HostIP.IsValid() {
		st.Status = Fail
		st.Problem = fmt.Sprintf("peer record for %s lacks a usable VTEP MAC, tunnel address or host IP", node)
		st.Fix = routeProblemFix("VTEP", node)
		return st, false
	}
	if !bytes.Equal(ep.VTEPMAC, derived) {
		st.Status = Fail
		st.Problem = fmt.Sprintf("peer record for %s has VTEP MAC %s, but routeletd on %s derives %s from its name for its device: frames sent to %s are dropped there", node, ep.VTEPMAC, node, derived, ep.VTEPMAC)
		st.Fix = fmt.Sprintf("the record was edited or comes from elsewhere: copy %s's own nodes/%s.json again", node, node)
		if w.datastore() != DatastoreFile {
			st.Fix = fmt.Sprintf("routeletd on %s rewrites its own record in the %s datastore when it is altered: check that it runs there and that nothing else writes %s's record", node, w.datastore(), node)
		}
	}
	return st, true
}

// arpStep checks the permanent neighbour tunnel IP → VTEP MAC on dev.
func (w *world) arpStep(dev, node string, ep peers.Endpoint, v int) Step {
	ns, err := w.neighs(dev, v)
	e := l2Entry{id: StepVTEPARP, v: v, err: err, what: "the neighbours",
		missing: fmt.Sprintf("no neighbour %s on %s", ep.TunnelAddr, dev),
		absent:  fmt.Sprintf("nothing resolves %s's tunnel address %s to its VTEP MAC %s", node, ep.TunnelAddr, ep.VTEPMAC),
		wrong:   fmt.Sprintf("the neighbour for %s's tunnel address should be %s, permanent", node, ep.VTEPMAC)}
	for _, n := range ns {
		if n.IP == ep.TunnelAddr {
			e.found, e.ok = true, n.MAC == ep.VTEPMAC.String() && n.Permanent()
			e.fact = fmt.Sprintf("%s lladdr %s on %s (permanent %v)", n.IP, n.MAC, dev, n.Permanent())
			break
		}
	}
	return w.l2Step(e)
}

// fdbStep checks the FDB entry VTEP MAC → host IP on dev.
func (w *world) fdbStep(dev, node string, ep peers.Endpoint, v int) Step {
	es, err := w.fdb(dev)
	e := l2Entry{id: StepVTEPFDB, v: v, err: err, what: "the FDB",
		missing: fmt.Sprintf("no FDB entry for %s on %s", ep.VTEPMAC, dev),
		absent:  fmt.Sprintf("frames for %s's VTEP %s have no underlay destination (%s): they are dropped", node, ep.VTEPMAC, ep.HostIP)}
	for _, f := range es {
		if f.MAC == ep.VTEPMAC.String() {
			e.found, e.ok = true, f.Dst == ep.HostIP
			e.fact = fmt.Sprintf("%s dst %s on %s (permanent %v)", f.MAC, f.Dst, dev, f.Permanent())
			e.wrong = fmt.Sprintf("frames for %s's VTEP go to %s, not its host IP %s", node, f.Dst, ep.HostIP)
			break
		}
	}
	return w.l2Step(e)
}

// l2Entry is what arpStep and fdbStep found of the entry they look for.
type l2Entry struct {
	id        string
	v         int
	err       error  // the dump failed
	what      string // what was dumped
	found, ok bool   // an entry for the key exists; it is the right one
	fact      string // the entry found
	missing   string // the fact when there is none
	absent    string // the problem when there is none
	wrong     string // the problem when it is not right
}

// l2Step turns an l2Entry into the step's verdict.
func (w *world) l2Step(e l2Entry) Step {
	st := Step{ID: e.id, Family: e.v, Status: Fail, Fact: e.fact}
	switch {
	case e.err != nil:
		st.Fact, st.Problem = e.err.Error(), "cannot read "+e.what
	case !e.found:
		st.Fact, st.Problem, st.Fix = e.missing, e.absent, w.daemonHint("re-adds it")
	case !e.ok:
		st.Problem, st.Fix = e.wrong, w.daemonHint("rewrites it")
	default:
		st.Status = Pass
	}
	return st
}

// allowStep checks that the far node may send us encapsulated traffic
// (its host IP in our set), and says what only the far node can check.
func (w *world) allowStep(set, encap, node string, host netip.Addr, v int) []Step {
	st := Step{ID: StepAllowlist, Family: v, Status: Fail}
	hosts, _ := allowmgr.Members(w.res.Peers, w.local, w.cfg.ExternalNodeCIDRs)
	wanted := slices.ContainsFunc(hosts, func(p netip.Prefix) bool { return p.Contains(host) })
	members, exists, err := w.k.SetMembers(set)
	far := Step{ID: StepAllowlistFar, Family: v, Status: Info,
		Fact: fmt.Sprintf("whether node %s lets this node (%s) send %s is in node %s's allowlist", node, w.self.Endpoint(v).HostIP, encap, node),
		Fix:  fmt.Sprintf("run routeletd diagnose on node %s for the same pods: its step allowlist checks it", node)}
	switch {
	case err == nil && !exists:
		st.Fact = fmt.Sprintf("no ipset %s", set)
		st.Problem = fmt.Sprintf("the allowlist set is missing: ROUTELET-INPUT drops %s from every node", encap)
		st.Fix = w.daemonHint("re-creates it")
	case err != nil:
		st.Fact, st.Problem = err.Error(), "cannot read the allowlist set"
	case !wanted:
		st.Fact = fmt.Sprintf("routeletd's members of %s (%d) leave out %s", set, len(hosts), host)
		st.Problem = fmt.Sprintf("node %s's host IP is not a member routeletd wants", node)
		st.Fix = "the record's host IP was refused: see peer-record"
	case !slices.ContainsFunc(members, func(p netip.Prefix) bool { return p.Contains(host) }):
		st.Fact = fmt.Sprintf("%s lacks %s (members: %d)", set, host, len(members))
		st.Problem = fmt.Sprintf("node %s (%s) is missing from %s: ROUTELET-INPUT drops its %s packets, so nothing from its pods arrives here", node, host, set, encap)
		st.Fix = w.daemonHint("re-adds it (its allowlist check runs every allowlist-check-period)")
	default:
		st.Status = Pass
		st.Fact = fmt.Sprintf("%s holds %s (node %s)", set, host, node)
	}
	return []Step{st, far}
}

// pathMTUStep checks that the pod MTU fits every hop: the route's MTU,
// the overlay device and the parent with the encapsulation overhead.
func (w *world) pathMTUStep(f *family, dev string, v int) Step {
	st := Step{ID: StepPathMTU, Family: v, Status: Pass}
	pod := w.podMTU()
	parent := w.links[f.parent.Name]
	over := overlay.Overhead(w.cfg.Mode, v == 6)
	facts := []string{fmt.Sprintf("pod %d", pod)}
	var bad []string
	if dev == f.parent.Name {
		facts = append(facts, fmt.Sprintf("%s %d (direct)", dev, parent.MTU))
		if pod > parent.MTU {
			bad = append(bad, fmt.Sprintf("pod MTU %d exceeds %s's %d", pod, dev, parent.MTU))
		}
	} else {
		l := w.links[dev]
		facts = append(facts, fmt.Sprintf("route %d", f.in.MTU), fmt.Sprintf("%s %d", dev, l.MTU), fmt.Sprintf("%s %d − %d overhead", f.parent.Name, parent.MTU, over))
		if pod > l.MTU && l.MTU > 0 {
			bad = append(bad, fmt.Sprintf("pod MTU %d exceeds %s's %d", pod, dev, l.MTU))
		}
		if pod > parent.MTU-over {
			bad = append(bad, fmt.Sprintf("pod MTU %d plus %d bytes of encapsulation exceeds %s's %d", pod, over, f.parent.Name, parent.MTU))
		}
	}
	st.Fact = strings.Join(facts, ", ")
	if len(bad) > 0 {
		st.Status, st.Problem = Fail, strings.Join(bad, "; ")
		st.Fix = fmt.Sprintf("set mtu (routeletd config) to at most %d, or 0 to derive it from %s; pods take the new MTU when re-created", parent.MTU-over, f.parent.Name)
	}
	return st
}

// conntrack lists the pair's conntrack entries (Info: they are a
// symptom, not a cause).
func (w *world) conntrack(a, b netip.Addr, v int) Step {
	st := Step{ID: StepConntrack, Family: v, Status: Info}
	fs, err := w.k.Conntrack(a, b)
	if err != nil {
		st.Fact = "cannot read conntrack: " + err.Error()
		return st
	}
	unreplied := 0
	var ls []string
	for _, f := range fs {
		s := fmt.Sprintf("%s %s → %s", f.Proto, f.Src, f.Dst)
		if f.SrcPort != 0 || f.DstPort != 0 {
			s = fmt.Sprintf("%s %s → %s", f.Proto, netip.AddrPortFrom(f.Src, f.SrcPort), netip.AddrPortFrom(f.Dst, f.DstPort))
		}
		if !f.Replied {
			s += " unreplied"
			unreplied++
		}
		ls = append(ls, s)
	}
	slices.Sort(ls)
	st.Fact = fmt.Sprintf("%d entries between %s and %s", len(fs), a, b)
	if len(ls) > 0 {
		const shown = 5
		st.Fact += ": " + strings.Join(ls[:min(len(ls), shown)], "; ")
		if len(ls) > shown {
			st.Fact += fmt.Sprintf("; … %d more", len(ls)-shown)
		}
	}
	if unreplied > 0 {
		st.Fix = fmt.Sprintf("%d unreplied: the packets left but no answer came back; the failed step above (or on the other node) says why", unreplied)
	}
	return st
}

// addrList joins addresses.
func addrList(as []netip.Addr) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, ", ")
}

// prefixList joins prefixes.
func prefixList(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return orNone(strings.Join(s, ", "))
}

// shortID shortens a container ID to 12 characters.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
