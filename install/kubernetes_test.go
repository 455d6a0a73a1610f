package install

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/routelet/routelet/daemon/cniconf"
	"github.com/routelet/routelet/daemon/config"
	"github.com/routelet/routelet/daemon/health"
	"github.com/routelet/routelet/install/image"
)

// pendingFlags are DaemonSet arguments for routeletd flags that the
// Kubernetes datastore work adds and daemon/config does not know yet. The
// agreement test accepts exactly these as unknown; it fails when one of
// them becomes known (remove it from here) and when any other argument is
// unknown (so removing an entry here without implementing it fails too).
var pendingFlags = map[string]string{}

// manifestDoc is one YAML document of a manifest file.
type manifestDoc struct {
	file string
	data []byte
}

// manifestDocs splits every file in install/kubernetes into its YAML
// documents, in file order, leaving out empty (comment-only) ones.
func manifestDocs(t *testing.T) []manifestDoc {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in install/kubernetes: %v", err)
	}
	sort.Strings(files)
	var docs []manifestDoc
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, yamlDocs(t, f, data)...)
	}
	return docs
}

// yamlDocs splits data (from file) into its YAML documents, leaving out
// empty (comment-only) ones.
func yamlDocs(t *testing.T, file string, data []byte) []manifestDoc {
	t.Helper()
	var docs []manifestDoc
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		docs = append(docs, manifestDoc{file: file, data: doc})
	}
}

// decodeStrict decodes every object of docs strictly (unknown or
// duplicate fields are errors) into client-go types.
func decodeStrict(t *testing.T, docs []manifestDoc) []runtime.Object {
	t.Helper()
	s := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	for _, d := range docs {
		obj, _, err := s.Decode(d.data, nil, nil)
		if err != nil {
			t.Fatalf("%s: strict decode: %v", d.file, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// stripComments drops YAML comment lines, to tell an empty document.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l...)
		}
	}
	return out
}

// TestManifestsStrictDecodeRejectsUnknownFields shows the decoder used by
// the manifest tests is strict: a misspelt field fails.
func TestManifestsStrictDecodeRejectsUnknownFields(t *testing.T) {
	s := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		kjson.SerializerOptions{Yaml: true, Strict: true})
	bad := "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n  namespce: kube-system\n"
	if _, _, err := s.Decode([]byte(bad), nil, nil); err == nil || !strings.Contains(err.Error(), "namespce") {
		t.Errorf("strict decode of a misspelt field: %v, want an error naming it", err)
	}
}

// objects holds the decoded manifests by kind.
type objects struct {
	sa      *corev1.ServiceAccount
	role    *rbacv1.ClusterRole
	binding *rbacv1.ClusterRoleBinding
	cm      *corev1.ConfigMap
	ds      *appsv1.DaemonSet
}

// loadObjects decodes install/kubernetes's objects.
func loadObjects(t *testing.T) objects {
	t.Helper()
	return objectsOf(t, manifestDocs(t))
}

// objectsOf decodes docs, which must hold one object of each kind.
func objectsOf(t *testing.T, docs []manifestDoc) objects {
	t.Helper()
	var o objects
	for _, obj := range decodeStrict(t, docs) {
		var dup bool
		switch v := obj.(type) {
		case *corev1.ServiceAccount:
			dup, o.sa = o.sa != nil, v
		case *rbacv1.ClusterRole:
			dup, o.role = o.role != nil, v
		case *rbacv1.ClusterRoleBinding:
			dup, o.binding = o.binding != nil, v
		case *corev1.ConfigMap:
			dup, o.cm = o.cm != nil, v
		case *appsv1.DaemonSet:
			dup, o.ds = o.ds != nil, v
		default:
			t.Fatalf("unexpected object %T in the manifests", obj)
		}
		if dup {
			t.Fatalf("two objects of kind %T", obj)
		}
	}
	if o.sa == nil || o.role == nil || o.binding == nil || o.cm == nil || o.ds == nil {
		t.Fatalf("manifests lack an object: %+v", o)
	}
	return o
}

// TestManifestsRBAC: the ClusterRole grants exactly nodes
// get/list/watch/patch and nodes/status patch, bound to the DaemonSet's
// service account.
func TestManifestsRBAC(t *testing.T) {
	o := loadObjects(t)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	}
	if len(o.role.Rules) != len(want) {
		t.Fatalf("ClusterRole rules = %+v, want %+v", o.role.Rules, want)
	}
	for i, r := range o.role.Rules {
		w := want[i]
		if !slices.Equal(r.APIGroups, w.APIGroups) || !slices.Equal(r.Resources, w.Resources) ||
			!slices.Equal(r.Verbs, w.Verbs) || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("ClusterRole rule %d = %+v, want %+v", i, r, w)
		}
	}
	b := o.binding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != o.role.Name {
		t.Errorf("binding refers to %s %q, want ClusterRole %q", b.RoleRef.Kind, b.RoleRef.Name, o.role.Name)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != o.sa.Name ||
		b.Subjects[0].Namespace != o.sa.Namespace {
		t.Errorf("binding subjects = %+v, want the service account %s/%s", b.Subjects, o.sa.Namespace, o.sa.Name)
	}
	spec := o.ds.Spec.Template.Spec
	if spec.ServiceAccountName != o.sa.Name || o.ds.Namespace != o.sa.Namespace || o.cm.Namespace != o.sa.Namespace {
		t.Errorf("DaemonSet %s/%s runs as %q; want service account %s/%s, ConfigMap in the same namespace (%s)",
			o.ds.Namespace, o.ds.Name, spec.ServiceAccountName, o.sa.Namespace, o.sa.Name, o.cm.Namespace)
	}
}

// TestManifestsDaemonSetScheduling: host network, every taint tolerated,
// system-node-critical, rolling update one node at a time.
func TestManifestsDaemonSetScheduling(t *testing.T) {
	ds := loadObjects(t).ds
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("DaemonSet pods do not use the host network")
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName = %q, want system-node-critical", spec.PriorityClassName)
	}
	tolerAll := false
	for _, tol := range spec.Tolerations {
		if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "" {
			tolerAll = true
		}
	}
	if !tolerAll {
		t.Errorf("tolerations %+v do not tolerate every taint (operator Exists, no key, no effect)", spec.Tolerations)
	}
	u := ds.Spec.UpdateStrategy
	if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.String() != "1" {
		t.Errorf("update strategy = %+v, want RollingUpdate with maxUnavailable 1", u)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds <= 0 {
		t.Errorf("terminationGracePeriodSeconds = %v, want a positive value", spec.TerminationGracePeriodSeconds)
	}
	if !labelsMatch(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("selector %v does not match the template's labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
}

func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// container returns the container (or initContainer) named name.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

// hostPathOf returns the host path mounted at mountPath in c, "" if none.
func hostPathOf(spec corev1.PodSpec, c corev1.Container, mountPath string) (host string, m corev1.VolumeMount) {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != mountPath {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.HostPath != nil {
				return v.HostPath.Path, vm
			}
		}
		return "", vm
	}
	return "", corev1.VolumeMount{}
}

// expandVars replaces $(VAR) with the container's env, as kubelet does.
func expandVars(s string, env map[string]string) string {
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// TestManifestsDaemonArgsAgreeWithConfig loads the DaemonSet container's
// command line, environment and ConfigMap through routeletd's own config
// loader and checks the result against the probes, ports and mounts.
func TestManifestsDaemonArgsAgreeWithConfig(t *testing.T) {
	daemonAgrees(t, loadObjects(t))
}

// daemonAgrees checks that routeletd, run as o's DaemonSet runs it,
// accepts its arguments and the ConfigMap's files, and that the mounts,
// probes and conflist template agree with that configuration, which it
// returns.
func daemonAgrees(t *testing.T, o objects) *config.Config {
	t.Helper()
	spec := o.ds.Spec.Template.Spec
	c := container(t, spec, "routeletd")
	if len(c.Command) != 1 || c.Command[0] != image.Routeletd {
		t.Errorf("routeletd command = %v, want [%s] (the image's path)", c.Command, image.Routeletd)
	}

	// The downward API fills NODE_NAME with spec.nodeName.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = "node-from-downward-api"
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		default:
			t.Errorf("env %s comes from %+v; the test knows only spec.nodeName", e.Name, e.ValueFrom)
		}
	}
	if env["NODE_NAME"] != "node-from-downward-api" {
		t.Errorf("NODE_NAME is not set from the downward API's spec.nodeName: %+v", c.Env)
	}

	known := map[string]bool{"config": true}
	for _, k := range config.KeyNames() {
		known[k] = true
	}
	for name := range pendingFlags {
		if known[name] {
			t.Errorf("flag --%s is now known to daemon/config: remove it from pendingFlags", name)
		}
	}
	var args []string
	pending := map[string]string{}
	for _, a := range c.Args {
		a = expandVars(a, env)
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("argument %q is not --name=value", a)
			continue
		}
		if _, isPending := pendingFlags[name]; isPending {
			pending[name] = val
			continue
		}
		if !known[name] {
			t.Errorf("argument %q: routeletd has no flag --%s", a, name)
		}
		args = append(args, a)
	}

	// Files: the ConfigMap's keys under its mount.
	files := map[string]string{}
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == o.cm.Name {
				for k, data := range o.cm.Data {
					files[path.Join(vm.MountPath, k)] = data
				}
			}
		}
	}
	getenv := func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
	readFile := func(p string) ([]byte, error) {
		if d, ok := files[p]; ok {
			return []byte(d), nil
		}
		return nil, &os.PathError{Op: "open", Path: p, Err: os.ErrNotExist}
	}
	cfg, err := config.Load(args, getenv, readFile, io.Discard)
	if err != nil {
		t.Fatalf("routeletd rejects the DaemonSet's configuration: %v", err)
	}
	if cfg.ConfigFile == "" {
		t.Error("the DaemonSet does not point routeletd at the ConfigMap's config file")
	}
	if cfg.Datastore != config.DatastoreKubernetes {
		t.Errorf("datastore = %q, want %q", cfg.Datastore, config.DatastoreKubernetes)
	}
	if cfg.NodeName != "node-from-downward-api" {
		t.Errorf("node name = %q, want the downward API's", cfg.NodeName)
	}

	// Mounts: the state dir and the CNI conf dir are the host's.
	if h, _ := hostPathOf(spec, c, cfg.StateDir); h != cfg.StateDir {
		t.Errorf("state dir %s is mounted from host path %q, want the same path (the plugin on the host uses it)", cfg.StateDir, h)
	}
	if d := cfg.CNIConfDir; d == "" {
		t.Error("no cni-conf-dir: nothing writes the conflist")
	} else if h, m := hostPathOf(spec, c, d); h != "/etc/cni/net.d" || m.ReadOnly {
		t.Errorf("cni-conf-dir %s is mounted from host path %q (read-only %v), want /etc/cni/net.d writable", d, h, m.ReadOnly)
	}
	for mount, wantRO := range map[string]bool{"/run/xtables.lock": false, "/lib/modules": true} {
		h, m := hostPathOf(spec, c, mount)
		if h != mount || m.ReadOnly != wantRO {
			t.Errorf("%s mounted from host path %q read-only %v, want the host's %s read-only %v", mount, h, m.ReadOnly, mount, wantRO)
		}
	}

	// Probes and port: the health listener's address, paths it serves.
	host, port, err := net.SplitHostPort(cfg.HealthAddr)
	if err != nil {
		t.Fatalf("health-addr %q: %v", cfg.HealthAddr, err)
	}
	if len(c.Ports) != 1 || strconv.Itoa(int(c.Ports[0].ContainerPort)) != port {
		t.Errorf("container ports %+v, want the health port %s", c.Ports, port)
	}
	srv := httptest.NewServer(health.Handler(health.NewStatus(time.Minute), health.NewMetrics()))
	defer srv.Close()
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe is not an HTTP GET: %+v", name, p)
			continue
		}
		g := p.HTTPGet
		// With the host network, the pod IP is the node's; the daemon
		// listens on health-addr's host only.
		if g.Host != host || g.Port.String() != port {
			t.Errorf("%s probe goes to %s:%s, want health-addr %s", name, g.Host, g.Port.String(), cfg.HealthAddr)
		}
		resp, err := http.Get(srv.URL + g.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			t.Errorf("%s probe path %s: the daemon's health handler answers %d", name, g.Path, resp.StatusCode)
		}
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe path %q, want /healthz", c.LivenessProbe.HTTPGet.Path)
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe path %q, want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}

	// The conflist template is the ConfigMap's, renders with routeletd's
	// own renderer, and agrees with the daemon's state dir and prefix.
	tmpl, ok := files[cfg.CNIConfTemplate]
	if !ok {
		t.Fatalf("cni-conf-template %q is not a ConfigMap key under its mount (%v)", cfg.CNIConfTemplate, slices.Sorted(maps.Keys(files)))
	}
	rendered, err := cniconf.Render([]byte(tmpl), cniconf.Params{MTU: 1450, StateDir: cfg.StateDir, IfacePrefix: cfg.IfacePrefix})
	if err != nil {
		t.Fatalf("routeletd refuses the ConfigMap's conflist template: %v", err)
	}
	list, err := libcni.ConfListFromBytes(rendered)
	if err != nil {
		t.Fatalf("rendered conflist: %v", err)
	}
	if len(list.Plugins) == 0 || list.Plugins[0].Network.Type != "routelet" {
		t.Fatalf("conflist template's first plugin is not routelet")
	}
	var rl struct {
		StateDir        string `json:"stateDir"`
		InterfacePrefix string `json:"interfacePrefix"`
	}
	if err := json.Unmarshal(list.Plugins[0].Bytes, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.StateDir != cfg.StateDir || rl.InterfacePrefix != cfg.IfacePrefix {
		t.Errorf("conflist stateDir %q, interfacePrefix %q; daemon state-dir %q, interface-prefix %q",
			rl.StateDir, rl.InterfacePrefix, cfg.StateDir, cfg.IfacePrefix)
	}
	for _, p := range list.Plugins {
		if !slices.Contains(image.Plugins, p.Network.Type) {
			t.Errorf("conflist plugin %q is not among the image's plugins %v", p.Network.Type, image.Plugins)
		}
	}
	return cfg
}

// TestManifestsInstallerAgrees runs install-cni.sh with the initContainer's
// own arguments, its absolute paths moved under a temp root laid out like
// the image and the node, and checks the plugins land in the host's CNI bin
// dir.
func TestManifestsInstallerAgrees(t *testing.T) {
	o := loadObjects(t)
	spec := o.ds.Spec.Template.Spec
	c := container(t, spec, "install-cni")
	cmd := slices.Concat(c.Command, c.Args)
	if len(cmd) < 2 || cmd[0] != "/bin/sh" || cmd[1] != image.Installer {
		t.Fatalf("install-cni runs %v, want /bin/sh %s", cmd, image.Installer)
	}
	root := t.TempDir()
	for _, p := range image.Plugins {
		writeFile(t, mkdirFor(t, filepath.Join(root, image.PluginDir, p)), fakePlugin(p))
	}
	var binDir string
	var args []string
	for _, a := range cmd[2:] {
		name, val, _ := strings.Cut(a, "=")
		if name == "--bin-dir" {
			binDir = val
		}
		if strings.HasPrefix(val, "/") {
			a = name + "=" + filepath.Join(root, val)
		}
		args = append(args, a)
	}
	host, m := hostPathOf(spec, c, binDir)
	if host != "/opt/cni/bin" || m.ReadOnly {
		t.Fatalf("--bin-dir %q is mounted from host path %q (read-only %v), want /opt/cni/bin writable", binDir, host, m.ReadOnly)
	}
	if err := os.MkdirAll(filepath.Join(root, binDir), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", append([]string{"install-cni.sh"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("install-cni.sh with the initContainer's arguments failed: %v\n%s", err, out)
	}
	for _, p := range image.Plugins {
		if got, err := os.ReadFile(filepath.Join(root, binDir, p)); err != nil || string(got) != fakePlugin(p) {
			t.Errorf("plugin %s not installed into the host's CNI bin dir: %v", p, err)
		}
	}
}

func mkdirFor(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
