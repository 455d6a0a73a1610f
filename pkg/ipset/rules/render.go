package rules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/routelet/routelet/pkg/ipset"
)

// Chain and table names (DESIGN.md).
const (
	InputChain       = "ROUTELET-INPUT"
	ForwardChain     = "ROUTELET-FORWARD"
	PostroutingChain = "ROUTELET-POSTROUTING"

	TableFilter = "filter"
	TableNAT    = "nat"
)

// Defaults for Config fields left zero.
const (
	DefaultVXLANPort       = 4789
	DefaultVXLANDevice     = "vxlan.calico"
	DefaultIPIPDevice      = "tunl0"
	DefaultInterfacePrefix = "cali"
)

// Config is the desired rule set. Zero values of ports, device names and the
// prefix mean the defaults above.
type Config struct {
	// VXLAN enables the VXLAN allow/drop rules and forwarding for
	// VXLANDevice.
	VXLAN       bool
	VXLANPort   int
	VXLANDevice string
	// IPIP enables the IPIP allow/drop rules and forwarding for IPIPDevice
	// (IPv4 only).
	IPIP       bool
	IPIPDevice string
	// NATOutgoing masquerades traffic from pod pools to the outside.
	NATOutgoing bool
	// InterfacePrefix is the prefix of host-side pod veths.
	InterfacePrefix string
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.VXLANPort == 0 {
		c.VXLANPort = DefaultVXLANPort
	}
	if c.VXLANDevice == "" {
		c.VXLANDevice = DefaultVXLANDevice
	}
	if c.IPIPDevice == "" {
		c.IPIPDevice = DefaultIPIPDevice
	}
	if c.InterfacePrefix == "" {
		c.InterfacePrefix = DefaultInterfacePrefix
	}
	return c
}

// Validate checks the values iptables would otherwise reject half way
// through an update.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.VXLANPort < 1 || c.VXLANPort > 65535 {
		return fmt.Errorf("rules config: VXLAN port %d out of range 1..65535", c.VXLANPort)
	}
	for _, d := range []struct{ what, name string }{
		{"VXLAN device", c.VXLANDevice}, {"IPIP device", c.IPIPDevice}, {"interface prefix", c.InterfacePrefix},
	} {
		if len(d.name) > 15 || strings.ContainsAny(d.name, " \t\n/!+\x00") {
			return fmt.Errorf("rules config: %s %q: not a valid interface name", d.what, d.name)
		}
	}
	return nil
}

// Chain is one rendered chain: its table, name, the built-in chain that
// jumps to it and its rules as rule specs (what follows "-A <name>").
type Chain struct {
	Table string
	Name  string
	Hook  string
	Rules []string
}

// Lines returns the chain as `iptables -S <name>` prints it.
func (c Chain) Lines() []string {
	out := []string{"-N " + c.Name}
	for _, r := range c.Rules {
		out = append(out, "-A "+c.Name+" "+r)
	}
	return out
}

// Render returns routelet's three chains for family from cfg, in the order
// they are applied. Rules are written the way `iptables -S` prints them
// (including the implicit "-m udp"), so a read-back compares equal.
func Render(cfg Config, family ipset.Family) []Chain {
	cfg = cfg.withDefaults()
	v6 := family == ipset.IPv6

	var input []string
	if cfg.VXLAN {
		port := strconv.Itoa(cfg.VXLANPort)
		peers := ipset.Name(ipset.VXLANPeers, family)
		input = append(input,
			"-p udp -m udp --dport "+port+" -m addrtype --dst-type LOCAL -m set --match-set "+peers+" src -j ACCEPT",
			"-p udp -m udp --dport "+port+" -m addrtype --dst-type LOCAL -j DROP")
	}
	if cfg.IPIP && !v6 {
		input = append(input,
			"-p 4 -m addrtype --dst-type LOCAL -m set --match-set "+ipset.IPIPPeers+" src -j ACCEPT",
			"-p 4 -m addrtype --dst-type LOCAL -j DROP")
	}

	pods := cfg.InterfacePrefix + "+"
	forward := []string{"-i " + pods + " -j ACCEPT", "-o " + pods + " -j ACCEPT"}
	for _, dev := range overlayDevices(cfg, v6) {
		forward = append(forward, "-i "+dev+" -j ACCEPT", "-o "+dev+" -j ACCEPT")
	}

	var post []string
	if cfg.NATOutgoing {
		for _, dev := range overlayDevices(cfg, v6) {
			post = append(post, "-o "+dev+" -j RETURN")
		}
		pools := ipset.Name(ipset.Pools, family)
		post = append(post, "-m set --match-set "+pools+" src -m set ! --match-set "+pools+" dst -j MASQUERADE")
	}

	return []Chain{
		{Table: TableFilter, Name: InputChain, Hook: "INPUT", Rules: input},
		{Table: TableFilter, Name: ForwardChain, Hook: "FORWARD", Rules: forward},
		{Table: TableNAT, Name: PostroutingChain, Hook: "POSTROUTING", Rules: post},
	}
}

// overlayDevices returns the enabled overlay devices of family.
func overlayDevices(cfg Config, v6 bool) []string {
	var devs []string
	if cfg.VXLAN {
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
	if cfg.VXLAN {
		out = append(out, ipset.VXLANPeers)
	}
	if cfg.IPIP && family == ipset.IPv4 {
		out = append(out, ipset.IPIPPeers)
	}
	if cfg.NATOutgoing {
		out = append(out, ipset.Pools)
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
