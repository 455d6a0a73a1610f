// Package diagnose answers "why can't SRC reach DST" on one node: it walks
// the path hop by hop through what this node's kernel and state directory
// show, against the desired state computed by the daemon's own pure
// functions (agent.DesiredRoutes, overlay.Routes, allowmgr.Members,
// peers.Resolve), so diagnose and the daemon cannot disagree about what
// should be there. Each step says what it read and, when something is
// wrong, what is wrong and what fixes it. See docs/daemon.md.
package diagnose

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/routelet/routelet/daemon/agent"
	"github.com/routelet/routelet/daemon/bgpmgr"
	"github.com/routelet/routelet/daemon/inspect"
	"github.com/routelet/routelet/daemon/overlaymgr"
	"github.com/routelet/routelet/daemon/statusapi"
	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/peers"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// Config is what the daemon on this node runs with (its configuration).
type Config struct {
	NodeName      string
	StateDir      string // named in fix texts
	IfacePrefix   string
	RouteProtocol int
	Mode          overlay.Mode
	VXLANDevice   string // IPv4 VXLAN device (IPv6: overlay.DeviceVXLANv6)
	VNI, Port     int
	// MTU is the configured pod MTU (0: the parent's MTU minus the
	// encapsulation overhead).
	MTU int
	// PodCIDRs are the configured blocks, used when this node's record
	// and daemon.json name none.
	PodCIDRs          []netip.Prefix
	ExternalNodeCIDRs []netip.Prefix
	// Datastore is config key datastore ("" is DatastoreFile). With
	// another datastore the peers come from the running daemon only.
	Datastore string
	// Now stamps new claims in peers.Resolve and dates WireGuard
	// handshakes (default time.Now()).
	Now time.Time
	// Encrypted is encryption wireguard: pod traffic to other nodes goes
	// through the WireGuard device WireGuardDevice (default
	// defaults.DeviceWireGuard) listening on WireGuardPort (default
	// defaults.WireGuardPort), and the WireGuard steps replace the
	// overlay's.
	Encrypted       bool
	WireGuardDevice string
	WireGuardPort   int
	// BGP is bgp on: the node runs a BGP speaker. With BGPProgram
	// (encapsulation none and no encryption) the routes to the other
	// nodes' blocks are the ones its peers announce, "<block> via <next
	// hop> dev <uplink> proto <BGPRouteProtocol>" (default
	// bgpmgr.DefaultRouteProtocol), and the steps bgp-route and
	// bgp-session replace the overlay's route step; without it BGP only
	// announces and the overlay (or WireGuard) routes pod traffic.
	BGP              bool
	BGPRouteProtocol int
	BGPProgram       bool
}

// Status is a step's verdict.
type Status string

// The verdicts. Info is a fact that is not a verdict on the path (no
// failure): conntrack entries, what only the far node can check, a stopped
// daemon.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Info Status = "info"
)

// Step is one hop's check.
type Step struct {
	ID      string `json:"id"`
	Family  int    `json:"family,omitempty"` // 4 or 6 for per-family steps
	Status  Status `json:"status"`
	Fact    string `json:"fact"`              // what was read
	Problem string `json:"problem,omitempty"` // for Fail: what is wrong
	Fix     string `json:"fix,omitempty"`     // what fixes it (also for Info)
}

// Kinds of path ends.
const (
	KindPod       = "pod"        // a pod on this node
	KindRemotePod = "remote-pod" // an address in another node's block
	KindNode      = "node"       // a node: this one or a peer
	KindUnknown   = "address"    // an address no record claims
)

// End is one side of the path, as resolved.
type End struct {
	Arg   string       `json:"arg"`
	Kind  string       `json:"kind"`
	Node  string       `json:"node,omitempty"` // the node it is on (or is)
	Pod   string       `json:"pod,omitempty"`  // namespace/name, else the container ID
	Addrs []netip.Addr `json:"addrs,omitempty"`
	// Block is the block holding a remote pod's address, as claimed.
	Block netip.Prefix `json:"block,omitzero"`

	local bool            // on this node
	w     *state.Workload // KindPod with a record
	key   string          // w's key
}

// Report is diagnose's answer.
type Report struct {
	Node string `json:"node"` // where it ran
	// Source is statusapi.SourceDaemon when the running daemon's state
	// endpoint answered (its errors are in the steps), SourceOffline when
	// it did not (DaemonDown says why), "" when it was not asked.
	Source     string `json:"source,omitempty"`
	DaemonDown string `json:"daemonDown,omitempty"`
	Src        End    `json:"src"`
	Dst        End    `json:"dst"`
	Steps      []Step `json:"steps"`
	OK         bool   `json:"ok"` // every step passed (Info steps do not count)
}

// ArgError is a SRC or DST that names nothing diagnose can walk to.
type ArgError struct {
	Which, Value, Reason string
}

// Error names the argument and the value.
func (e *ArgError) Error() string { return fmt.Sprintf("%s %q: %s", e.Which, e.Value, e.Reason) }

// Options are what Run does besides the checks.
type Options struct {
	// Probe sends a DF ping of the pod MTU from the source pod (Prober).
	Probe  bool
	Prober Prober
	// Daemon is what the running daemon's state endpoint answered
	// (statusapi.Get): its last error about an object on the path is shown
	// in that object's step. Nil when it was not asked or did not answer.
	Daemon *statusapi.State
	// DaemonDown says why no daemon answered ("routeletd is not running");
	// the report then says so first.
	DaemonDown string
}

// Run resolves src and dst and walks the path between them on this node.
// An *ArgError means a bad argument; any other error means the state or
// the kernel could not be read at all.
func Run(cfg Config, st State, k Kernel, src, dst string, opts Options) (*Report, error) {
	w, err := load(cfg, st, k, opts.Daemon)
	if err != nil {
		return nil, err
	}
	s, err := w.resolve("SRC", src)
	if err != nil {
		return nil, err
	}
	d, err := w.resolve("DST", dst)
	if err != nil {
		return nil, err
	}
	if !s.local && !d.local {
		return nil, &ArgError{Which: "SRC", Value: src, Reason: fmt.Sprintf("neither SRC nor DST (%q) is on node %s: run diagnose on the node of one of them", dst, cfg.NodeName)}
	}
	if s.Kind == d.Kind && s.Node == d.Node && s.Pod == d.Pod && slices.Equal(s.Addrs, d.Addrs) {
		return nil, &ArgError{Which: "DST", Value: dst, Reason: "is the same as SRC"}
	}
	rep := &Report{Node: cfg.NodeName, Src: s, Dst: d, DaemonDown: opts.DaemonDown}
	switch {
	case opts.Daemon != nil:
		rep.Source = statusapi.SourceDaemon
	case opts.DaemonDown != "":
		rep.Source = statusapi.SourceOffline
	}
	rep.Steps = w.walk(s, d)
	if opts.Probe {
		rep.Steps = append(rep.Steps, w.probe(s, d, opts.Prober))
	}
	rep.OK = !slices.ContainsFunc(rep.Steps, func(s Step) bool { return s.Status == Fail })
	return rep, nil
}

// world is everything read once, and the desired state computed from it.
type world struct {
	cfg     Config
	k       Kernel
	status  *state.DaemonStatus
	running bool
	notes   []string                // reads that failed but did not stop diagnose
	derrs   []statusapi.ObjectError // the running daemon's last errors
	// conflicts are the running daemon's blocks whose claim in the
	// datastore names another holder.
	conflicts []statusapi.BlockConflict
	// daemonPeers: the peers (and this node's record) are the running
	// daemon's, from its state endpoint; peersUnknown says why there are
	// none to know (no daemon, and a datastore other than file).
	daemonPeers  bool
	peersUnknown string

	selfRec  *peers.Record
	self     peers.NodeInfo
	local    []netip.Prefix
	records  map[string]peers.Record // peers' records as written, by name
	badNodes []error
	res      peers.Result
	valid    map[string]peers.NodeInfo
	host     nodespace.Host

	wl      map[string]*state.Workload
	badWL   map[string]string
	links   map[string]Link
	desired agent.Desired

	fams   map[int]*family
	kroute map[int][]Route
	// wg is the WireGuard device as read (once, when a step needs it).
	wg *wgRead
	// wgWalked: the far nodes whose WireGuard peer was checked (with the
	// first family walked).
	wgWalked map[string]bool
	// daemon is what the running daemon's state endpoint answered (nil:
	// nothing); its bgp block and tables are what the BGP steps read.
	daemon *statusapi.State
}

// family is the overlay of one IP family as the daemon computes it.
type family struct {
	v      int
	in     overlay.RouteInput
	parent overlay.Underlay
	mtu    int
	want   map[string][]routes.Target
	probs  []error
	why    string // why there is no overlay of this family ("" when there is)
}

// load reads the state and the kernel and computes the desired state.
// With daemon (its loop running) the peers are the daemon's: its
// validated peers and refusals; without, they are nodes/ validated as the
// daemon would (file datastore) or unknown (any other).
func load(cfg Config, st State, k Kernel, daemon *statusapi.State) (*world, error) {
	if cfg.Now.IsZero() {
		cfg.Now = time.Now()
	}
	if cfg.VXLANDevice == "" {
		cfg.VXLANDevice = overlay.DeviceVXLAN
	}
	if cfg.WireGuardDevice == "" {
		cfg.WireGuardDevice = defaults.DeviceWireGuard
	}
	if cfg.WireGuardPort == 0 {
		cfg.WireGuardPort = defaults.WireGuardPort
	}
	if cfg.BGPRouteProtocol == 0 {
		cfg.BGPRouteProtocol = bgpmgr.DefaultRouteProtocol
	}
	w := &world{cfg: cfg, k: k, records: map[string]peers.Record{}, valid: map[string]peers.NodeInfo{}, fams: map[int]*family{}, kroute: map[int][]Route{}, wgWalked: map[string]bool{},
		daemon: daemon}
	var err error
	if w.status, err = st.DaemonStatus(); err != nil {
		w.notes = append(w.notes, fmt.Sprintf("daemon.json unreadable: %v", err))
	}
	if w.running, err = st.DaemonRunning(); err != nil {
		w.notes = append(w.notes, err.Error())
	}
	if daemon != nil {
		w.running, w.derrs, w.conflicts = true, daemon.Errors, daemon.Datastore.BlockConflicts
	}
	if err := w.loadPeers(st, daemon); err != nil {
		return nil, err
	}
	for _, n := range w.res.Peers {
		w.valid[n.Name] = n
	}
	links, err := k.Links()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	w.links = make(map[string]Link, len(links))
	prefixed := map[string]string{}
	for _, l := range links {
		w.links[l.Name] = l
		if strings.HasPrefix(l.Name, cfg.IfacePrefix) {
			prefixed[l.Name] = l.Kind
		}
	}
	if w.wl, w.badWL, err = st.Workloads(); err != nil {
		return nil, err
	}
	w.desired = agent.DesiredRoutes(agent.RouteInput{
		Workloads: w.wl, Links: prefixed, LocalBlocks: w.local, NodeSpace: w.host, IfacePrefix: cfg.IfacePrefix, StaticARP: true,
	})
	return w, nil
}

// loadPeers reads this node's record and the peers: from the running
// daemon when its loop answered, else from nodes/ (file datastore, checked
// with peers.Resolve as the daemon does), else none (unknown).
func (w *world) loadPeers(st State, daemon *statusapi.State) error {
	var err error
	if w.host, err = w.k.NodeSpace(); err != nil {
		return fmt.Errorf("read the node's addresses: %w", err)
	}
	switch {
	case daemon != nil && daemon.Loop:
		self, recs, res, bad := fromDaemon(daemon)
		w.daemonPeers, w.selfRec, w.records, w.res, w.badNodes = true, &self, recs, res, bad
		w.local = w.localBlocks()
		w.self, _ = peers.Parse(self)
		return nil
	case w.datastore() != DatastoreFile && daemon != nil:
		w.peersUnknown = fmt.Sprintf("unknown — routeletd runs but has not read the %s datastore yet (not ready: %s)", w.datastore(), daemon.Readiness.Reason)
		w.local = w.localBlocks()
		return nil
	case w.datastore() != DatastoreFile:
		w.peersUnknown = PeersUnknown(w.datastore())
		w.local = w.localBlocks()
		return nil
	}
	recs, bad, err := st.Nodes()
	if err != nil {
		return err
	}
	w.badNodes = bad
	var others []peers.Record
	for _, r := range recs {
		if r.Name == w.cfg.NodeName {
			w.selfRec = &r
			continue
		}
		w.records[r.Name] = r
		others = append(others, r)
	}
	w.local = w.localBlocks()
	if w.selfRec != nil {
		w.self, _ = peers.Parse(*w.selfRec)
	}
	seen, err := st.Ledger()
	if err != nil {
		w.notes = append(w.notes, fmt.Sprintf("peer claim ledger unreadable (values count as first seen together): %v", err))
	}
	w.res = peers.Resolve(peers.Input{
		Self: peers.Self{Name: w.cfg.NodeName, IPv4: w.self.IPv4, IPv6: w.self.IPv6, Blocks: w.local, WireGuardKey: w.self.WireGuard.PublicKey},
		Host: w.host, Records: others, Seen: seen, Now: w.cfg.Now, Retain: peers.DefaultRetain,
	})
	return nil
}

// localBlocks are this node's blocks: its record's, else daemon.json's,
// else the configured ones.
func (w *world) localBlocks() []netip.Prefix {
	var src []string
	switch {
	case w.selfRec != nil && len(w.selfRec.Blocks) > 0:
		src = w.selfRec.Blocks
	case w.status != nil && len(w.status.Blocks) > 0:
		src = w.status.Blocks
	default:
		return slices.Clone(w.cfg.PodCIDRs)
	}
	var out []netip.Prefix
	for _, s := range src {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// podMTU is the pod MTU daemon.json publishes (0 unknown).
func (w *world) podMTU() int {
	if w.status != nil {
		return w.status.PodMTU
	}
	return 0
}

// family returns the overlay of family v, computed as the overlay manager
// does (overlaymgr.FamilyInput, overlaymgr.Peers, overlay.Routes).
func (w *world) family(v int) *family {
	if f, ok := w.fams[v]; ok {
		return f
	}
	f := &family{v: v}
	w.fams[v] = f
	hostIP := w.self.Endpoint(v).HostIP
	blocks := blocksOf(w.local, v)
	switch {
	case w.selfRec == nil:
		f.why = fmt.Sprintf("this node's record nodes/%s.json is missing", w.cfg.NodeName)
		return f
	case !hostIP.IsValid():
		f.why = fmt.Sprintf("node %s has no IPv%d host IP in its record", w.cfg.NodeName, v)
		return f
	case v == 6 && len(blocks) == 0:
		f.why = fmt.Sprintf("node %s has no IPv6 block", w.cfg.NodeName)
		return f
	}
	parent, err := w.k.Parent(hostIP)
	if err != nil {
		f.why = err.Error()
		return f
	}
	mtu, err := overlay.PodMTU(w.cfg.MTU, parent.MTU, w.cfg.Mode, v == 6)
	if err != nil {
		f.why = err.Error()
		return f
	}
	dev := w.cfg.VXLANDevice
	if v == 6 {
		dev = overlay.DeviceVXLANv6
	}
	f.parent, f.mtu = parent, mtu
	f.in = overlaymgr.FamilyInput(w.cfg.Mode, v, parent, blocks, mtu, dev)
	in := f.in
	in.Peers = overlaymgr.Peers(w.res.Peers, v)
	f.want, f.probs = overlay.Routes(in)
	return f
}

// routes returns the kernel's main table of family v (one read).
func (w *world) routes(v int) ([]Route, error) {
	if rs, ok := w.kroute[v]; ok {
		return rs, nil
	}
	rs, err := w.k.Routes(v)
	if err != nil {
		return nil, fmt.Errorf("list IPv%d routes: %w", v, err)
	}
	w.kroute[v] = rs
	return rs, nil
}

// neighs dumps the neighbours of family v on dev.
func (w *world) neighs(dev string, v int) ([]Neigh, error) {
	l, ok := w.links[dev]
	if !ok {
		return nil, fmt.Errorf("link %s: %w", dev, inspect.ErrNotExist)
	}
	ns, err := w.k.Neighs(l.Index, v)
	if err != nil {
		return nil, fmt.Errorf("list neighbours of %s: %w", dev, err)
	}
	return ns, nil
}

// fdb dumps dev's forwarding database.
func (w *world) fdb(dev string) ([]FDB, error) {
	l, ok := w.links[dev]
	if !ok {
		return nil, fmt.Errorf("link %s: %w", dev, inspect.ErrNotExist)
	}
	es, err := w.k.FDB(l.Index)
	if err != nil {
		return nil, fmt.Errorf("list FDB of %s: %w", dev, err)
	}
	return es, nil
}

// blocksOf returns the prefixes of family v.
func blocksOf(ps []netip.Prefix, v int) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if familyOf(p.Addr()) == v {
			out = append(out, p.Masked())
		}
	}
	return out
}

// familyOf returns 4 or 6.
func familyOf(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 6
}

// rawBlocks returns the blocks a record claims (parsed, masked), valid or not.
func rawBlocks(r peers.Record) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range r.Blocks {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// daemonHint says what repairs a kernel object routelet keeps, given
// whether the daemon runs.
func (w *world) daemonHint(what string) string {
	if !w.running {
		return fmt.Sprintf("routeletd is not running on node %s: start it, and its first sync %s", w.cfg.NodeName, what)
	}
	hint := fmt.Sprintf("routeletd is running and %s; if it does not, its log says why", what)
	if w.status != nil && w.status.LastSyncError != "" {
		hint += fmt.Sprintf(" (lastSyncError: %s)", w.status.LastSyncError)
	}
	return hint
}

// daemonSays returns, for a failed step's fact, the running daemon's last
// error about object (e.g. "workload/<key>") or, line by line, the first
// of its errors that names mention (a CIDR, say) as a word; "" when it
// reported none.
func (w *world) daemonSays(object, mention string) string {
	for _, e := range w.derrs {
		if object != "" && e.Object == object {
			return fmt.Sprintf("; routeletd's last error for %s (since %s): %s", e.Object, e.Since.UTC().Format(time.RFC3339), e.Error)
		}
		if mention == "" {
			continue
		}
		for _, line := range strings.Split(e.Error, "\n") {
			words := strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(" ,;\"'()", r) })
			if slices.Contains(words, mention) {
				return fmt.Sprintf("; routeletd's last error (%s, since %s): %s", e.Object, e.Since.UTC().Format(time.RFC3339), line)
			}
		}
	}
	return ""
}
