package firewall

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/routelet/routelet/pkg/defaults"
	"github.com/routelet/routelet/pkg/ipset"
)

// Chain and table names (docs/design.md).
const (
	// PreroutingChain is the raw-table anti-spoofing chain of earlier
	// routelet versions; the check now sits on each pod veth's ingress
	// hook (pkg/podguard). It is never rendered: only removed where found.
	PreroutingChain  = "ROUTELET-PREROUTING"
	InputChain       = "ROUTELET-INPUT"
	ForwardChain     = "ROUTELET-FORWARD"
	PostroutingChain = "ROUTELET-POSTROUTING"
	// EncryptChain is the encryption guard (only with WireGuard): it drops
	// traffic to a pod CIDR leaving by any interface but the WireGuard
	// device, a pod veth or loopback. It is jumped to from OUTPUT and
	// from the first rule of ROUTELET-FORWARD.
	EncryptChain = "ROUTELET-ENCRYPT"

	TableRaw    = "raw"
	TableFilter = "filter"
	TableNAT    = "nat"
)

// Config is the desired rule set. Zero values of the port, device names and
// the prefix mean routelet's defaults (pkg/defaults), the ones pkg/overlay
// and pkg/podnet use.
type Config struct {
	// VXLAN enables the VXLAN allow/drop rules and forwarding for
	// VXLANDevice (IPv4 rules) and VXLANDeviceV6 (IPv6 rules).
	VXLAN         bool
	VXLANPort     int
	VXLANDevice   string
	VXLANDeviceV6 string
	// IPIP enables the IPIP allow/drop rules and forwarding for IPIPDevice
	// (IPv4 only).
	IPIP       bool
	IPIPDevice string
	// WireGuard is encryption on (both families): UDP to WireGuardPort
	// only from the WireGuard peers set, and the encryption guard
	// (EncryptChain): traffic to a pod CIDR (ipset.Pools) sent or
	// forwarded out of any interface but WireGuardDevice, a pod veth or
	// loopback is dropped, so pod traffic never leaves in plaintext while
	// the device is missing. With it ROUTELET-FORWARD is kept whether or
	// not FORWARD can drop: it holds the guard's jump. The device is not
	// an overlay device here: pod traffic through it is forwarded by the
	// pod interface rules.
	WireGuard       bool
	WireGuardPort   int
	WireGuardDevice string
	// NATOutgoing masquerades traffic from the NAT pools (ipset.NATPools)
	// to destinations outside every pool (ipset.Pools). Without it the
	// nat chain is not rendered at all: routelet then keeps no chain and
	// no jump in the nat table, and never creates that table.
	NATOutgoing bool
	// InterfacePrefix is the prefix of host-side pod veths.
	InterfacePrefix string
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.VXLANPort == 0 {
		c.VXLANPort = defaults.VXLANPort
	}
	if c.WireGuardPort == 0 {
		c.WireGuardPort = defaults.WireGuardPort
	}
	if c.VXLANDevice == "" {
		c.VXLANDevice = defaults.DeviceVXLAN
	}
	if c.VXLANDeviceV6 == "" {
		c.VXLANDeviceV6 = defaults.DeviceVXLANv6
	}
	if c.IPIPDevice == "" {
		c.IPIPDevice = defaults.DeviceIPIP
	}
	if c.WireGuardDevice == "" {
		c.WireGuardDevice = defaults.DeviceWireGuard
	}
	if c.InterfacePrefix == "" {
		c.InterfacePrefix = defaults.VethPrefix
	}
	return c
}

// Validate checks the values iptables would otherwise reject half way
// through an update.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, p := range []struct {
		what string
		port int
	}{{"VXLAN", c.VXLANPort}, {"WireGuard", c.WireGuardPort}} {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("rules config: %s port %d out of range 1..65535", p.what, p.port)
		}
	}
	if c.VXLAN && c.WireGuard && c.VXLANPort == c.WireGuardPort {
		return fmt.Errorf("rules config: WireGuard port %d is the VXLAN port", c.WireGuardPort)
	}
	for _, d := range []struct{ what, name string }{
		{"VXLAN device", c.VXLANDevice}, {"IPv6 VXLAN device", c.VXLANDeviceV6}, {"IPIP device", c.IPIPDevice},
		{"WireGuard device", c.WireGuardDevice}, {"interface prefix", c.InterfacePrefix},
	} {
		if len(d.name) > 15 || strings.ContainsAny(d.name, " \t\n/!+\x00") {
			return fmt.Errorf("rules config: %s %q: not a valid interface name", d.what, d.name)
		}
	}
	return nil
}

// Chain is one rendered chain: its table, name, the built-in chain that
// jumps to it, what that jump matches (empty: every packet; written as
// `iptables -S` prints it) and its rules as rule specs (what follows
// "-A <name>").
type Chain struct {
	Table string
	Name  string
	Hook  string
	Jump  string
	Rules []string
	// OnlyWhileHookCanDrop keeps the chain and its jump only while the
	// built-in chain can drop a packet (a policy other than ACCEPT, or a
	// rule other than a jump to this chain); otherwise both are kept
	// absent like a chain the Config leaves out. For accept-only chains:
	// an accept cannot override a drop anywhere but in its own built-in
	// chain, and with iptables-nft that chain, once it exists, costs
	// every packet passing its hook.
	OnlyWhileHookCanDrop bool
}

// JumpLine returns the jump to c as `iptables -S <hook>` prints it.
func (c Chain) JumpLine() string {
	if c.Jump == "" {
		return "-A " + c.Hook + " -j " + c.Name
	}
	return "-A " + c.Hook + " " + c.Jump + " -j " + c.Name
}

// Lines returns the chain as `iptables -S <name>` prints it.
func (c Chain) Lines() []string {
	out := []string{"-N " + c.Name}
	for _, r := range c.Rules {
		out = append(out, "-A "+c.Name+" "+r)
	}
	return out
}

// Render returns routelet's chains for family from cfg, in the order they
// are applied: ROUTELET-INPUT (filter) always; with WireGuard
// ROUTELET-ENCRYPT (filter, from OUTPUT); ROUTELET-FORWARD (filter)
// always, marked OnlyWhileHookCanDrop (installed only while FORWARD can
// drop) unless WireGuard puts the guard's jump first in it;
// ROUTELET-POSTROUTING (nat) only with NAT outgoing. Rules are written
// the way `iptables -S` prints them (including the implicit "-m udp"),
// so a read-back compares equal.
//
// ROUTELET-INPUT holds an accept/drop pair per enabled peer protocol
// (VXLAN, IPIP, WireGuard; see peerRules).
//
// The pod source check (a pod's packets with a source it was not given,
// and VXLAN or IPIP from a pod) is not an iptables rule: it runs on each
// pod veth's own ingress hook (pkg/podguard), before any prerouting hook.
// ROUTELET-PREROUTING, where earlier versions kept it, is a known chain
// Render leaves out, so a check removes it where an older routelet left it.
func Render(cfg Config, family ipset.Family) []Chain {
	cfg = cfg.withDefaults()
	v6 := family == ipset.IPv6
	pods := cfg.InterfacePrefix + "+"

	// The accept rules take a peer's unicast only (the packet type the
	// driver set from the frame: one compare, no FIB lookup) and exclude
	// pod interfaces: should a pod's guard ever be missing, a pod's
	// packet still cannot pass as a peer's. The drop rules take
	// everything else this node would deliver to the port or protocol,
	// broadcast and multicast included: the kernel hands a broadcast
	// datagram to every socket bound to the port, the VXLAN device's too.
	var input []string
	for _, r := range peerRules(cfg, family) {
		input = append(input,
			"! -i "+pods+" "+r.match+" -m pkttype --pkt-type unicast -m set --match-set "+ipset.Name(r.set, family)+" src -j ACCEPT",
			r.match+" -j DROP")
	}

	var forward []string
	out := []Chain{{Table: TableFilter, Name: InputChain, Hook: "INPUT", Rules: input}}
	if cfg.WireGuard {
		// The encryption guard, before ROUTELET-FORWARD (whose first rule
		// jumps to it) so a rewrite of that chain finds it in place. Pod
		// traffic to another node goes only through the WireGuard device;
		// to a pod of this node through its veth; to this node's own
		// addresses in a block (the tunnel address) through loopback.
		// Anything else to a pod CIDR would leave in plaintext: while the
		// device is missing its routes are gone and such packets follow
		// the default route onto the underlay. The cheap interface
		// compares go first: most packets leave through one of these.
		out = append(out, Chain{Table: TableFilter, Name: EncryptChain, Hook: "OUTPUT", Rules: []string{
			"-o " + pods + " -j RETURN",
			"-o " + cfg.WireGuardDevice + " -j RETURN",
			"-o lo -j RETURN",
			"-m set --match-set " + ipset.Name(ipset.Pools, family) + " dst -j DROP",
		}})
		forward = append(forward, "-j "+EncryptChain)
	}
	forward = append(forward, "-i "+pods+" -j ACCEPT", "-o "+pods+" -j ACCEPT")
	for _, dev := range overlayDevices(cfg, v6) {
		forward = append(forward, "-i "+dev+" -j ACCEPT", "-o "+dev+" -j ACCEPT")
	}
	// With the guard FORWARD can always drop: the chain stays.
	out = append(out, Chain{Table: TableFilter, Name: ForwardChain, Hook: "FORWARD", Rules: forward, OnlyWhileHookCanDrop: !cfg.WireGuard})
	if cfg.NATOutgoing {
		var post []string
		for _, dev := range overlayDevices(cfg, v6) {
			post = append(post, "-o "+dev+" -j RETURN")
		}
		pools, nat := ipset.Name(ipset.Pools, family), ipset.Name(ipset.NATPools, family)
		post = append(post, "-m set --match-set "+nat+" src -m set ! --match-set "+pools+" dst -j MASQUERADE")
		out = append(out, Chain{Table: TableNAT, Name: PostroutingChain, Hook: "POSTROUTING", Rules: post})
	}
	return out
}

// peerRule is one protocol ROUTELET-INPUT takes from the members of a
// peers set only: a member's unicast is accepted, everything else this
// node would deliver to it dropped.
type peerRule struct {
	set   string // base name of the peers set
	match string // the protocol match, as `iptables -S` prints it
}

// peerRules returns the enabled peer rules of family, in chain order:
// VXLAN, IPIP (IPv4 only), WireGuard. cfg has its defaults.
func peerRules(cfg Config, family ipset.Family) []peerRule {
	udp := func(port int) string { return "-p udp -m udp --dport " + strconv.Itoa(port) }
	var out []peerRule
	if cfg.VXLAN {
		out = append(out, peerRule{ipset.VXLANPeers, udp(cfg.VXLANPort)})
	}
	if cfg.IPIP && family == ipset.IPv4 {
		out = append(out, peerRule{ipset.IPIPPeers, "-p 4"})
	}
	if cfg.WireGuard {
		out = append(out, peerRule{ipset.WireGuardPeers, udp(cfg.WireGuardPort)})
	}
	return out
}

// PeerSets returns the base names of every peers set a Config can use,
// in chain order.
func PeerSets() []string {
	var out []string
	for _, r := range peerRules(Config{VXLAN: true, IPIP: true, WireGuard: true}.withDefaults(), ipset.IPv4) {
		out = append(out, r.set)
	}
	return out
}

// Known returns every chain routelet may own, rules left out, whatever the
// Config: the ones Render leaves out are kept absent, and cleanup removes
// them all.
func Known() []Chain {
	return []Chain{
		{Table: TableRaw, Name: PreroutingChain, Hook: "PREROUTING"},
		{Table: TableFilter, Name: InputChain, Hook: "INPUT"},
		{Table: TableFilter, Name: ForwardChain, Hook: "FORWARD"},
		// After ROUTELET-FORWARD, which jumps to it: Cleanup deletes in
		// this order, and iptables refuses to delete a chain still
		// jumped to.
		{Table: TableFilter, Name: EncryptChain, Hook: "OUTPUT"},
		{Table: TableNAT, Name: PostroutingChain, Hook: "POSTROUTING"},
	}
}

// overlayDevices returns the enabled overlay devices of family: IPv6
// rides vxlan-v6.calico, never the IPv4 device.
func overlayDevices(cfg Config, v6 bool) []string {
	var devs []string
	switch {
	case cfg.VXLAN && v6:
		devs = append(devs, cfg.VXLANDeviceV6)
	case cfg.VXLAN:
		devs = append(devs, cfg.VXLANDevice)
	}
	if cfg.IPIP && !v6 {
		devs = append(devs, cfg.IPIPDevice)
	}
	return devs
}

// Sets returns the base names of the ipsets the rendered rules use.
func Sets(cfg Config, family ipset.Family) []string {
	var out []string
	for _, r := range peerRules(cfg.withDefaults(), family) {
		out = append(out, r.set)
	}
	if cfg.WireGuard || cfg.NATOutgoing {
		out = append(out, ipset.Pools)
	}
	if cfg.NATOutgoing {
		out = append(out, ipset.NATPools)
	}
	return out
}

// canonical rewrites a line read back from `iptables -S` into the form
// Render writes: iptables prints protocol 4 by its /etc/protocols name
// ("ipencap") when the file has one, and Render writes the number so the
// result does not depend on that file.
func canonical(line string) string {
	return strings.Replace(line, " -p ipencap ", " -p 4 ", 1)
}
