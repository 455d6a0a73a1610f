package cniconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/libcni"
)

// DefaultTemplate is the template used when none is configured: the
// routelet plugin with the portmap plugin chained. Rendered with the
// daemon's defaults it is conf/10-routelet.conflist.
const DefaultTemplate = `{
  "cniVersion": "1.0.0",
  "name": "routelet",
  "plugins": [
    {
      "type": "routelet",
      "capabilities": { "ips": true }
    },
    {
      "type": "portmap",
      "snat": true,
      "capabilities": { "portMappings": true }
    }
  ]
}
`

// Params are the daemon's values filled into the template's routelet
// plugin.
type Params struct {
	MTU         int    // the pod MTU the daemon publishes
	StateDir    string // the daemon's state-dir
	IfacePrefix string // the daemon's interface-prefix
}

// Render fills p into the conflist template tmpl and returns the list to
// write. The template must be a conflist whose first plugin is routelet
// (the one routeletd serves; others such as portmap chain after it). Its
// routelet plugin gets "mtu"; "stateDir" and "interfacePrefix" are filled
// in when absent and must equal the daemon's when present, since the plugin
// and the daemon meet in that directory and on those veths. A template
// setting "mtu" itself is refused: the pod MTU is the daemon's mtu key. The
// output is deterministic (keys sorted), so an unchanged template renders
// to the same bytes at every start.
func Render(tmpl []byte, p Params) ([]byte, error) {
	if _, err := libcni.ConfListFromBytes(tmpl); err != nil {
		return nil, fmt.Errorf("not a CNI conflist: %w", err)
	}
	var list map[string]any
	d := json.NewDecoder(bytes.NewReader(tmpl))
	d.UseNumber() // numbers pass through as written
	if err := d.Decode(&list); err != nil {
		return nil, fmt.Errorf("not a CNI conflist: %w", err)
	}
	plugins, _ := list["plugins"].([]any)
	if len(plugins) == 0 {
		return nil, errors.New(`no "plugins"`)
	}
	first, ok := plugins[0].(map[string]any)
	if !ok || first["type"] != "routelet" {
		var typ any
		if ok {
			typ = first["type"]
		}
		return nil, fmt.Errorf(`the first plugin is %v, want type "routelet" (other plugins chain after it)`, typ)
	}
	if v, ok := first["mtu"]; ok {
		return nil, fmt.Errorf(`the routelet plugin sets "mtu" (%v): routeletd fills in the pod MTU (its mtu key)`, v)
	}
	first["mtu"] = p.MTU
	for key, want := range map[string]string{"stateDir": p.StateDir, "interfacePrefix": p.IfacePrefix} {
		v, ok := first[key]
		if !ok {
			first[key] = want
			continue
		}
		if s, _ := v.(string); s != want {
			return nil, fmt.Errorf("the routelet plugin's %q is %v but routeletd's is %q: the plugin and the daemon must agree", key, v, want)
		}
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render conflist: %w", err)
	}
	out = append(out, '\n')
	if _, err := libcni.ConfListFromBytes(out); err != nil {
		return nil, fmt.Errorf("rendered conflist: %w", err)
	}
	return out, nil
}
