package peers

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/state"
)

// Field names, as they appear in refusals, logs and metric labels (the
// node record's JSON keys).
const (
	FieldRecord     = "record" // the whole record was refused
	FieldName       = "name"
	FieldHostIPv4   = "hostIPv4"
	FieldHostIPv6   = "hostIPv6"
	FieldVTEPMAC    = "vtepMAC"
	FieldVTEPMACv6  = "vtepMACv6"
	FieldTunnelIPv4 = "tunnelIPv4"
	FieldTunnelIPv6 = "tunnelIPv6"
	FieldBlock      = "block"
)

// Record is a node record as a datastore delivers it, before validation:
// every value a string, as it was written.
type Record struct {
	Name                   string
	HostIPv4, HostIPv6     string
	Blocks                 []string
	VTEPMAC, VTEPMACv6     string
	TunnelIPv4, TunnelIPv6 string
	// WireGuardPublicKey (base64) and WireGuardPort (the listen port;
	// "" is defaults.WireGuardPort) are the node's WireGuard facts.
	WireGuardPublicKey, WireGuardPort string
	// Updated is the record's own time stamp. It only orders values that
	// are first seen in the same pass; it never overrides what this
	// daemon saw first.
	Updated time.Time
}

// Endpoint is what one IP family's overlay needs to reach a node. Zero
// fields are unknown (or were refused).
type Endpoint struct {
	HostIP     netip.Addr       // underlay address: the outer destination
	VTEPMAC    net.HardwareAddr // VXLAN device MAC
	TunnelAddr netip.Addr       // VXLAN/IPIP device address
}

// NodeInfo is a validated node: every value in it passed Parse and
// Resolve. Blocks are masked and sorted.
type NodeInfo struct {
	Name       string
	IPv4, IPv6 Endpoint
	Blocks     []netip.Prefix
	// WireGuard is the node's WireGuard peer facts (zero PublicKey: none).
	WireGuard WireGuardPeer
}

// Endpoint returns the endpoint of family v (4 or 6).
func (n NodeInfo) Endpoint(v int) Endpoint {
	if v == 6 {
		return n.IPv6
	}
	return n.IPv4
}

// HostIPs returns the node's valid host IPs, IPv4 first.
func (n NodeInfo) HostIPs() []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{n.IPv4.HostIP, n.IPv6.HostIP} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// BlocksOf returns the node's blocks of family v (4 or 6).
func (n NodeInfo) BlocksOf(v int) []netip.Prefix {
	var out []netip.Prefix
	for _, b := range n.Blocks {
		if b.Addr().Is4() == (v == 4) {
			out = append(out, b)
		}
	}
	return out
}

// Refusal is one value of a record that was refused, or the whole record
// (Field FieldRecord).
type Refusal struct {
	Node   string
	Field  string
	Value  string
	Reason string
}

// Error says which record's value was refused and why.
func (r Refusal) Error() string {
	if r.Field == FieldRecord {
		return fmt.Sprintf("node record %q refused: %s", r.Node, r.Reason)
	}
	return fmt.Sprintf("node record %q: %s %q refused: %s", r.Node, r.Field, r.Value, r.Reason)
}

// Equal reports whether r and o are the same record, field by field
// (Updated to the instant: Resolve reads no more of it).
func (r Record) Equal(o Record) bool {
	return r.Name == o.Name && r.HostIPv4 == o.HostIPv4 && r.HostIPv6 == o.HostIPv6 && slices.Equal(r.Blocks, o.Blocks) &&
		r.VTEPMAC == o.VTEPMAC && r.VTEPMACv6 == o.VTEPMACv6 && r.TunnelIPv4 == o.TunnelIPv4 && r.TunnelIPv6 == o.TunnelIPv6 &&
		r.Updated.Equal(o.Updated)
}

// FromState converts a file-datastore record.
func FromState(n *state.Node) Record {
	return Record{
		Name: n.Name, HostIPv4: n.HostIPv4, HostIPv6: n.HostIPv6, Blocks: slices.Clone(n.Blocks),
		VTEPMAC: n.VTEPMAC, VTEPMACv6: n.VTEPMACv6, TunnelIPv4: n.TunnelIPv4, TunnelIPv6: n.TunnelIPv6,
		Updated: n.Updated,
	}
}

// ToState is the record as the file datastore (and etcd) store it; its
// time stamp is left for the writer to set.
func ToState(r Record) state.Node {
	return state.Node{Name: r.Name, HostIPv4: r.HostIPv4, HostIPv6: r.HostIPv6, Blocks: slices.Clone(r.Blocks),
		VTEPMAC: r.VTEPMAC, VTEPMACv6: r.VTEPMACv6, TunnelIPv4: r.TunnelIPv4, TunnelIPv6: r.TunnelIPv6}
}

// Parse checks one record on its own (see the package doc) and returns the
// values that passed. An unusable name refuses the whole record; any other
// bad value is dropped and reported.
func Parse(r Record) (NodeInfo, []Refusal) {
	n := NodeInfo{Name: r.Name}
	if err := state.ValidateNodeName(r.Name); err != nil {
		return NodeInfo{}, []Refusal{{Node: r.Name, Field: FieldRecord, Value: r.Name, Reason: err.Error()}}
	}
	var refused []Refusal
	refuse := func(field, value, reason string) {
		refused = append(refused, Refusal{Node: r.Name, Field: field, Value: value, Reason: reason})
	}
	addr := func(field, s string, v int) netip.Addr {
		if s == "" {
			return netip.Addr{}
		}
		a, err := parseAddr(s, v)
		if err != nil {
			refuse(field, s, err.Error())
			return netip.Addr{}
		}
		return a
	}
	mac := func(field, s string) net.HardwareAddr {
		if s == "" {
			return nil
		}
		m, err := parseUnicastMAC(s)
		if err != nil {
			refuse(field, s, err.Error())
			return nil
		}
		return m
	}
	n.IPv4 = Endpoint{HostIP: addr(FieldHostIPv4, r.HostIPv4, 4), VTEPMAC: mac(FieldVTEPMAC, r.VTEPMAC), TunnelAddr: addr(FieldTunnelIPv4, r.TunnelIPv4, 4)}
	n.IPv6 = Endpoint{HostIP: addr(FieldHostIPv6, r.HostIPv6, 6), VTEPMAC: mac(FieldVTEPMACv6, r.VTEPMACv6), TunnelAddr: addr(FieldTunnelIPv6, r.TunnelIPv6, 6)}
	for _, s := range r.Blocks {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			refuse(FieldBlock, s, fmt.Sprintf("not a CIDR: %v", err))
			continue
		}
		if err := nodespace.CheckBlock(p); err != nil {
			refuse(FieldBlock, s, err.Error())
			continue
		}
		if slices.Contains(n.Blocks, p) {
			continue // listed twice: one claim
		}
		n.Blocks = append(n.Blocks, p)
	}
	sortPrefixes(n.Blocks)
	return n, refused
}

// parseAddr parses an address of family v that can be a node's host or
// tunnel address: not zoned, not IPv4-mapped, not in special space.
func parseAddr(s string, v int) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("not an IP address: %v", err)
	}
	switch {
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("zoned addresses are not allowed")
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("IPv4-mapped addresses are not allowed")
	case a.Is4() != (v == 4):
		return netip.Addr{}, fmt.Errorf("not an IPv%d address", v)
	}
	if why := nodespace.SpecialRange(netip.PrefixFrom(a, a.BitLen())); why != "" {
		return netip.Addr{}, fmt.Errorf("address in %s", why)
	}
	return a, nil
}

// parseUnicastMAC parses a 6-byte unicast, non-zero MAC.
func parseUnicastMAC(s string) (net.HardwareAddr, error) {
	m, err := net.ParseMAC(s)
	if err != nil {
		return nil, fmt.Errorf("not a MAC address: %v", err)
	}
	if len(m) != 6 || m[0]&1 != 0 || slices.Equal(m, make(net.HardwareAddr, 6)) {
		return nil, fmt.Errorf("not a 6-byte unicast MAC")
	}
	return m, nil
}

// sortPrefixes sorts by address, then by length.
func sortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
}
