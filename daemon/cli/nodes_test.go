package cli

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/pkg/state"
)

const (
	keyA = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
	keyB = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
)

// TestNodesWireGuard: nodes add writes a peer's WireGuard key and port
// and refuses, naming the value, a key that is not one, a key another peer
// has, this node's own key, and a port that is not one; list and show
// print the key and port.
func TestNodesWireGuard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	store, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{NodeName: "node-a", StateDir: dir, Datastore: config.DatastoreFile, RouteProtocol: 80, IfacePrefix: "cali",
		VXLANDevice: "vxlan.calico", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}
	if err := store.PutNode(&state.Node{Name: "node-a", HostIPv4: "198.51.100.1", Blocks: []string{"10.244.1.0/24"},
		WireGuardPublicKey: keyA, Updated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	add := func(name string, flags map[string][]string) error {
		return addNode(store, cfg, name, flags)
	}
	if err := add("node-b", map[string][]string{"host-ipv4": {"198.51.100.2"}, "block": {"10.244.2.0/24"},
		"wireguard-public-key": {keyB}, "wireguard-listen-port": {"51821"}}); err != nil {
		t.Fatalf("nodes add node-b: %v", err)
	}
	if n, err := store.GetNode("node-b"); err != nil || n.WireGuardPublicKey != keyB || n.WireGuardPort != 51821 {
		t.Fatalf("node-b's record = %+v, %v; want its key at 51821", n, err)
	}
	for _, tc := range []struct {
		name  string
		flags map[string][]string
		usage bool
		want  string
	}{
		{"node-c", map[string][]string{"wireguard-public-key": {keyB}}, false, `wireguardPublicKey "` + keyB + `" refused: is node node-b's established WireGuard public key`},
		{"node-d", map[string][]string{"wireguard-public-key": {keyA}}, false, `refused: its WireGuard public key ` + keyA + ` is this node's`},
		{"node-e", map[string][]string{"wireguard-public-key": {"not-a-key"}}, false, `wireguardPublicKey "not-a-key" refused: not a WireGuard key`},
		{"node-f", map[string][]string{"wireguard-public-key": {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}}, false, `all-zero`},
		{"node-g", map[string][]string{"wireguard-public-key": {keyA[:10] + keyB[10:]}, "wireguard-listen-port": {"0"}}, true, `--wireguard-listen-port "0" is not a port`},
		{"node-h", map[string][]string{"wireguard-public-key": {keyA[:10] + keyB[10:]}, "wireguard-listen-port": {"65536"}}, true, `"65536" is not a port`},
		{"node-i", map[string][]string{"wireguard-listen-port": {"51820"}}, true, `without --wireguard-public-key`},
	} {
		flags := map[string][]string{"host-ipv4": {"198.51.100.3"}, "block": {"10.244.3.0/24"}}
		for k, v := range tc.flags {
			flags[k] = v
		}
		err := add(tc.name, flags)
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &ue) != tc.usage {
			t.Errorf("nodes add %s %v: %v; want an error naming %q (usage error %v)", tc.name, tc.flags, err, tc.want, tc.usage)
		}
		if _, err := store.GetNode(tc.name); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("refused record %s was written (%v)", tc.name, err)
		}
	}

	var out bytes.Buffer
	if err := listNodes(&out, store, cfg, "text"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "WIREGUARD") || !strings.Contains(out.String(), keyB+":51821") || !strings.Contains(out.String(), keyA+"  ") {
		t.Errorf("nodes list:\n%s\nwant node-b's key:port and node-a's key", out.String())
	}
	out.Reset()
	if err := showNode(&out, store, cfg, "node-b", "json"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"wireguardPublicKey": "`+keyB+`"`) || !strings.Contains(out.String(), `"wireguardPort": 51821`) {
		t.Errorf("nodes show node-b:\n%s", out.String())
	}
}

// TestNodesBGPAS: nodes add writes a peer's BGP AS as bgpAS, refusing,
// naming the value, one that is not an AS number; show prints it.
func TestNodesBGPAS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	store, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{NodeName: "node-a", StateDir: dir, Datastore: config.DatastoreFile, RouteProtocol: 80, IfacePrefix: "cali",
		VXLANDevice: "vxlan.calico", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}
	flags := func(as string) map[string][]string {
		return map[string][]string{"host-ipv4": {"198.51.100.2"}, "block": {"10.244.2.0/24"}, "bgp-as": {as}}
	}
	if err := addNode(store, cfg, "node-b", flags("4200000000")); err != nil {
		t.Fatalf("nodes add node-b --bgp-as 4200000000: %v", err)
	}
	if n, err := store.GetNode("node-b"); err != nil || n.BGPAS != 4200000000 {
		t.Fatalf("node-b's record = %+v, %v; want bgpAS 4200000000", n, err)
	}
	for _, as := range []string{"0", "4294967295", "-1", "AS65000", "65000.5"} {
		err := addNode(store, cfg, "node-c", flags(as))
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), `--bgp-as "`+as+`"`) {
			t.Errorf("nodes add --bgp-as %s: %v; want a usage error naming the value", as, err)
		}
		if _, err := store.GetNode("node-c"); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("refused record node-c was written (%v)", err)
		}
	}
	var out bytes.Buffer
	if err := showNode(&out, store, cfg, "node-b", "json"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"bgpAS": 4200000000`) {
		t.Errorf("nodes show node-b:\n%s", out.String())
	}
	// From a file too, checked by the daemon's own validation.
	rec := filepath.Join(t.TempDir(), "node-d.json")
	if err := os.WriteFile(rec, []byte(`{"name":"node-d","hostIPv4":"198.51.100.4","blocks":["10.244.4.0/24"],"bgpAS":4294967295}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := addNode(store, cfg, "", map[string][]string{"from": {rec}}); err == nil || !strings.Contains(err.Error(), `bgpAS "4294967295" refused`) {
		t.Errorf("nodes add --from with a bad bgpAS: %v; want the refusal", err)
	}
}
