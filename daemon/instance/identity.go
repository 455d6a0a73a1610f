package instance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/internal/netnsclaim"
	"github.com/routelet/routelet/internal/readlimit"
)

// Identity is what a running routeletd says of itself on its netns claim
// socket (netnsclaim.Claim.Answer), to root processes of the namespace
// only: its process, version and the settings it runs with.
type Identity struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	// Settings are the daemon's effective values of SettingKeys, as
	// config.Load parses them back (see Settings).
	Settings map[string][]string `json:"settings"`
}

// SettingKeys are the configuration keys that say which node this is and
// how its dataplane is built: what a subcommand looking at the node
// (status, diagnose) must share with the running daemon. The value is
// whether the key is boolean (takes no value on the command line).
var SettingKeys = map[string]bool{
	"node-name": false, "state-dir": false, "datastore": false, "pod-cidr": false, "node-ip": false,
	"encapsulation": false, "cross-subnet": true, "vxlan-vni": false, "vxlan-port": false, "vxlan-device": false,
	"mtu": false, "nat-outgoing": true, "nat-outgoing-pool": false, "external-node-cidr": false,
	"iptables-backend": false, "route-protocol": false, "interface-prefix": false,
	"etcd-endpoints": false, "etcd-ca-file": false, "etcd-cert-file": false, "etcd-key-file": false, "etcd-prefix": false,
	"encryption": false, "wireguard-port": false, "wireguard-device": false, "wireguard-implementation": false,
	"bgp": true, "bgp-route-protocol": false,
}

// Settings renders cfg's values of SettingKeys, one string per value of a
// list key: node-name as resolved (never empty), so that the values given
// back to config.Load as flags make the same configuration.
func Settings(cfg *config.Config) map[string][]string {
	prefixes := func(ps []netip.Prefix) []string {
		out := []string{}
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}
	one := func(s string) []string { return []string{s} }
	return map[string][]string{
		"node-name": one(cfg.NodeName), "state-dir": one(cfg.StateDir), "datastore": one(cfg.Datastore),
		"pod-cidr": prefixes(cfg.PodCIDRs), "node-ip": one(cfg.NodeIP),
		"encapsulation": one(cfg.Encapsulation), "cross-subnet": one(strconv.FormatBool(cfg.CrossSubnet)),
		"vxlan-vni": one(strconv.Itoa(cfg.VXLANVNI)), "vxlan-port": one(strconv.Itoa(cfg.VXLANPort)),
		"vxlan-device": one(cfg.VXLANDevice), "mtu": one(strconv.Itoa(cfg.MTU)),
		"nat-outgoing": one(strconv.FormatBool(cfg.NATOutgoing)), "nat-outgoing-pool": prefixes(cfg.NATOutgoingPools),
		"external-node-cidr": prefixes(cfg.ExternalNodeCIDRs), "iptables-backend": one(cfg.IptablesBackend),
		"route-protocol": one(strconv.Itoa(cfg.RouteProtocol)), "interface-prefix": one(cfg.IfacePrefix),
		"etcd-endpoints": append([]string{}, cfg.Etcd.Endpoints...), "etcd-ca-file": one(cfg.Etcd.CAFile),
		"etcd-cert-file": one(cfg.Etcd.CertFile), "etcd-key-file": one(cfg.Etcd.KeyFile), "etcd-prefix": one(cfg.Etcd.Prefix),
		"encryption": one(cfg.Encryption), "wireguard-port": one(strconv.Itoa(cfg.WireGuard.Port)),
		"wireguard-device": one(cfg.WireGuard.Device), "wireguard-implementation": one(cfg.WireGuard.Implementation),
		"bgp": one(strconv.FormatBool(cfg.BGP.Enabled)), "bgp-route-protocol": one(strconv.Itoa(cfg.BGP.RouteProtocol)),
	}
}

// Describe is the identity of this process, a daemon running with cfg.
func Describe(cfg *config.Config, version string) *Identity {
	return &Identity{PID: os.Getpid(), Version: version, Settings: Settings(cfg)}
}

// Config loads the configuration the daemon runs with from its settings
// alone (no environment, no file): the keys outside SettingKeys have their
// defaults.
func (id *Identity) Config() (*config.Config, error) {
	var args []string
	for k := range SettingKeys {
		for _, v := range id.Settings[k] {
			args = append(args, "--"+k+"="+v)
		}
	}
	cfg, err := config.Load(args, func(string) (string, bool) { return "", false },
		func(string) ([]byte, error) { return nil, errors.New("no file") }, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("the running routeletd's settings: %w", err)
	}
	return cfg, nil
}

// ErrNotRunning: no routeletd runs in this network namespace.
var ErrNotRunning = errors.New("routeletd is not running")

// findTimeout bounds the question to the running daemon.
const findTimeout = 2 * time.Second

// maxIdentity bounds an answer's size.
const maxIdentity = 1 << 20

// Find asks the routeletd of the calling thread's network namespace who it
// is (netnsclaim.Dial: only a uid-0 holder of the claim is asked). The
// error wraps ErrNotRunning when no routeletd holds the namespace. A
// holder that answers nothing (a subcommand holding the claim, or a
// routeletd too old to answer) is an error.
func Find() (*Identity, error) {
	c, err := netnsclaim.Dial()
	if errors.Is(err, netnsclaim.ErrNotHeld) {
		return nil, fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(findTimeout))
	data, err := readlimit.All(c, "the running routeletd's answer", maxIdentity)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, errors.New("the holder of this network namespace's routeletd claim does not say who it is (a routeletd subcommand, or an older routeletd)")
	}
	var id Identity
	if err := json.Unmarshal(data, &id); err != nil {
		return nil, fmt.Errorf("the running routeletd's answer: %w", err)
	}
	return &id, nil
}
