package netnstest

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
)

// RouteletConf describes a routelet conflist with the built-in IPAM.
type RouteletConf struct {
	Name       string   // network name
	CNIVersion string   // e.g. "1.1.0"
	StateDir   string   // the plugin's stateDir
	MTU        int      // 0 leaves mtu out
	Blocks     []string // ipam.blocks; empty leaves ipam out
	Portmap    bool     // chain portmap after routelet, as conf/ does
}

// ConfList returns c as a libcni conflist.
func (c RouteletConf) ConfList() (*libcni.NetworkConfigList, error) {
	plugin := map[string]any{"type": "routelet", "stateDir": c.StateDir}
	if c.MTU != 0 {
		plugin["mtu"] = c.MTU
	}
	if len(c.Blocks) > 0 {
		plugin["ipam"] = map[string]any{"blocks": c.Blocks}
	}
	plugins := []any{plugin}
	if c.Portmap {
		plugins = append(plugins, map[string]any{
			"type":         "portmap",
			"capabilities": map[string]bool{"portMappings": true},
			"snat":         true,
		})
	}
	return confList(c.Name, c.CNIVersion, plugins)
}

// PTPConf describes the reference ptp plugin with host-local IPAM, set up to
// be equivalent to a RouteletConf (same MTU, one subnet, a default route).
type PTPConf struct {
	Name       string
	CNIVersion string
	DataDir    string // host-local's dataDir
	MTU        int
	Subnet     string
}

// ConfList returns c as a libcni conflist.
func (c PTPConf) ConfList() (*libcni.NetworkConfigList, error) {
	plugin := map[string]any{
		"type": "ptp",
		"mtu":  c.MTU,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": c.Subnet}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": c.DataDir,
		},
	}
	return confList(c.Name, c.CNIVersion, []any{plugin})
}

func confList(name, version string, plugins []any) (*libcni.NetworkConfigList, error) {
	b, err := json.Marshal(map[string]any{"cniVersion": version, "name": name, "plugins": plugins})
	if err != nil {
		return nil, fmt.Errorf("conflist %s: %w", name, err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("conflist %s: %w", name, err)
	}
	return list, nil
}
