package cniconf

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

var params = Params{MTU: 1430, StateDir: "/run/routelet", IfacePrefix: "cali"}

// routeletPlugin returns the routelet plugin's keys of a rendered list.
func routeletPlugin(t *testing.T, out []byte) map[string]any {
	t.Helper()
	list, err := libcni.ConfListFromBytes(out)
	if err != nil {
		t.Fatalf("libcni cannot parse the rendered list: %v\n%s", err, out)
	}
	if len(list.Plugins) < 1 || list.Plugins[0].Network.Type != "routelet" {
		t.Fatalf("rendered list's first plugin is not routelet:\n%s", out)
	}
	var m map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRenderDefault: the built-in template renders to a list libcni
// parses, routelet first with the MTU filled in, portmap chained.
func TestRenderDefault(t *testing.T) {
	out, err := Render([]byte(DefaultTemplate), params)
	if err != nil {
		t.Fatal(err)
	}
	m := routeletPlugin(t, out)
	if m["mtu"] != float64(1430) || m["stateDir"] != "/run/routelet" || m["interfacePrefix"] != "cali" {
		t.Errorf("routelet plugin = %v, want mtu 1430 and the daemon's stateDir and prefix", m)
	}
	list, _ := libcni.ConfListFromBytes(out)
	if len(list.Plugins) != 2 || list.Plugins[1].Network.Type != "portmap" {
		t.Errorf("plugins %v, want routelet then portmap", list.Plugins)
	}
	again, _ := Render([]byte(DefaultTemplate), params)
	if string(again) != string(out) {
		t.Errorf("rendering is not deterministic:\n%s\n%s", out, again)
	}
}

// TestDefaultTemplateIsTheExample: the built-in template, rendered with
// the daemon's default state dir and prefix, is conf/10-routelet.conflist
// (the example the docs describe) plus the MTU.
func TestDefaultTemplateIsTheExample(t *testing.T) {
	ex, err := os.ReadFile("../../conf/10-routelet.conflist")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render([]byte(DefaultTemplate), params)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(ex, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want["plugins"].([]any)[0].(map[string]any)["mtu"] = float64(params.MTU)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the built-in template renders to\n%s\nwhich is not conf/10-routelet.conflist with mtu %d:\n%s", out, params.MTU, ex)
	}
}

// TestRenderFillsAndRefuses: stateDir and interfacePrefix are filled in
// when absent; a template that sets mtu, disagrees with the daemon or does
// not start with routelet is refused, naming the value.
func TestRenderFillsAndRefuses(t *testing.T) {
	bare := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"routelet"}]}`
	out, err := Render([]byte(bare), Params{MTU: 1450, StateDir: "/srv/rl", IfacePrefix: "rl"})
	if err != nil {
		t.Fatal(err)
	}
	if m := routeletPlugin(t, out); m["mtu"] != float64(1450) || m["stateDir"] != "/srv/rl" || m["interfacePrefix"] != "rl" {
		t.Errorf("routelet plugin = %v", m)
	}
	for tmpl, want := range map[string]string{
		`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"routelet","mtu":9000}]}`:               `"mtu" (9000)`,
		`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"portmap"},{"type":"routelet"}]}`:       "portmap",
		`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"routelet","stateDir":"/var/lib/x"}]}`:  "/var/lib/x",
		`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"routelet","interfacePrefix":"veth"}]}`: "veth",
		`{"cniVersion":"1.0.0","name":"n","plugins":[]}`:                                             "plugins",
		`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"routelet"}`:                            "conflist",
	} {
		if _, err := Render([]byte(tmpl), params); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Render(%s) = %v, want an error naming %q", tmpl, err, want)
		}
	}
}
