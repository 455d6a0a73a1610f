package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/state"
)

// DefaultMTU is the pod MTU when neither the conflist nor daemon.json sets one.
const DefaultMTU = 1450

// netConf is the plugin's stanza of a conflist as it arrives on stdin.
type netConf struct {
	types.PluginConf

	StateDir        string          `json:"stateDir,omitempty"`
	MTU             int             `json:"mtu,omitempty"`
	InterfacePrefix string          `json:"interfacePrefix,omitempty"`
	IPAM            json.RawMessage `json:"ipam,omitempty"` // shadows PluginConf.IPAM

	RuntimeConfig struct {
		IPs []string `json:"ips,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args struct {
		CNI struct {
			IPs []string `json:"ips,omitempty"`
		} `json:"cni,omitempty"`
	} `json:"args,omitempty"`

	// LegacyAttachments is the pre-1.1 spelling of the GC keep list.
	LegacyAttachments []types.GCAttachment `json:"cni.dev/attachments,omitempty"`
}

// builtinIPAM is the ipam stanza of the built-in IPAM.
type builtinIPAM struct {
	Blocks []string `json:"blocks"`
}

// config is a validated netConf.
type config struct {
	raw        netConf
	Name       string
	CNIVersion string
	StateDir   string
	MTU        int // 0: not set in the conflist
	Prefix     string
	// Delegate names the IPAM plugin to delegate to; "" means built-in IPAM.
	Delegate string
	// Blocks are the conflist's ipam.blocks (built-in IPAM only).
	Blocks []netip.Prefix
	// Requested are specific addresses from runtimeConfig.ips and
	// args.cni.ips (built-in IPAM only).
	Requested []netip.Addr
	DNS       types.DNS
	// KeepListGiven is true when the config carries a GC keep list
	// (cni.dev/valid-attachments or cni.dev/attachments), even an empty one.
	KeepListGiven bool
}

// loadConfig parses and validates the network configuration from stdin. Every
// error is a *types.Error naming the offending key and value.
func loadConfig(stdin []byte) (*config, *types.Error) {
	var n netConf
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, cniErr(types.ErrDecodingFailure, "decode network config from stdin: %v", err)
	}
	c := &config{
		raw:        n,
		Name:       n.Name,
		CNIVersion: n.CNIVersion,
		StateDir:   n.StateDir,
		MTU:        n.MTU,
		Prefix:     n.InterfacePrefix,
		DNS:        n.DNS,
	}
	if c.Name == "" {
		return nil, cniErr(types.ErrInvalidNetworkConfig, "network config: name is missing")
	}
	if c.StateDir == "" {
		c.StateDir = state.DefaultDir
	}
	if !filepath.IsAbs(c.StateDir) || strings.ContainsRune(c.StateDir, 0) {
		return nil, cniErr(types.ErrInvalidNetworkConfig, "stateDir %q: must be an absolute path", c.StateDir)
	}
	c.StateDir = filepath.Clean(c.StateDir)
	switch {
	case c.MTU < 0:
		return nil, cniErr(types.ErrInvalidNetworkConfig, "mtu %d: must not be negative", c.MTU)
	case c.MTU > 0 && (c.MTU < 68 || c.MTU > 65535):
		return nil, cniErr(types.ErrInvalidNetworkConfig, "mtu %d: must be between 68 and 65535 (or 0 for the default)", c.MTU)
	}
	if c.Prefix == "" {
		c.Prefix = podnet.DefaultPrefix
	}
	if err := podnet.ValidatePrefix(c.Prefix); err != nil {
		return nil, cniErr(types.ErrInvalidNetworkConfig, "interfacePrefix: %v", err)
	}
	if e := c.parseIPAM(n.IPAM); e != nil {
		return nil, e
	}
	if c.Delegate != "" {
		if e := checkNotSelf(c.Delegate, n.Type, os.Getenv("CNI_PATH")); e != nil {
			return nil, e
		}
	}
	c.KeepListGiven = keepListGiven(stdin)
	if c.Delegate == "" {
		if e := c.parseRequested(); e != nil {
			return nil, e
		}
	}
	return c, nil
}

// parseIPAM decides between the built-in IPAM and a delegated plugin.
func (c *config) parseIPAM(raw json.RawMessage) *types.Error {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	var generic map[string]json.RawMessage
	if err := json.Unmarshal(raw, &generic); err != nil {
		return cniErr(types.ErrDecodingFailure, "ipam: must be an object: %v", err)
	}
	if t, ok := generic["type"]; ok {
		var typ string
		if err := json.Unmarshal(t, &typ); err != nil {
			return cniErr(types.ErrInvalidNetworkConfig, "ipam.type %s: must be a string", t)
		}
		if typ != "" {
			if _, ok := generic["blocks"]; ok {
				return cniErr(types.ErrInvalidNetworkConfig, "ipam: blocks belong to the built-in IPAM; drop them or drop ipam.type %q", typ)
			}
			if strings.ContainsAny(typ, `/\`) || typ == "." || typ == ".." {
				return cniErr(types.ErrInvalidNetworkConfig, "ipam.type %q: must be a plugin name, not a path", typ)
			}
			c.Delegate = typ
			return nil
		}
	}
	var b builtinIPAM
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&struct {
		Type string `json:"type"`
		*builtinIPAM
	}{builtinIPAM: &b}); err != nil {
		return cniErr(types.ErrInvalidNetworkConfig, "ipam: built-in IPAM takes only \"blocks\": %v", err)
	}
	for i, s := range b.Blocks {
		p, err := parseBlock(s)
		if err != nil {
			return cniErr(types.ErrInvalidNetworkConfig, "ipam.blocks[%d] %q: %v", i, s, err)
		}
		for _, q := range c.Blocks {
			if q.Overlaps(p) {
				return cniErr(types.ErrInvalidNetworkConfig, "ipam.blocks[%d] %q: overlaps %s", i, s, q)
			}
		}
		c.Blocks = append(c.Blocks, p)
	}
	return nil
}

// keepListGiven reports whether the config holds a GC keep list under
// either spelling, as opposed to none at all. A null is an empty list: libcni
// injects one for a runtime that has no attachments left.
func keepListGiven(stdin []byte) bool {
	var keys map[string]json.RawMessage
	if json.Unmarshal(stdin, &keys) != nil {
		return false
	}
	_, valid := keys["cni.dev/valid-attachments"]
	_, legacy := keys["cni.dev/attachments"]
	return valid || legacy
}

// parseBlock validates one block CIDR: masked, and big enough for one pod once
// the reserved addresses (first; for IPv4 also last) are taken out.
func parseBlock(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not a CIDR")
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("IPv4-mapped IPv6 blocks are not supported")
	}
	if p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zones are not allowed")
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("host bits set; did you mean %s?", p.Masked())
	}
	if p.Addr().Is4() && p.Bits() > 30 {
		return netip.Prefix{}, fmt.Errorf("an IPv4 block must be /30 or larger")
	}
	if p.Addr().Is6() && p.Bits() > 127 {
		return netip.Prefix{}, fmt.Errorf("an IPv6 block must be /127 or larger")
	}
	return p, nil
}

// parseRequested collects specific addresses asked for through the "ips"
// capability (runtimeConfig.ips) and args.cni.ips. At most one per family.
func (c *config) parseRequested() *types.Error {
	sources := []struct {
		key  string
		vals []string
	}{
		{"runtimeConfig.ips", c.raw.RuntimeConfig.IPs},
		{"args.cni.ips", c.raw.Args.CNI.IPs},
	}
	for _, src := range sources {
		for i, s := range src.vals {
			a, err := parseRequestedIP(s)
			if err != nil {
				return cniErr(types.ErrInvalidNetworkConfig, "%s[%d] %q: %v", src.key, i, s, err)
			}
			if err := addRequested(&c.Requested, a); err != nil {
				return cniErr(types.ErrInvalidNetworkConfig, "%s[%d] %q: %v", src.key, i, s, err)
			}
		}
	}
	return nil
}

// parseRequestedIP accepts "10.1.2.3" or "10.1.2.3/24" (the ips capability
// allows either; the prefix length is ignored: pods get /32 and /128).
func parseRequestedIP(s string) (netip.Addr, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("not an IP address or CIDR")
		}
		return p.Addr(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("not an IP address or CIDR")
	}
	return a.Unmap(), nil
}

// addRequested appends a to *list unless already present; a second, different
// address of the same family is an error.
func addRequested(list *[]netip.Addr, a netip.Addr) error {
	for _, b := range *list {
		if b == a {
			return nil
		}
		if b.Is4() == a.Is4() {
			return fmt.Errorf("conflicts with %s: one address per family", b)
		}
	}
	*list = append(*list, a)
	return nil
}

// podArgs are the CNI_ARGS keys routelet understands.
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_UID                types.UnmarshallableString //nolint:revive // CNI_ARGS key
	IP                         types.UnmarshallableString
}

// cniArgs is the validated content of CNI_ARGS.
type cniArgs struct {
	PodNamespace string
	PodName      string
	IPs          []netip.Addr // IP=a[,b]
}

// loadCall reads what an ADD or DEL is given: the network configuration
// (loadConfig) and CNI_ARGS (parseCNIArgs).
func loadCall(args *skel.CmdArgs) (*config, *cniArgs, *types.Error) {
	c, e := loadConfig(args.StdinData)
	if e != nil {
		return nil, nil, e
	}
	ka, e := parseCNIArgs(args.Args)
	if e != nil {
		return nil, nil, e
	}
	return c, ka, nil
}

// openStore opens the configuration's state directory.
func (c *config) openStore() (*state.Store, *types.Error) {
	store, err := state.Open(c.StateDir)
	if err != nil {
		return nil, cniErr(types.ErrIOFailure, "stateDir %s: %v", c.StateDir, err)
	}
	return store, nil
}

// parseCNIArgs parses CNI_ARGS ("K=V;K2=V2"). Unknown keys are an error unless
// IgnoreUnknown=1 is among them.
func parseCNIArgs(s string) (*cniArgs, *types.Error) {
	var pa podArgs
	if err := types.LoadArgs(s, &pa); err != nil {
		return nil, cniErr(types.ErrInvalidEnvironmentVariables, "CNI_ARGS %q: %v", s, err)
	}
	out := &cniArgs{PodNamespace: string(pa.K8S_POD_NAMESPACE), PodName: string(pa.K8S_POD_NAME)}
	if ip := string(pa.IP); ip != "" {
		for _, part := range strings.Split(ip, ",") {
			a, err := parseRequestedIP(strings.TrimSpace(part))
			if err != nil {
				return nil, cniErr(types.ErrInvalidEnvironmentVariables, "CNI_ARGS IP=%q: %q is %v", ip, part, err)
			}
			if err := addRequested(&out.IPs, a); err != nil {
				return nil, cniErr(types.ErrInvalidEnvironmentVariables, "CNI_ARGS IP=%q: %q %v", ip, part, err)
			}
		}
	}
	return out, nil
}

// requested merges the config's requested addresses with CNI_ARGS IP=.
func requested(c *config, a *cniArgs) ([]netip.Addr, *types.Error) {
	out := append([]netip.Addr(nil), c.Requested...)
	for _, ip := range a.IPs {
		if err := addRequested(&out, ip); err != nil {
			return nil, cniErr(types.ErrInvalidNetworkConfig, "CNI_ARGS IP=%s: %v", ip, err)
		}
	}
	return out, nil
}

// hostIfaceName is the host veth name for this attachment.
func hostIfaceName(c *config, a *cniArgs, containerID, ifName string) string {
	return podnet.VethName(c.Prefix, a.PodNamespace, a.PodName, containerID, ifName)
}
