package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/routelet/routelet/daemon/periods"
	"github.com/routelet/routelet/internal/readlimit"
	"github.com/routelet/routelet/pkg/nodespace"
	"github.com/routelet/routelet/pkg/overlay"
	"github.com/routelet/routelet/pkg/podnet"
	"github.com/routelet/routelet/pkg/routes"
	"github.com/routelet/routelet/pkg/state"
)

// Encapsulation modes.
const (
	EncapVXLAN = "vxlan"
	EncapIPIP  = "ipip"
	EncapNone  = "none"
)

// iptables backends.
const (
	IptablesAuto   = "auto"
	IptablesNFT    = "nft"
	IptablesLegacy = "legacy"
)

// Datastores.
const (
	DatastoreFile       = "file"
	DatastoreKubernetes = "kubernetes"
)

// Config is routeletd's complete configuration after all layers are merged.
type Config struct {
	NodeName  string         // node-name: this node's name (default: hostname)
	StateDir  string         // state-dir: shared state directory
	Datastore string         // datastore: file | kubernetes | etcd
	PodCIDRs  []netip.Prefix // pod-cidr: local blocks (masked)
	// NodeIP selects the underlay address: "" (autodetect from the default
	// route), a literal IP, "cidr:<CIDR>" or "interface:<REGEX>".
	NodeIP        string
	Encapsulation string // encapsulation: vxlan | ipip | none
	CrossSubnet   bool   // cross-subnet: no encapsulation towards peers on the same subnet
	VXLANVNI      int    // vxlan-vni
	VXLANPort     int    // vxlan-port
	VXLANDevice   string // vxlan-device
	MTU           int    // mtu: pod MTU, 0 = host interface MTU minus encapsulation overhead
	NATOutgoing   bool   // nat-outgoing
	// NATOutgoingPools are the pod CIDRs NAT outgoing masquerades
	// (nat-outgoing-pool; Calico: IP pools with natOutgoing: true); empty:
	// every pool.
	NATOutgoingPools []netip.Prefix
	// ExternalNodeCIDRs may send VXLAN/IPIP like peer nodes
	// (external-node-cidr): hosts outside the node records, e.g. gateways.
	ExternalNodeCIDRs []netip.Prefix
	// IptablesBackend picks the iptables binaries (iptables-backend):
	// auto (whatever `iptables` is), nft or legacy.
	IptablesBackend      string
	AllowlistCheckPeriod time.Duration // allowlist-check-period: tamper check of routelet's ipsets and chains
	RouteProtocol        int           // route-protocol: stamped on (and marks ownership of) every route
	IfacePrefix          string        // interface-prefix: host-side veth prefix, e.g. "cali"

	ResyncPeriod      time.Duration // resync-period: full re-read of state and kernel
	DeviceCheckPeriod time.Duration // device-check-period: leak checks and liveness tick
	GracePeriod       time.Duration // grace-period: unexpected routes on a fresh interface are left alone this long
	LeakGracePeriod   time.Duration // leak-grace-period: a record whose netns and veth are gone this long is released

	// Etcd is the etcd datastore's connection (the etcd-* keys).
	Etcd Etcd

	// GoRuntime is the Go runtime's GC percent and memory limit (the go-*
	// keys, config_goruntime.go).
	GoRuntime GoRuntime

	// Encryption is encryption: none | wireguard (config_wireguard.go);
	// WireGuard the wireguard-* keys.
	Encryption string
	WireGuard  WireGuard
	// BGP is the bgp-* keys (config_bgp.go): the BGP speaker.
	BGP BGP

	HealthAddr string // health-addr: serves /healthz, /readyz, /metrics; "" disables
	LogLevel   string // log-level: debug | info | warn | error
	LogFormat  string // log-format: text | json

	// Kubeconfig is the Kubernetes datastore's kubeconfig (kubeconfig);
	// "" is the in-cluster config.
	Kubeconfig string
	// The conflist routeletd writes into the runtime's CNI conf dir once it
	// is ready (config_cni.go); CNIConfDir "" writes none.
	CNIConfDir      string // cni-conf-dir
	CNIConfTemplate string // cni-conf-template: "" = the built-in template
	CNIConfName     string // cni-conf-name: the file's name in CNIConfDir

	// ConfigFile is the file that was read, "" when none.
	ConfigFile string

	// sources records the layer each key's value came from.
	sources map[string]Source
}

// KeyError returns a configuration error for key, naming the layer its
// value came from, as Load's own errors do: for checks that need the node
// (e.g. a pod CIDR that overlaps the node's addresses), made after Load.
func (c *Config) KeyError(key, value string, err error) error {
	src := c.sources[key]
	if src == "" {
		src = SourceDefault
	}
	return &Error{Key: key, Source: src, Value: value, Err: err}
}

// Source names the layer a value came from, for error messages.
type Source string

// The layers, lowest precedence first.
const (
	SourceDefault Source = "default"
	SourceFile    Source = "file"
	SourceEnv     Source = "env"
	SourceFlag    Source = "flag"
)

// key describes one configuration key. set parses vals (one element for a
// scalar key) into c.
type key struct {
	name   string
	help   string
	def    []string
	list   bool
	isBool bool
	// sep separates a list key's values in the environment, in a file's
	// scalar and in one flag; "" is ",". A key whose values hold commas
	// (bgp-peer) takes another.
	sep string
	// envAliases are environment variables read, in order, when
	// ROUTELET_<NAME> is unset (e.g. etcdctl's ETCDCTL_ENDPOINTS).
	envAliases []string
	set        func(c *Config, vals []string) error
}

// separator is what separates the key's list values: sep, or ",".
func (k key) separator() string {
	if k.sep == "" {
		return ","
	}
	return k.sep
}

// EnvName returns the environment variable for a key name: ROUTELET_<NAME>.
func EnvName(name string) string {
	return "ROUTELET_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// keyConfig is the key naming the config file; it is handled before the others.
const keyConfig = "config"

func keys() []key {
	ks := []key{
		{name: "node-name", help: "this node's name (default: the hostname)", def: []string{""}, set: func(c *Config, v []string) error {
			n := v[0]
			if n == "" {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("no node name given and hostname unavailable: %w", err)
				}
				n = strings.ToLower(h)
			}
			if err := validateNodeName(n); err != nil {
				return err
			}
			c.NodeName = n
			return nil
		}},
		{name: "state-dir", help: "state directory shared with the CNI plugin", def: []string{state.DefaultDir}, set: func(c *Config, v []string) error {
			if !strings.HasPrefix(v[0], "/") {
				return errors.New("must be an absolute path")
			}
			c.StateDir = v[0]
			return nil
		}},
		{name: "datastore", help: "where peers come from: file | kubernetes | etcd", def: []string{DatastoreFile}, set: func(c *Config, v []string) error {
			return oneOf(&c.Datastore, v[0], DatastoreFile, DatastoreKubernetes, DatastoreEtcd)
		}},
		{name: "pod-cidr", help: "local pod block (CIDR); repeatable, comma-separated in env", list: true, def: nil, set: func(c *Config, v []string) error {
			var err error
			c.PodCIDRs, err = parsePrefixList(v, false, func(s string, p netip.Prefix, before []netip.Prefix) error {
				if err := nodespace.CheckBlock(p); err != nil {
					return err
				}
				if slices.Contains(before, p) {
					return fmt.Errorf("%q given twice", s)
				}
				for _, q := range before {
					if q.Overlaps(p) {
						return fmt.Errorf("%q overlaps %s", s, q)
					}
				}
				return nil
			})
			return err
		}},
		{name: "node-ip", help: `underlay address: empty (autodetect), an IP, "cidr:<CIDR>" or "interface:<REGEX>"`, def: []string{""}, set: func(c *Config, v []string) error {
			if err := validateNodeIP(v[0]); err != nil {
				return err
			}
			c.NodeIP = v[0]
			return nil
		}},
		{name: "encapsulation", help: "overlay towards peers: vxlan | ipip | none", def: []string{EncapVXLAN}, set: func(c *Config, v []string) error {
			return oneOf(&c.Encapsulation, v[0], EncapVXLAN, EncapIPIP, EncapNone)
		}},
		{name: "cross-subnet", help: "route directly (no encapsulation) to peers on the same subnet", isBool: true, def: []string{"false"}, set: func(c *Config, v []string) error {
			return parseBool(&c.CrossSubnet, v[0])
		}},
		{name: "vxlan-vni", help: "VXLAN network identifier", def: []string{strconv.Itoa(overlay.DefaultVNI)}, set: func(c *Config, v []string) error {
			return parseInt(&c.VXLANVNI, v[0], 1, 1<<24-1)
		}},
		{name: "vxlan-port", help: "VXLAN UDP port", def: []string{strconv.Itoa(overlay.DefaultPort)}, set: func(c *Config, v []string) error {
			return parseInt(&c.VXLANPort, v[0], 1, 65535)
		}},
		{name: "vxlan-device", help: "VXLAN device name", def: []string{overlay.DeviceVXLAN}, set: func(c *Config, v []string) error {
			if err := validateIfName(v[0]); err != nil {
				return err
			}
			c.VXLANDevice = v[0]
			return nil
		}},
		{name: "mtu", help: "pod MTU; 0 = host interface MTU minus encapsulation overhead", def: []string{"0"}, set: func(c *Config, v []string) error {
			if err := parseInt(&c.MTU, v[0], 0, 65535); err != nil {
				return err
			}
			if c.MTU != 0 && c.MTU < 576 {
				return errors.New("must be 0 (auto) or at least 576")
			}
			return nil
		}},
		{name: "nat-outgoing", help: "masquerade pod traffic leaving the pod networks", isBool: true, def: []string{"true"}, set: func(c *Config, v []string) error {
			return parseBool(&c.NATOutgoing, v[0])
		}},
		{name: "nat-outgoing-pool", help: "pod CIDR whose traffic NAT outgoing masquerades (Calico: natOutgoing on the pool); default every pool; repeatable, comma-separated in env", list: true, def: nil, set: func(c *Config, v []string) error {
			var err error
			c.NATOutgoingPools, err = parsePrefixList(v, false, func(s string, p netip.Prefix, _ []netip.Prefix) error {
				if p.Bits() == 0 || p.Addr().Is4In6() {
					return fmt.Errorf("%q is not a pod pool", s)
				}
				return nil
			})
			return err
		}},
		{name: "external-node-cidr", help: "non-node hosts (CIDR) allowed to send VXLAN/IPIP, like peers; repeatable, comma-separated in env", list: true, def: nil, set: func(c *Config, v []string) error {
			var err error
			c.ExternalNodeCIDRs, err = parsePrefixList(v, true, func(s string, p netip.Prefix, _ []netip.Prefix) error {
				if p.Bits() == 0 {
					return fmt.Errorf("%q would let every host inject overlay traffic", s)
				}
				return nil
			})
			return err
		}},
		{name: "iptables-backend", help: "iptables binaries: auto (whatever iptables is) | nft | legacy", def: []string{IptablesAuto}, set: func(c *Config, v []string) error {
			return oneOf(&c.IptablesBackend, strings.ToLower(v[0]), IptablesAuto, IptablesNFT, IptablesLegacy)
		}},
		{name: "allowlist-check-period", help: "how often routelet's ipsets, iptables chains and pod guards are checked and repaired", def: []string{durationDefault(periods.AllowlistCheck)}, set: func(c *Config, v []string) error {
			return parseDuration(&c.AllowlistCheckPeriod, v[0], 100*time.Millisecond)
		}},
		{name: "route-protocol", help: "route protocol number stamped on every route routelet programs (5-255)", def: []string{strconv.Itoa(routes.DefaultProtocol)}, set: func(c *Config, v []string) error {
			// 0-4 are the kernel's own (unspec, redirect, kernel, boot,
			// static): claiming them would make routelet own admin routes.
			return parseInt(&c.RouteProtocol, v[0], 5, 255)
		}},
		{name: "interface-prefix", help: "name prefix of host-side workload veths", def: []string{podnet.DefaultPrefix}, set: func(c *Config, v []string) error {
			p := v[0]
			if err := nodespace.CheckPrefixSyntax(p); err != nil {
				return err
			}
			c.IfacePrefix = p
			return nil
		}},
		{name: "resync-period", help: "full re-read of records and routes", def: []string{durationDefault(periods.Resync)}, set: func(c *Config, v []string) error {
			return parseDuration(&c.ResyncPeriod, v[0], time.Millisecond)
		}},
		{name: "device-check-period", help: "leak checks, liveness tick, overlay device check and the poll of pod-veth sysctls that send no netconf event", def: []string{durationDefault(periods.Tick)}, set: func(c *Config, v []string) error {
			return parseDuration(&c.DeviceCheckPeriod, v[0], time.Millisecond)
		}},
		{name: "grace-period", help: "leave unexpected routes on a newly seen interface alone this long (0 = remove at once)", def: []string{durationDefault(routes.DefaultGracePeriod)}, set: func(c *Config, v []string) error {
			return parseDuration(&c.GracePeriod, v[0], 0)
		}},
		{name: "leak-grace-period", help: "release a record whose netns and host veth have been gone this long", def: []string{durationDefault(periods.LeakGrace)}, set: func(c *Config, v []string) error {
			return parseDuration(&c.LeakGracePeriod, v[0], time.Millisecond)
		}},
		{name: "health-addr", help: "HOST:PORT serving /healthz, /readyz and /metrics; empty disables", def: []string{"127.0.0.1:9099"}, set: func(c *Config, v []string) error {
			if v[0] != "" {
				_, port, err := net.SplitHostPort(v[0])
				if err != nil {
					return errors.New("must be HOST:PORT")
				}
				if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
					return fmt.Errorf("port %q is not a number in 0-65535", port)
				}
			}
			c.HealthAddr = v[0]
			return nil
		}},
		{name: "log-level", help: "debug | info | warn | error", def: []string{"info"}, set: func(c *Config, v []string) error {
			return oneOf(&c.LogLevel, strings.ToLower(v[0]), "debug", "info", "warn", "error")
		}},
		{name: "log-format", help: "text | json", def: []string{"text"}, set: func(c *Config, v []string) error {
			return oneOf(&c.LogFormat, strings.ToLower(v[0]), "text", "json")
		}},
	}
	ks = append(ks, cniKeys()...)
	ks = append(ks, etcdKeys()...)
	ks = append(ks, kubernetesKeys()...)
	ks = append(ks, goRuntimeKeys()...)
	ks = append(ks, wireguardKeys()...)
	ks = append(ks, bgpKeys()...)
	return ks
}

// KeyNames lists every configuration key (without "config"), in help order.
func KeyNames() []string {
	var out []string
	for _, k := range keys() {
		out = append(out, k.name)
	}
	return out
}

// Error is a configuration error naming the key, the layer and the value.
type Error struct {
	Key    string
	Source Source
	Value  string
	Err    error
}

// Error implements error: `config key "mtu" (env ROUTELET_MTU): invalid value "x": …`.
func (e *Error) Error() string {
	where := string(e.Source)
	switch e.Source {
	case SourceEnv:
		where = "env " + EnvName(e.Key)
	case SourceFlag:
		where = "flag --" + e.Key
	}
	return fmt.Sprintf("config key %q (%s): invalid value %q: %v", e.Key, where, e.Value, e.Err)
}

// Unwrap returns the parse error.
func (e *Error) Unwrap() error { return e.Err }

// MaxFileSize bounds the config file: a few dozen keys are a few KiB, so
// anything larger (or an endless file such as /dev/zero) is refused.
const MaxFileSize = 1 << 20

// ReadFile reads a config file for Load, at most MaxFileSize bytes; a
// larger one is an error naming the file and the limit.
func ReadFile(path string) ([]byte, error) { return readlimit.File(path, MaxFileSize) }

// Load merges defaults, the config file, the environment and args (the
// command line without the program name) into a validated Config. getenv
// returns a variable and whether it is set (os.LookupEnv in production).
// readFile reads the config file (ReadFile in production). Output for
// -h goes to usage; flag.ErrHelp is returned when help was asked for.
func Load(args []string, getenv func(string) (string, bool), readFile func(string) ([]byte, error), usage io.Writer) (*Config, error) {
	ks := keys()
	fs := flag.NewFlagSet("routeletd", flag.ContinueOnError)
	fs.SetOutput(usage)
	flagVals := map[string][]string{}
	var configFlag *string
	fs.Func(keyConfig, "optional YAML config file (keys as the flag names)", func(s string) error {
		configFlag = &s
		return nil
	})
	for _, k := range ks {
		fs.Var(&recorder{name: k.name, list: k.list, isBool: k.isBool, sep: k.separator(), def: strings.Join(k.def, k.separator()), into: flagVals}, k.name, k.help)
	}
	fs.Usage = func() {
		fmt.Fprintf(usage, "usage: routeletd [flags]\n"+
			"       routeletd cleanup [flags]\n"+
			"       routeletd status [--output text|json] [flags]\n"+
			"       routeletd nodes list|show|add|remove … [flags]\n"+
			"       routeletd diagnose [--output text|json] [--probe] [flags] SRC DST\n"+
			"       routeletd etcd init --pool CIDR [--pool CIDR6] [--block-size 26] [--block-size-v6 122] [flags]\n"+
			"       routeletd leave [flags]\n"+
			"       routeletd wireguard rotate-key [flags]\n"+
			"       routeletd version\n\n"+
			"Each flag is also ROUTELET_<NAME> in the environment and <name> in the config file;\n"+
			"precedence: flag > env > file > default.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	c := &Config{sources: map[string]Source{}}
	// Defaults first; they are valid by construction except where they
	// depend on the machine (node-name), which is checked like any value.
	layers := []layer{{SourceDefault, defaults(ks)}}

	path := ""
	if v, ok := getenv(EnvName(keyConfig)); ok {
		path = v
	}
	if configFlag != nil {
		path = *configFlag
	}
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		fileVals, err := parseFile(data, ks)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		layers = append(layers, layer{SourceFile, fileVals})
		c.ConfigFile = path
	}
	envVals := map[string][]string{}
	for _, k := range ks {
		v, ok := getenv(EnvName(k.name))
		for _, a := range k.envAliases {
			if ok {
				break
			}
			v, ok = getenv(a)
		}
		if !ok {
			continue
		}
		if k.list {
			envVals[k.name] = splitList(v, k.separator())
		} else {
			envVals[k.name] = []string{v}
		}
	}
	if v, ok := getenv(NodeNameEnv); ok { // the downward API's spelling, below ROUTELET_NODE_NAME
		layers = append(layers, layer{SourceNodeNameEnv, map[string][]string{"node-name": {v}}})
	}
	layers = append(layers, layer{SourceEnv, envVals}, layer{SourceFlag, flagVals})

	// The highest layer that sets a key wins; only that value is parsed, so
	// a bad value hidden under a valid override is not an error.
	for _, k := range ks {
		for i := len(layers) - 1; i >= 0; i-- {
			v, ok := layers[i].vals[k.name]
			if !ok {
				continue
			}
			if !k.list && len(v) != 1 {
				v = v[len(v)-1:]
			}
			if k.list && len(v) == 0 {
				_ = k.set(c, v) // an empty list is valid for every list key
				c.sources[k.name] = layers[i].src
				break
			}
			if err := k.set(c, v); err != nil {
				return nil, &Error{Key: k.name, Source: layers[i].src, Value: strings.Join(v, k.separator()), Err: err}
			}
			c.sources[k.name] = layers[i].src
			break
		}
	}
	if c.Datastore == DatastoreEtcd {
		if err := c.CheckEtcd(); err != nil {
			return nil, err
		}
	}
	if err := c.checkWireGuard(); err != nil {
		return nil, err
	}
	if err := c.checkBGP(); err != nil {
		return nil, err
	}
	return c, nil
}

// layer is one source of values, keyed by key name.
type layer struct {
	src  Source
	vals map[string][]string
}

func defaults(ks []key) map[string][]string {
	m := map[string][]string{}
	for _, k := range ks {
		if k.def != nil || !k.list {
			m[k.name] = k.def
		}
	}
	return m
}

// parseFile reads a YAML mapping of key names to scalars (or, for list keys,
// scalars or sequences). Unknown keys are errors so typos do not go unnoticed.
func parseFile(data []byte, ks []key) (map[string][]string, error) {
	out := map[string][]string{}
	if len(bytes.TrimSpace(data)) == 0 {
		return out, nil
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return out, nil
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: top level must be a mapping of key: value", m.Line)
	}
	byName := map[string]key{}
	for _, k := range ks {
		byName[k.name] = k
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		k, ok := byName[kn.Value]
		if !ok {
			if kn.Value == keyConfig {
				return nil, fmt.Errorf("line %d: key %q is not allowed inside a config file", kn.Line, kn.Value)
			}
			return nil, fmt.Errorf("line %d: unknown key %q", kn.Line, kn.Value)
		}
		switch {
		case vn.Kind == yaml.ScalarNode && vn.Tag == "!!null":
			out[k.name] = []string{""}
			if k.list {
				out[k.name] = []string{}
			}
		case vn.Kind == yaml.ScalarNode:
			if k.list {
				out[k.name] = splitList(vn.Value, k.separator())
			} else {
				out[k.name] = []string{vn.Value}
			}
		case vn.Kind == yaml.SequenceNode && k.list:
			vals := []string{}
			for _, e := range vn.Content {
				if e.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("line %d: key %q: list elements must be scalars", e.Line, k.name)
				}
				vals = append(vals, e.Value)
			}
			out[k.name] = vals
		default:
			return nil, fmt.Errorf("line %d: key %q: expected a single value", vn.Line, k.name)
		}
	}
	return out, nil
}

// splitList splits a list key's value at sep, dropping empty elements.
func splitList(s, sep string) []string {
	out := []string{}
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// recorder is a flag.Value that records what the command line set, so that
// unset flags do not mask lower layers.
type recorder struct {
	name   string
	list   bool
	isBool bool
	sep    string // the list separator
	def    string // shown by -h
	into   map[string][]string
}

// String implements flag.Value: the default, for -h.
func (r *recorder) String() string {
	if r == nil {
		return ""
	}
	return r.def
}

// Set records one occurrence of the flag; list flags accumulate.
func (r *recorder) Set(s string) error {
	if r.list {
		r.into[r.name] = append(r.into[r.name], splitList(s, r.sep)...)
		return nil
	}
	r.into[r.name] = []string{s}
	return nil
}

// IsBoolFlag lets "--cross-subnet" stand for "--cross-subnet=true".
func (r *recorder) IsBoolFlag() bool { return r.isBool }

func oneOf(dst *string, v string, allowed ...string) error {
	if !slices.Contains(allowed, v) {
		return fmt.Errorf("must be one of %s", strings.Join(allowed, ", "))
	}
	*dst = v
	return nil
}

func parseBool(dst *bool, v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("must be true or false")
	}
	*dst = b
	return nil
}

func parseInt(dst *int, v string, lo, hi int) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return errors.New("not an integer")
	}
	if n < lo || n > hi {
		return fmt.Errorf("must be between %d and %d", lo, hi)
	}
	*dst = n
	return nil
}

// durationDefault spells a default duration the way an operator writes it:
// "15m", "90s" (not "15m0s", "1m30s").
func durationDefault(d time.Duration) string {
	switch {
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// parseDuration sets dst to the duration v, refusing one below min.
func parseDuration(dst *time.Duration, v string, min time.Duration) error {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return errors.New(`not a duration (e.g. "90s", "15m")`)
	}
	if d < min {
		return fmt.Errorf("must be at least %s", min)
	}
	*dst = d
	return nil
}

var nodeNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

// validateNodeName accepts a DNS-1123 subdomain (what Kubernetes accepts for
// a Node), which is also a safe file name.
func validateNodeName(n string) error {
	if !nodeNameRE.MatchString(n) || strings.Contains(n, "..") {
		return errors.New("must be a lowercase DNS-1123 name (a-z, 0-9, '-', '.'; at most 253)")
	}
	return nil
}

func validateIfName(n string) error {
	if n == "" || len(n) > 15 || n == "." || n == ".." || strings.ContainsAny(n, "/: \t\n\x00") {
		return errors.New("not a valid interface name (1-15 bytes, no '/', ':', whitespace)")
	}
	return nil
}

// NodeIPMode splits a node-ip value into its mode ("auto", "ip", "cidr",
// "interface") and argument.
func NodeIPMode(v string) (mode, arg string) {
	switch {
	case v == "" || v == "autodetect":
		return "auto", ""
	case strings.HasPrefix(v, "cidr:"):
		return "cidr", strings.TrimPrefix(v, "cidr:")
	case strings.HasPrefix(v, "interface:"):
		return "interface", strings.TrimPrefix(v, "interface:")
	default:
		return "ip", v
	}
}

// parsePrefixList parses the elements of a CIDR list key with
// parseMaskedPrefix, refuses the first one check refuses (check is given
// the element, its prefix and the prefixes before it) and drops repeats.
// On an error it returns the prefixes accepted before it.
func parsePrefixList(v []string, orAddr bool, check func(s string, p netip.Prefix, before []netip.Prefix) error) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range v {
		p, err := parseMaskedPrefix(s, orAddr)
		if err != nil {
			return out, err
		}
		if err := check(s, p, out); err != nil {
			return out, err
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseMaskedPrefix parses one list element as a CIDR without host bits
// (with orAddr also a plain address, taken as a host prefix). The error
// names the value and, for host bits, the CIDR meant.
func parseMaskedPrefix(s string, orAddr bool) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		a, aerr := netip.ParseAddr(strings.TrimSpace(s))
		switch {
		case !orAddr:
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
		case aerr != nil || a.Zone() != "":
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an IP address", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

// validateNodeIP checks a --node-ip value: empty, an address, "cidr:CIDR"
// or "interface:REGEX".
func validateNodeIP(v string) error {
	mode, arg := NodeIPMode(v)
	switch mode {
	case "cidr":
		if _, err := netip.ParsePrefix(arg); err != nil {
			return fmt.Errorf("%q is not a CIDR", arg)
		}
	case "interface":
		if arg == "" {
			return errors.New("interface: needs a regular expression")
		}
		if _, err := regexp.Compile(arg); err != nil {
			return fmt.Errorf("bad regular expression %q: %w", arg, err)
		}
	case "ip":
		a, err := netip.ParseAddr(arg)
		if err != nil || a.Zone() != "" {
			return errors.New(`must be empty, an IP address, "cidr:<CIDR>" or "interface:<REGEX>"`)
		}
		if a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
			return errors.New("must be a unicast, non-loopback address")
		}
	}
	return nil
}
