package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runInstaller runs install-cni.sh with args and returns its combined output.
func runInstaller(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"install-cni.sh"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// fakePlugin returns a shell script that answers CNI_COMMAND=VERSION like a
// CNI plugin and carries marker, to tell versions apart.
func fakePlugin(marker string) string {
	return "#!/bin/sh\n# " + marker + "\n" +
		`[ "$CNI_COMMAND" = VERSION ] && echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}'` + "\n"
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInstallPlacesBinaryAndConflist(t *testing.T) {
	src := t.TempDir()
	binDir := filepath.Join(t.TempDir(), "opt", "cni", "bin")
	confDir := filepath.Join(t.TempDir(), "etc", "cni", "net.d")
	plugin := filepath.Join(src, "routelet")
	conflist := filepath.Join(src, "10-routelet.conflist")
	writeFile(t, plugin, fakePlugin("v1"))
	writeFile(t, conflist, `{"name":"k8s-pod-network"}`)

	args := []string{"--bin-dir", binDir, "--conf-dir", confDir, "--plugin", plugin, "--conflist", conflist, "--mkdir"}
	if out, err := runInstaller(t, args...); err != nil {
		t.Fatalf("install failed: %v\n%s", err, out)
	}
	st, err := os.Stat(filepath.Join(binDir, "routelet"))
	if err != nil {
		t.Fatalf("plugin not installed: %v", err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("plugin mode = %v, want 0755", st.Mode().Perm())
	}
	got, err := os.ReadFile(filepath.Join(confDir, "10-routelet.conflist"))
	if err != nil || string(got) != `{"name":"k8s-pod-network"}` {
		t.Fatalf("conflist = %q, %v", got, err)
	}

	// An operator's edited conflist is kept unless --force; the binary is
	// always refreshed.
	writeFile(t, filepath.Join(confDir, "10-routelet.conflist"), `{"name":"edited"}`)
	writeFile(t, plugin, fakePlugin("v2"))
	out, err := runInstaller(t, args...)
	if err != nil {
		t.Fatalf("second install failed: %v\n%s", err, out)
	}
	if !strings.Contains(out, "kept existing") {
		t.Errorf("output does not say the edited conflist was kept: %s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(confDir, "10-routelet.conflist")); string(got) != `{"name":"edited"}` {
		t.Errorf("edited conflist overwritten without --force: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(binDir, "routelet")); !strings.Contains(string(got), "v2") {
		t.Errorf("plugin not refreshed: %q", got)
	}
	if out, err := runInstaller(t, append(args, "--force")...); err != nil {
		t.Fatalf("forced install failed: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(confDir, "10-routelet.conflist")); string(got) != `{"name":"k8s-pod-network"}` {
		t.Errorf("--force did not replace the conflist: %q", got)
	}
	// No temp files left behind in either directory.
	for _, d := range []string{binDir, confDir} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("temp file left in %s: %s", d, e.Name())
			}
		}
	}
}

func TestInstallRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, `unknown argument "--bogus"`},
		{[]string{"--plugin", filepath.Join(dir, "missing")}, "missing\" not found"},
	}
	for _, c := range cases {
		out, err := runInstaller(t, append(c.args, "--bin-dir", dir, "--conf-dir", dir)...)
		if err == nil {
			t.Errorf("%v: succeeded, want failure", c.args)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%v: output %q does not contain %q", c.args, out, c.want)
		}
	}
}
