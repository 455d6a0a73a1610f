package peers

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routelet/routelet/pkg/defaults"
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

	FieldWireGuardPublicKey = "wireguardPublicKey"
	FieldWireGuardPort      = "wireguardPort"

	FieldBGPAS = "bgpAS"
)

// Record is a node record as a datastore delivers it, before validation:
// every value a string, as it was written.
type Record struct {
	Name                   string
	HostIPv4, HostIPv6     string
	Blocks                 []string
	VTEPMAC, VTEPMACv6     string
	TunnelIPv4, TunnelIPv6 string
	// WireGuardPublicKey is the node's WireGuard public key (base64);
	// WireGuardPort its listen port in decimal, "" for the default.
	WireGuardPublicKey, WireGuardPort string
	// BGPAS is the AS number of the node's BGP speaker in decimal, ""
	// when the node runs none.
	BGPAS string
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
	WireGuard  WireGuardPeer
	BGP        BGPNode
}

// BGPNode is what the BGP speaker needs of a node besides its host IPs.
// A zero ASN means the node speaks no BGP: its record published no AS
// number, or the value was refused.
type BGPNode struct {
	ASN uint32
}

// BGPPeer is one BGP session a node keeps besides the node-to-node mesh:
// a top-of-rack router or a route reflector, from the configuration
// (bgp-peer) or from the datastore's per-node peers.
type BGPPeer struct {
	Address netip.Addr
	ASN     uint32
	// Port is the peer's TCP port; 0 is BGP's 179.
	Port uint16
	// RouteReflector marks the peer as a route reflector (this node its
	// client): shown in status; the session is the same.
	RouteReflector bool
	// PasswordFile holds the TCP-MD5 password ("" none); only the
	// configuration sets it, never a record.
	PasswordFile string
}

// WireGuardPeer is what the WireGuard manager needs of a node besides its
// host IPs (the endpoint is the host IPv4 at Port, else the host IPv6). A
// zero PublicKey means none: the record carried no key, or its key or
// port was refused. Port is set whenever PublicKey is (the record's
// absent port is the default, defaults.WireGuardPort).
type WireGuardPeer struct {
	PublicKey wgtypes.Key
	Port      uint16
}

// Valid reports whether w is a peer WireGuard can configure.
func (w WireGuardPeer) Valid() bool { return w.PublicKey != (wgtypes.Key{}) && w.Port != 0 }

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
		r.WireGuardPublicKey == o.WireGuardPublicKey && r.WireGuardPort == o.WireGuardPort && r.BGPAS == o.BGPAS &&
		r.Updated.Equal(o.Updated)
}

// FromState converts a file-datastore record (a port of 0, the JSON
// field absent, is "": the default; an AS of 0 is "": no BGP).
func FromState(n *state.Node) Record {
	r := Record{
		Name: n.Name, HostIPv4: n.HostIPv4, HostIPv6: n.HostIPv6, Blocks: slices.Clone(n.Blocks),
		VTEPMAC: n.VTEPMAC, VTEPMACv6: n.VTEPMACv6, TunnelIPv4: n.TunnelIPv4, TunnelIPv6: n.TunnelIPv6,
		WireGuardPublicKey: n.WireGuardPublicKey, Updated: n.Updated,
	}
	if n.WireGuardPort != 0 {
		r.WireGuardPort = strconv.Itoa(n.WireGuardPort)
	}
	if n.BGPAS != 0 {
		r.BGPAS = strconv.Itoa(n.BGPAS)
	}
	return r
}

// ToState is the record as the file datastore (and etcd) store it; its
// time stamp is left for the writer to set. It is for this node's own
// record, whose port and AS are "" or a number: anything else is stored as
// 0 (the default port; no BGP).
func ToState(r Record) state.Node {
	port, _ := strconv.Atoi(r.WireGuardPort)
	asn, _ := strconv.Atoi(r.BGPAS)
	return state.Node{Name: r.Name, HostIPv4: r.HostIPv4, HostIPv6: r.HostIPv6, Blocks: slices.Clone(r.Blocks),
		VTEPMAC: r.VTEPMAC, VTEPMACv6: r.VTEPMACv6, TunnelIPv4: r.TunnelIPv4, TunnelIPv6: r.TunnelIPv6,
		WireGuardPublicKey: r.WireGuardPublicKey, WireGuardPort: port, BGPAS: asn}
}

// Parse checks one record on its own (see the package doc) and returns the
// values that passed. An unusable name refuses the whole record; any other
// bad value is dropped and reported. A refused WireGuard port leaves the
// node without WireGuard (a zero WireGuard), though its key is valid; a
// refused AS number leaves it without BGP (a zero BGP).
func Parse(r Record) (NodeInfo, []Refusal) {
	n, refused := parse(r)
	if n.WireGuard.Port == 0 {
		n.WireGuard = WireGuardPeer{}
	}
	return n, refused
}

// parse is Parse, but keeps a valid key whose port was refused (Port 0):
// Resolve still checks that key against this node's and the other peers'
// (a record carrying our key is refused whole, whatever its port), then
// leaves it out.
func parse(r Record) (NodeInfo, []Refusal) {
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
	if r.WireGuardPublicKey != "" {
		k, err := ParseWireGuardKey(r.WireGuardPublicKey)
		if err != nil {
			refuse(FieldWireGuardPublicKey, r.WireGuardPublicKey, err.Error())
		} else {
			n.WireGuard.PublicKey = k
			n.WireGuard.Port = defaults.WireGuardPort
			if r.WireGuardPort != "" {
				p, err := parseWireGuardPort(r.WireGuardPort)
				if err != nil {
					refuse(FieldWireGuardPort, r.WireGuardPort, err.Error())
				}
				n.WireGuard.Port = p
			}
		}
	} else if r.WireGuardPort != "" {
		if _, err := parseWireGuardPort(r.WireGuardPort); err != nil {
			refuse(FieldWireGuardPort, r.WireGuardPort, err.Error())
		}
	}
	if r.BGPAS != "" {
		asn, err := ParseASN(r.BGPAS)
		if err != nil {
			refuse(FieldBGPAS, r.BGPAS, err.Error())
		}
		n.BGP.ASN = asn
	}
	return n, refused
}

// ParseWireGuardKey parses a WireGuard public key in base64, refusing the
// all-zero key (no node can have it). The error does not repeat the value.
func ParseWireGuardKey(s string) (wgtypes.Key, error) {
	k, err := wgtypes.ParseKey(s)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("not a WireGuard key (32 bytes in base64)")
	}
	if k == (wgtypes.Key{}) {
		return wgtypes.Key{}, fmt.Errorf("the all-zero key is not a WireGuard key")
	}
	return k, nil
}

// parseWireGuardPort parses a listen port: decimal, 1–65535; 0 on error.
func parseWireGuardPort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("not a port (1-65535)")
	}
	return uint16(p), nil
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
