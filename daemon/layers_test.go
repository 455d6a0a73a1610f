//go:build !vmtest

package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// modulePath is routelet's module path.
const modulePath = "github.com/routelet/routelet/"

// foundation are the packages under daemon/ that sit below the loop: the
// configuration, the datastores, the default periods and the daemon's
// internal helpers (a name ending in "/" covers what is under it).
// Everything else under daemon/ is the loop or hangs off it (the agent
// and its managers, overlaymgr, allowmgr, inspect, statusapi, health,
// netwatch, nodeid, workloads, cleanup, diagnose, the command itself):
// a package added under daemon/ is on that side until it is listed here.
var foundation = []string{
	"daemon/config",
	"daemon/datastore", "daemon/datastore/",
	"daemon/periods",
	"daemon/internal/",
}

// isFoundation reports whether p (module-relative) is a foundation package.
func isFoundation(p string) bool {
	return slices.ContainsFunc(foundation, func(f string) bool {
		if strings.HasSuffix(f, "/") {
			return strings.HasPrefix(p, f)
		}
		return p == f
	})
}

// allowlistPkg reports whether p is one of the allowlist's packages: the
// ipsets, the firewall chains that match on them, the object tying them.
func allowlistPkg(p string) bool {
	for _, dir := range []string{"pkg/ipset", "pkg/firewall", "pkg/allowlist"} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

// layerRule says why package p may not depend on d (both modulePath-relative),
// or "" when it may. The rules, lowest layer first:
//
//   - pkg/... and internal/... depend on nothing under daemon/;
//   - pkg/defaults depends on no routelet package, and the allowlist's
//     packages (pkg/ipset, pkg/firewall, pkg/allowlist) on no pkg/ package
//     but each other and pkg/defaults (the firewall chains match on the
//     overlay's and podnet's names; they do not import them);
//   - a foundation package depends on no package under daemon/ but the
//     foundation (config and the datastores import no manager), and
//     daemon/datastore/... not on daemon/config (routeletd maps its
//     configuration to each datastore's options).
func layerRule(p, d string) string {
	under := func(s, dir string) bool { return s == dir || strings.HasPrefix(s, dir+"/") }
	switch {
	case (under(p, "pkg") || under(p, "internal")) && under(d, "daemon"):
		return "pkg/ and internal/ do not depend on daemon/"
	case p == "pkg/defaults":
		return "pkg/defaults depends on no routelet package"
	case allowlistPkg(p) && under(d, "pkg") && !allowlistPkg(d) && d != "pkg/defaults":
		return "the allowlist's packages depend on no other pkg/ package but pkg/defaults"
	case isFoundation(p) && under(d, "daemon") && !isFoundation(d):
		return p + " is below the loop: it depends on no daemon/ package outside the foundation list"
	case under(p, "daemon/datastore") && d == "daemon/config":
		return "the datastores take options, not routeletd's configuration"
	}
	return ""
}

// TestLayers: no routelet package depends (directly or through others)
// on a package of a layer above it; see layerRule. Test files are not
// looked at: a test may use anything.
func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", modulePath+"...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct{ imports, deps []string }
	pkgs := map[string]pkg{}
	own := func(list string) []string {
		var r []string
		for _, s := range strings.Fields(list) {
			if rel, ok := strings.CutPrefix(s, modulePath); ok {
				r = append(r, rel)
			}
		}
		return r
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		pkgs[strings.TrimPrefix(f[0], modulePath)] = pkg{imports: own(f[1]), deps: own(f[2])}
	}
	for _, must := range []string{"daemon/config", "daemon/datastore/etcd", "pkg/firewall", "pkg/defaults", "daemon/periods", "daemon/agent"} {
		if _, ok := pkgs[must]; !ok {
			t.Errorf("go list does not list %s", must)
		}
	}
	for p, pk := range pkgs {
		for _, d := range pk.deps {
			why := layerRule(p, d)
			if why == "" {
				continue
			}
			// Name the direct import that brings d in.
			via := ""
			for _, i := range pk.imports {
				if i != d && slices.Contains(pkgs[i].deps, d) {
					via = " (through " + i + ")"
					break
				}
			}
			t.Errorf("%s depends on %s%s: %s", p, d, via, why)
		}
	}
}

// TestLayerRule: the rules of TestLayers on the imports they were written
// against.
func TestLayerRule(t *testing.T) {
	for _, c := range []struct {
		p, d string
		ok   bool
	}{
		{"pkg/routes", "internal/nlutil", true},
		{"internal/cluster", "daemon/config", false},
		{"pkg/overlay", "daemon/agent", false},
		{"pkg/firewall", "pkg/ipset", true},
		{"pkg/firewall", "pkg/defaults", true},
		{"pkg/firewall", "pkg/overlay", false},
		{"pkg/firewall", "pkg/podnet", false},
		{"pkg/allowlist", "pkg/firewall", true},
		{"pkg/ipset/ipsettest", "pkg/overlay", false},
		{"pkg/firewall/firewalltest", "pkg/ipset", true},
		{"pkg/firewall/firewalltest", "pkg/overlay", false},
		{"pkg/defaults", "internal/nlutil", false},
		{"daemon/config", "daemon/periods", true},
		{"daemon/config", "pkg/overlay", true},
		{"daemon/config", "daemon/agent", false},
		{"daemon/config", "daemon/allowmgr", false},
		{"daemon/config", "daemon/overlaymgr", false},
		{"daemon/config", "daemon/agent/somemanager", false},
		{"daemon/config", "daemon/newmanager", false},
		{"daemon/datastore/etcd", "daemon/datastore", true},
		{"daemon/datastore/file", "daemon/internal/dirwatch", true},
		{"daemon/datastore/etcd", "daemon/config", false},
		{"daemon/datastore/kubernetes", "daemon/health", false},
		{"daemon/agent", "daemon/config", true},
		{"daemon/nodeid", "daemon/config", true},
		{"daemon", "daemon/agent", true},
	} {
		if got := layerRule(c.p, c.d) == ""; got != c.ok {
			t.Errorf("%s → %s allowed %v, want %v", c.p, c.d, got, c.ok)
		}
	}
}
