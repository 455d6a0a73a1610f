package peers

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/pkg/nodespace"
)

// Self is this node as the checks need it: what a peer record must never
// carry, and the blocks no peer may claim.
type Self struct {
	Name       string
	IPv4, IPv6 Endpoint
	Blocks     []netip.Prefix
	// WireGuardKey is this node's WireGuard public key (zero: none); a
	// record carrying it is refused whole.
	WireGuardKey wgtypes.Key
}

// Claim identifies one value one record claims.
type Claim struct {
	Node, Field, Value string
}

// Sighting is when this daemon first saw a value and, once the value left
// the records, when it went (zero while present).
type Sighting struct {
	First, Gone time.Time
}

// Input is what Resolve decides on.
type Input struct {
	Self Self
	// Host is the node's own address space (addresses, connected subnets);
	// no peer block may overlap it and no peer may carry its addresses.
	Host    nodespace.Host
	Records []Record
	// Seen says when this daemon first saw each value (and when a value
	// that went missing was last there); values absent from it are new.
	// Resolve does not modify it.
	Seen map[Claim]Sighting
	// Retain keeps the first-seen time of a value that left the records
	// for this long, so a record that is briefly unreadable (rewritten in
	// place by cp) comes back established; 0 forgets at once. A newcomer
	// is never held back by a value that is gone: it takes the space while
	// the established value is missing, and gives it back if that value
	// returns within Retain.
	Retain time.Duration
	// Now stamps new values (at least 1 ns after every time in Seen, so a
	// clock that went back cannot make a newcomer established).
	Now time.Time
}

// Result is Resolve's decision.
type Result struct {
	Peers   []NodeInfo // sorted by name; refused values left out
	Refused []Refusal  // sorted by node, field, value
	// Seen holds the first-seen time of every value the current records
	// carry (refused ones included, so a newcomer stays one) and of the
	// values gone for less than Retain: the Seen of the next call.
	Seen map[Claim]Sighting
}

// fieldOrder ranks the fields of one record among values first seen
// together: identity before blocks, so a record's own block cannot push
// out its own host IP.
func fieldOrder(field string) int {
	switch field {
	case FieldHostIPv4:
		return 0
	case FieldHostIPv6:
		return 1
	case FieldVTEPMAC:
		return 2
	case FieldVTEPMACv6:
		return 3
	case FieldTunnelIPv4:
		return 4
	case FieldTunnelIPv6:
		return 5
	case FieldWireGuardPublicKey:
		return 6
	}
	return 7
}

// item is one claimed value on its way through Resolve.
type item struct {
	Claim
	seen    time.Time
	updated *time.Time // the record's time stamp
	addr    netip.Addr // a host or tunnel address
	mac     net.HardwareAddr
	wg      WireGuardPeer // a WireGuard key (Port 0: its port was refused)
	// space is the address space claimed (the block, or the host IP as a
	// single-address prefix); invalid for MACs and tunnel addresses.
	space netip.Prefix
	why   string // decide's verdict: why it is refused, "" when accepted
	mark  uint64 // the Validator's pass that last queued it
}

// owner is an accepted address-space claim.
type owner struct {
	p    netip.Prefix
	node string // "" for this node
}

// space answers "which accepted claim overlaps this prefix" for a set of
// candidate prefixes known up front (this node's blocks and host IPs, every
// record's blocks and host IPs). Two prefixes overlap exactly when one
// contains the other, so one sweep over the candidates sorted by address,
// with a stack of the prefixes that contain the current one, lists every
// overlapping pair; a query then only looks at its own prefix's partners.
// A sane cluster has no overlapping pairs, so a pass over a thousand peers
// costs a sort.
type space struct {
	index map[netip.Prefix]int // prefix → slot
	slots []slot
}

// slot is one distinct candidate prefix.
type slot struct {
	p        netip.Prefix
	accepted *owner // the first accepted claim of exactly p, nil while none
	partners []int  // slots of the other candidates overlapping p
}

// newSpace indexes the candidate prefixes (masked).
func newSpace(candidates []netip.Prefix) *space {
	ps := slices.Clone(candidates)
	sortPrefixes(ps)
	ps = slices.Compact(ps)
	sp := &space{index: make(map[netip.Prefix]int, len(ps)), slots: make([]slot, len(ps))}
	var stack []int
	for i, p := range ps {
		sp.index[p] = i
		sp.slots[i].p = p
		for len(stack) > 0 && !ps[stack[len(stack)-1]].Contains(p.Addr()) {
			stack = stack[:len(stack)-1]
		}
		for _, j := range stack {
			sp.slots[i].partners = append(sp.slots[i].partners, j)
			sp.slots[j].partners = append(sp.slots[j].partners, i)
		}
		stack = append(stack, i)
	}
	return sp
}

// add records o as accepted; o.p must be a candidate. A prefix already
// accepted keeps its first owner.
func (s *space) add(o owner) {
	if i, ok := s.index[o.p]; ok && s.slots[i].accepted == nil {
		s.slots[i].accepted = &o
	}
}

// overlap returns an accepted claim overlapping p (a candidate): p itself,
// else the first accepted partner (shorter prefixes first).
func (s *space) overlap(p netip.Prefix) (owner, bool) {
	i, ok := s.index[p]
	if !ok {
		return owner{}, false
	}
	if o := s.slots[i].accepted; o != nil {
		return *o, true
	}
	for _, j := range s.slots[i].partners {
		if o := s.slots[j].accepted; o != nil {
			return *o, true
		}
	}
	return owner{}, false
}

// Resolve decides which values of the records are used, as the package
// doc describes. It is pure: it reads nothing but in.
func Resolve(in Input) Result {
	res := Result{Seen: make(map[Claim]Sighting, len(in.Seen))}
	recs := slices.Clone(in.Records)
	slices.SortStableFunc(recs, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })

	type liveRec struct {
		out *NodeInfo
		its []*item
	}
	lives := make([]liveRec, 0, len(recs))
	items := make([]*item, 0, 4*len(recs))
	var live []*item
	outs := make([]NodeInfo, len(recs)) // lives point into it
	byName := make(map[string]bool, len(recs))
	for i := range recs {
		r := &recs[i]
		n, refused := parse(*r)
		res.Refused = append(res.Refused, refused...)
		if n.Name == "" {
			continue
		}
		its := claims(n, &r.Updated)
		for _, it := range its {
			if s, ok := in.Seen[it.Claim]; ok {
				it.seen = s.First
			}
		}
		why := sameName
		if !byName[n.Name] {
			why = wholeRecord(in.Self, in.Host, n)
		}
		if why != "" {
			res.Refused = append(res.Refused, Refusal{Node: n.Name, Field: FieldRecord, Value: n.Name, Reason: why})
			items = append(items, its...) // still stamped: a newcomer stays one
			continue
		}
		byName[n.Name] = true
		out := &outs[len(lives)]
		out.Name = n.Name
		out.BGP = n.BGP // an AS number is no claim: nodes share one
		lives = append(lives, liveRec{out, its})
		items = append(items, its...)
		live = append(live, its...)
	}
	stamp(items, in)
	for _, it := range items {
		res.Seen[it.Claim] = Sighting{First: it.seen}
	}
	for c, s := range in.Seen {
		if _, present := res.Seen[c]; present {
			continue
		}
		switch {
		case s.Gone.IsZero():
			res.Seen[c] = Sighting{First: s.First, Gone: in.Now}
		case in.Now.Sub(s.Gone) < in.Retain:
			res.Seen[c] = s
		}
	}

	decide(in.Self, in.Host, live)
	for _, lr := range lives {
		for _, it := range lr.its {
			if it.why != "" {
				res.Refused = append(res.Refused, Refusal{Node: it.Node, Field: it.Field, Value: it.Value, Reason: it.why})
				continue
			}
			fill(lr.out, it)
		}
		sortPrefixes(lr.out.Blocks)
		res.Peers = append(res.Peers, *lr.out)
	}
	slices.SortFunc(res.Refused, compareRefusals)
	return res
}

// compareRefusals orders refusals by node, field and value.
func compareRefusals(a, b Refusal) int {
	return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.Field, b.Field), strings.Compare(a.Value, b.Value))
}

// ourSpace is the address space of this node no peer may claim: its
// blocks (masked) and its host IPs as single-address prefixes.
func ourSpace(self Self) []netip.Prefix {
	var ours []netip.Prefix
	for _, b := range self.Blocks {
		if b.IsValid() {
			ours = append(ours, b.Masked())
		}
	}
	for _, a := range []netip.Addr{self.IPv4.HostIP, self.IPv6.HostIP} {
		if a.IsValid() {
			ours = append(ours, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return ours
}

// decide gives every live item (the values of records not refused whole)
// its verdict (item.why): established first, each value accepted unless
// it conflicts with this node or with a value accepted before it. Ties
// (values first seen together) go by record time, name, field, value.
// (node, field, value) is unique among live items (one record per name,
// one claim per value), so compareItems is a total order and an unstable
// sort decides the same. A value's verdict depends only on the values it
// conflicts with (related), directly or through others, so deciding any
// set closed under related gives each member the verdict it has among all.
// live is sorted in place.
func decide(self Self, host nodespace.Host, live []*item) {
	slices.SortFunc(live, compareItems)
	ours := ourSpace(self)
	candidates := slices.Clone(ours)
	for _, it := range live {
		if it.space.IsValid() {
			candidates = append(candidates, it.space)
		}
	}
	sp := newSpace(candidates)
	for _, p := range ours {
		sp.add(owner{p: p})
	}
	taken := map[string]map[string]string{} // field → value → node, for MACs and tunnel addresses
	for _, it := range live {
		if it.why = conflict(host, sp, taken, it); it.why == "" {
			accept(it, sp, taken)
		}
	}
}

// related reports whether a and b can decide each other's verdict: their
// address spaces overlap, or they are the same MAC or tunnel address.
func related(a, b *item) bool {
	if a.space.IsValid() || b.space.IsValid() {
		return a.space.IsValid() && b.space.IsValid() && a.space.Overlaps(b.space)
	}
	return a.Field == b.Field && a.Value == b.Value
}

// claims lists the values a parsed record claims (one allocation for the
// items, one for the pointers).
func claims(n NodeInfo, updated *time.Time) []*item {
	count := len(n.Blocks) + 1
	for _, ep := range []Endpoint{n.IPv4, n.IPv6} {
		for _, set := range []bool{ep.HostIP.IsValid(), ep.VTEPMAC != nil, ep.TunnelAddr.IsValid()} {
			if set {
				count++
			}
		}
	}
	all := make([]item, 0, count)
	add := func(field, value string, it item) {
		it.Claim = Claim{Node: n.Name, Field: field, Value: value}
		it.updated = updated
		all = append(all, it)
	}
	for _, f := range []struct {
		host, tunnel string
		mac          string
		ep           Endpoint
	}{{FieldHostIPv4, FieldTunnelIPv4, FieldVTEPMAC, n.IPv4}, {FieldHostIPv6, FieldTunnelIPv6, FieldVTEPMACv6, n.IPv6}} {
		if a := f.ep.HostIP; a.IsValid() {
			add(f.host, a.String(), item{addr: a, space: netip.PrefixFrom(a, a.BitLen())})
		}
		if f.ep.VTEPMAC != nil {
			add(f.mac, f.ep.VTEPMAC.String(), item{mac: f.ep.VTEPMAC})
		}
		if a := f.ep.TunnelAddr; a.IsValid() {
			add(f.tunnel, a.String(), item{addr: a})
		}
	}
	if n.WireGuard.PublicKey != (wgtypes.Key{}) {
		add(FieldWireGuardPublicKey, n.WireGuard.PublicKey.String(), item{wg: n.WireGuard})
	}
	for _, b := range n.Blocks {
		add(FieldBlock, b.String(), item{space: b})
	}
	out := make([]*item, len(all))
	for i := range all {
		out[i] = &all[i]
	}
	return out
}

// sameName is why a second record with a name already accepted is
// refused whole.
const sameName = "a second record with the same name"

// wholeRecord returns why a parsed record is refused whole, or "": it
// carries this node's name, one of its addresses as a host IP, its VTEP
// MAC, its tunnel address or its WireGuard public key. (A second record with a name already seen
// is refused whole too; that is the caller's to check.)
func wholeRecord(self Self, host nodespace.Host, n NodeInfo) string {
	if n.Name == self.Name {
		return "it carries this node's own name"
	}
	for _, a := range n.HostIPs() {
		if a == self.IPv4.HostIP || a == self.IPv6.HostIP {
			return fmt.Sprintf("its host IP %s is this node's host IP", a)
		}
		for _, h := range host.Addrs {
			if h.Addr() == a {
				return fmt.Sprintf("its host IP %s is an address of this node", a)
			}
		}
	}
	for _, m := range []net.HardwareAddr{n.IPv4.VTEPMAC, n.IPv6.VTEPMAC} {
		for _, own := range []net.HardwareAddr{self.IPv4.VTEPMAC, self.IPv6.VTEPMAC} {
			if m != nil && bytes.Equal(m, own) {
				return fmt.Sprintf("its VTEP MAC %s is this node's VTEP MAC", m)
			}
		}
	}
	for _, a := range []netip.Addr{n.IPv4.TunnelAddr, n.IPv6.TunnelAddr} {
		if a.IsValid() && (a == self.IPv4.TunnelAddr || a == self.IPv6.TunnelAddr) {
			return fmt.Sprintf("its tunnel address %s is this node's tunnel address", a)
		}
	}
	if k := n.WireGuard.PublicKey; k != (wgtypes.Key{}) && k == self.WireGuardKey {
		return fmt.Sprintf("its WireGuard public key %s is this node's", k)
	}
	return ""
}

// stamp gives every value not seen before a first-seen time: after every
// time already recorded, in the tie order (record time, name, field,
// value), 1 ns apart, so the order decided now is the order kept.
func stamp(items []*item, in Input) {
	var fresh []*item
	base := in.Now
	for _, it := range items {
		if it.seen.IsZero() {
			fresh = append(fresh, it)
		} else if !it.seen.Before(base) {
			base = it.seen.Add(time.Nanosecond)
		}
	}
	for _, s := range in.Seen {
		if !s.First.Before(base) {
			base = s.First.Add(time.Nanosecond)
		}
	}
	slices.SortStableFunc(fresh, compareItems)
	for i, it := range fresh {
		it.seen = base.Add(time.Duration(i))
	}
}

// compareItems orders by first-seen time, then record time, node name,
// field and value.
func compareItems(a, b *item) int {
	return cmp.Or(a.seen.Compare(b.seen), a.updated.Compare(*b.updated), strings.Compare(a.Node, b.Node),
		cmp.Compare(fieldOrder(a.Field), fieldOrder(b.Field)), strings.Compare(a.Value, b.Value))
}

// conflict returns why it cannot be accepted given what was accepted
// before it, or "".
func conflict(host nodespace.Host, sp *space, taken map[string]map[string]string, it *item) string {
	whose := func(o owner) string {
		switch o.node {
		case "":
			return "this node's"
		case it.Node:
			return "this record's own"
		}
		return fmt.Sprintf("node %s's established", o.node)
	}
	switch it.Field {
	case FieldBlock:
		if what := host.Overlap(it.space); what != "" {
			return "overlaps " + what
		}
		if o, ok := sp.overlap(it.space); ok {
			if o.p.IsSingleIP() {
				return fmt.Sprintf("contains %s host IP %s", whose(o), o.p.Addr())
			}
			return fmt.Sprintf("overlaps %s block %s", whose(o), o.p)
		}
	case FieldHostIPv4, FieldHostIPv6:
		if o, ok := sp.overlap(netip.PrefixFrom(it.addr, it.addr.BitLen())); ok {
			if o.p.IsSingleIP() {
				return fmt.Sprintf("is %s host IP", whose(o))
			}
			return fmt.Sprintf("lies in %s block %s", whose(o), o.p)
		}
	case FieldTunnelIPv4, FieldTunnelIPv6:
		if node, ok := taken[it.Field][it.Value]; ok {
			return fmt.Sprintf("is node %s's established tunnel address", node)
		}
	case FieldVTEPMAC, FieldVTEPMACv6:
		if node, ok := taken[it.Field][it.Value]; ok {
			return fmt.Sprintf("is node %s's established VTEP MAC", node)
		}
	case FieldWireGuardPublicKey:
		if node, ok := taken[it.Field][it.Value]; ok {
			return fmt.Sprintf("is node %s's established WireGuard public key", node)
		}
	}
	return ""
}

// accept records an accepted value in what later values are checked
// against.
func accept(it *item, sp *space, taken map[string]map[string]string) {
	if it.space.IsValid() {
		sp.add(owner{p: it.space, node: it.Node})
		return
	}
	if taken[it.Field] == nil {
		taken[it.Field] = map[string]string{}
	}
	taken[it.Field][it.Value] = it.Node
}

// fill puts an accepted value into its record's output.
func fill(n *NodeInfo, it *item) {
	switch it.Field {
	case FieldBlock:
		n.Blocks = append(n.Blocks, it.space)
	case FieldHostIPv4:
		n.IPv4.HostIP = it.addr
	case FieldHostIPv6:
		n.IPv6.HostIP = it.addr
	case FieldVTEPMAC:
		n.IPv4.VTEPMAC = it.mac
	case FieldVTEPMACv6:
		n.IPv6.VTEPMAC = it.mac
	case FieldTunnelIPv4:
		n.IPv4.TunnelAddr = it.addr
	case FieldTunnelIPv6:
		n.IPv6.TunnelAddr = it.addr
	case FieldWireGuardPublicKey:
		if it.wg.Port != 0 { // else its port was refused: no WireGuard
			n.WireGuard = it.wg
		}
	}
}
