package install

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/routelet/routelet/install/chart"
	"github.com/routelet/routelet/internal/netnstest"
	"github.com/routelet/routelet/pkg/peers"
)

// chartRoot is the repository root for the chart's helm runs, or a skip
// when helm is not built (a failure with ROUTELET_REQUIRE_TEST_BINS=1).
func chartRoot(t *testing.T) string {
	t.Helper()
	if _, err := chart.Helm(); err != nil {
		if os.Getenv("ROUTELET_REQUIRE_TEST_BINS") == "1" {
			t.Fatalf("ROUTELET_REQUIRE_TEST_BINS=1 and no helm: %v", err)
		}
		t.Skipf("no helm: %v", err)
	}
	root, err := netnstest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestChartIsTheManifests: install/kubernetes/ is the chart rendered with
// its default values (make manifests), byte for byte, so the two cannot
// drift; and the chart lints clean.
func TestChartIsTheManifests(t *testing.T) {
	root := chartRoot(t)
	files, err := chart.Manifests(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := chart.Diff(root+"/"+chart.ManifestDir, files); err != nil {
		t.Error(err)
	}
	if out, err := chart.Lint(root); err != nil {
		t.Errorf("helm lint --strict: %v\n%s", err, out)
	}
}

// customValues are the values a test sets away from every default.
var customValues = []string{
	`image={"repository":"registry.example.com/net/routelet","tag":"v0.1.0","pullPolicy":"Always"}`,
	`encapsulation="ipip"`, `crossSubnet=true`, `mtu=1400`,
	`natOutgoing=true`, `natOutgoingPools=["10.244.0.0/16"]`,
	`encryption="wireguard"`,
	`bgp={"enabled":true,"as":4200000001,"nodeMesh":false,"peers":["192.0.2.254,as=65000","2001:db8::fe,as=65000,port=1179,route-reflector"],"pools":["10.244.0.0/16","fd00:244::/48"]}`,
	`apiServer={"host":"192.0.2.10","port":6443}`,
	`tolerations=[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]`,
	`nodeSelector={"kubernetes.io/os":"linux","routelet.io/enabled":"true"}`,
	`resources={"requests":{"cpu":"50m","memory":"48Mi"},"limits":{"memory":"256Mi"}}`,
}

// renderObjects renders the chart with set and decodes the objects.
func renderObjects(t *testing.T, root, namespace string, set ...string) (objects, []manifestDoc) {
	t.Helper()
	out, err := chart.Render(root, "routelet", namespace, set...)
	if err != nil {
		t.Fatal(err)
	}
	docs := yamlDocs(t, "helm template", out)
	return objectsOf(t, docs), docs
}

// TestChartValues: every value lands where routeletd and kubelet read it —
// routeletd accepts the rendered configuration and means by it what the
// values say — and the chart lints clean with them.
func TestChartValues(t *testing.T) {
	root := chartRoot(t)
	if out, err := chart.Lint(root, customValues...); err != nil {
		t.Errorf("helm lint --strict with the custom values: %v\n%s", err, out)
	}
	o, _ := renderObjects(t, root, "routelet-system", customValues...)
	for _, obj := range []struct{ kind, ns string }{{"ServiceAccount", o.sa.Namespace}, {"ConfigMap", o.cm.Namespace}, {"DaemonSet", o.ds.Namespace}, {"ClusterRoleBinding subject", o.binding.Subjects[0].Namespace}} {
		if obj.ns != "routelet-system" {
			t.Errorf("%s in namespace %q, want the release's routelet-system", obj.kind, obj.ns)
		}
	}
	cfg := daemonAgrees(t, o)
	if cfg.Encapsulation != "ipip" || !cfg.CrossSubnet || cfg.MTU != 1400 || !cfg.NATOutgoing || cfg.Encryption != "wireguard" {
		t.Errorf("routeletd's configuration: encapsulation %q cross-subnet %v mtu %d nat-outgoing %v encryption %q; want ipip true 1400 true wireguard",
			cfg.Encapsulation, cfg.CrossSubnet, cfg.MTU, cfg.NATOutgoing, cfg.Encryption)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}; !slices.Equal(cfg.NATOutgoingPools, want) {
		t.Errorf("nat-outgoing-pool %v, want %v", cfg.NATOutgoingPools, want)
	}
	b := cfg.BGP
	wantPeers := []peers.BGPPeer{
		{Address: netip.MustParseAddr("192.0.2.254"), ASN: 65000},
		{Address: netip.MustParseAddr("2001:db8::fe"), ASN: 65000, Port: 1179, RouteReflector: true},
	}
	wantPools := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")}
	if !b.Enabled || b.ASN != 4200000001 || b.NodeMesh || !slices.Equal(b.Peers, wantPeers) || !slices.Equal(b.Pools, wantPools) {
		t.Errorf("routeletd's BGP: %+v; want on, AS 4200000001 (a 32-bit AS rendered whole), mesh off, peers %+v, pools %v", b, wantPeers, wantPools)
	}

	spec := o.ds.Spec.Template.Spec
	for _, name := range []string{"install-cni", "routeletd"} {
		var c corev1.Container
		if name == "install-cni" {
			c = initContainer(t, spec, name)
		} else {
			c = container(t, spec, name)
		}
		if c.Image != "registry.example.com/net/routelet:v0.1.0" || c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("%s: image %q pull %q, want registry.example.com/net/routelet:v0.1.0 Always", name, c.Image, c.ImagePullPolicy)
		}
	}
	d := container(t, spec, "routeletd")
	env := map[string]string{}
	for _, e := range d.Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "192.0.2.10" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("routeletd's env %v: want KUBERNETES_SERVICE_HOST=192.0.2.10 and KUBERNETES_SERVICE_PORT=6443 (client-go's in-cluster endpoint)", env)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "node-role.kubernetes.io/control-plane" || spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations %+v, want only the control-plane NoSchedule one", spec.Tolerations)
	}
	if spec.NodeSelector["routelet.io/enabled"] != "true" || spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if r := d.Resources; !r.Requests.Cpu().Equal(resource.MustParse("50m")) || !r.Requests.Memory().Equal(resource.MustParse("48Mi")) || !r.Limits.Memory().Equal(resource.MustParse("256Mi")) {
		t.Errorf("routeletd's resources %+v, want requests 50m/48Mi, limit 256Mi", r)
	}

	// A configuration change changes the pod template, so helm upgrade
	// rolls the pods.
	def, _ := renderObjects(t, root, "routelet-system")
	h := func(o objects) string { return o.ds.Spec.Template.Annotations["routelet.io/config-hash"] }
	if h(o) == "" || h(o) == h(def) {
		t.Errorf("config hash %q with the custom values, %q with the defaults: want it set and different", h(o), h(def))
	}
}

// initContainer returns spec's init container called name.
func initContainer(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.InitContainers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no init container %q", name)
	return corev1.Container{}
}

// TestChartRefusesBadValues: the schema and the templates stop a render
// whose values routelet could not run with, naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	root := chartRoot(t)
	for _, tc := range []struct{ set, want string }{
		{`encapsulation="gre"`, "encapsulation"},
		{`encryption="ipsec"`, "encryption"},
		{`mtu=-1`, "mtu"},
		{`mtu=1400.5`, "mtu"},
		{`crossSubnet="yes"`, "crossSubnet"},
		{`natOutgoingPools=["10.244.0.0"]`, "natOutgoingPools"},
		{`image={"repository":"routelet","tag":"v1 ; rm -rf","pullPolicy":"IfNotPresent"}`, "tag"},
		{`image={"repository":"routelet","tag":"latest","pullPolicy":"Sometimes"}`, "pullPolicy"},
		{`bgp={"enabled":true,"as":0,"nodeMesh":true,"peers":[],"pools":[]}`, "as"},
		{`bgp={"enabled":true,"as":64512,"nodeMesh":true,"peers":["192.0.2.1"],"pools":[]}`, "peers"},
		{`bgp={"enabled":true,"as":64512,"nodeMesh":true,"peers":["192.0.2.1,as=1\nbgp: false"],"pools":[]}`, "peers"},
		{`apiServer={"host":"192.0.2.10","port":0}`, "apiServer"},
		{`apiServer={"host":"evil\nhost","port":6443}`, "host"},
		{`encapsulaton="ipip"`, "encapsulaton"},
	} {
		_, err := chart.Render(root, "routelet", "kube-system", tc.set)
		if err == nil {
			t.Errorf("--set-json %s: rendered, want a refusal", tc.set)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set-json %s: %v; want an error naming %q", tc.set, err, tc.want)
		}
	}
}

// TestChartSplit: a render is cut at helm's Source lines, several
// documents of one template staying together; anything else is refused.
func TestChartSplit(t *testing.T) {
	render := "---\n# Source: routelet/templates/a.yaml\nkind: A\n\n---\n# Source: routelet/templates/b.yaml\nkind: B1\n---\n# Source: routelet/templates/b.yaml\nkind: B2\n"
	files, err := chart.Split([]byte(render))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%d|%s|%s", len(files), files["a.yaml"], files["b.yaml"]); got != "2|kind: A\n|kind: B1\n---\nkind: B2\n" {
		t.Errorf("split = %q", got)
	}
	for _, bad := range []string{"", "kind: A\n", "---\n# Source: other/templates/a.yaml\nkind: A\n", "---\n# Source: routelet/templates/sub/a.yaml\nkind: A\n"} {
		if _, err := chart.Split([]byte(bad)); err == nil {
			t.Errorf("split of %q: no error", bad)
		}
	}
}
