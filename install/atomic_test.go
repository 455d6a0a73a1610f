package install

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// noTempFiles fails t when dir holds one of the installer's temp files.
func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temp file left in %s: %s", dir, e.Name())
		}
	}
}

// TestInstallReplacesRunningBinary installs a plugin over a binary that is
// being executed: writing into that file fails with ETXTBSY, the installer
// succeeds, the running process keeps its old file and the new plugin is in
// place.
func TestInstallReplacesRunningBinary(t *testing.T) {
	binDir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary: ", err)
	}
	old, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	installed := filepath.Join(binDir, "routelet")
	if err := os.WriteFile(installed, old, 0o755); err != nil {
		t.Fatal(err)
	}
	running := exec.Command(installed, "300")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = running.Process.Kill()
		_ = running.Wait()
	})
	// A copy in place (what cp onto the target does) is refused while the
	// binary runs; wait until the exec has happened.
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := os.OpenFile(installed, os.O_WRONLY, 0)
		if errors.Is(err, syscall.ETXTBSY) {
			break
		}
		if err == nil {
			f.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("opening the running binary for writing: %v, want ETXTBSY", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	src := filepath.Join(t.TempDir(), "routelet")
	writeFile(t, src, fakePlugin("new"))
	out, err := runInstaller(t, "--bin-dir", binDir, "--plugin", src, "--no-conflist")
	if err != nil {
		t.Fatalf("install over a running binary failed: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(installed); string(got) != fakePlugin("new") {
		t.Errorf("installed plugin is not the new one (%d bytes)", len(got))
	}
	if running.ProcessState != nil {
		t.Errorf("running binary exited: %v", running.ProcessState)
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(running.Process.Pid) + "/exe")
	if err != nil || !strings.HasSuffix(exe, " (deleted)") {
		t.Errorf("running process's executable = %q, %v; want the replaced (deleted) old file", exe, err)
	}
	noTempFiles(t, binDir)
}

// TestInstallRefusesMissingDir: a missing bin or conf dir is an error
// naming it (nothing created), unless --mkdir.
func TestInstallRefusesMissingDir(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "routelet")
	writeFile(t, src, fakePlugin("v1"))
	conflist := filepath.Join(base, "10-routelet.conflist")
	writeFile(t, conflist, `{"name":"k8s-pod-network"}`)
	binDir := filepath.Join(base, "missing", "bin")
	confDir := filepath.Join(base, "conf")
	if err := os.Mkdir(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--bin-dir", binDir, "--conf-dir", confDir, "--plugin", src, "--conflist", conflist}
	out, err := runInstaller(t, args...)
	if err == nil {
		t.Fatalf("install into a missing dir succeeded:\n%s", out)
	}
	if want := `CNI bin dir "` + binDir + `" does not exist`; !strings.Contains(out, want) {
		t.Errorf("output %q does not say %q", out, want)
	}
	if _, err := os.Stat(binDir); !os.IsNotExist(err) {
		t.Errorf("missing bin dir was created: %v", err)
	}
	if entries, _ := os.ReadDir(confDir); len(entries) != 0 {
		t.Errorf("conf dir touched although the bin dir was missing: %v", entries)
	}
	// A missing conf dir is named too.
	out, err = runInstaller(t, "--bin-dir", confDir, "--conf-dir", filepath.Join(base, "nope"), "--plugin", src, "--conflist", conflist)
	if err == nil || !strings.Contains(out, `CNI conf dir "`+filepath.Join(base, "nope")+`" does not exist`) {
		t.Errorf("missing conf dir: err %v, output %q", err, out)
	}
	if out, err := runInstaller(t, append(args, "--mkdir")...); err != nil {
		t.Fatalf("install with --mkdir failed: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(binDir, "routelet")); string(got) != fakePlugin("v1") {
		t.Errorf("plugin not installed with --mkdir")
	}
}

// TestInstallRefusesNonPlugin: a binary that does not answer
// CNI_COMMAND=VERSION (truncated, wrong file) never replaces the installed
// one.
func TestInstallRefusesNonPlugin(t *testing.T) {
	binDir := t.TempDir()
	installed := filepath.Join(binDir, "routelet")
	writeFile(t, installed, fakePlugin("old"))
	for name, body := range map[string]string{
		"fails":         "#!/bin/sh\nexit 3\n",
		"wrong output":  "#!/bin/sh\necho hello\n",
		"not a program": "\x7fELF\x02\x01\x01\x00truncated",
	} {
		src := filepath.Join(t.TempDir(), "routelet")
		writeFile(t, src, body)
		out, err := runInstaller(t, "--bin-dir", binDir, "--plugin", src, "--no-conflist")
		if err == nil {
			t.Errorf("%s: install succeeded:\n%s", name, out)
		}
		if !strings.Contains(out, src) || !strings.Contains(out, "left as it was") {
			t.Errorf("%s: output %q does not name the plugin and say the old one was kept", name, out)
		}
		if got, _ := os.ReadFile(installed); string(got) != fakePlugin("old") {
			t.Errorf("%s: installed plugin changed", name)
		}
		noTempFiles(t, binDir)
	}
}

// afterInstall splits the output of an installScript run into the
// installer's output, its exit code and the target dir's listing and
// routelet's content printed after it.
func afterInstall(t *testing.T, out string) (installer, exit, listing, content string) {
	t.Helper()
	parts := strings.SplitN(out, "::", 4)
	if len(parts) != 4 {
		t.Fatalf("unexpected script output:\n%s", out)
	}
	return parts[0], strings.TrimSpace(parts[1]), parts[2], parts[3]
}

// installScript mounts a tmpfs of the given options at $D, puts the old
// plugin there, runs $PRE, installs $SRC and prints the result.
const installScript = `set -e
mount -t tmpfs -o size=$SIZE tmpfs "$D"
cp "$OLD" "$D/routelet"
$PRE
set +e
sh ./install-cni.sh --bin-dir "$D" --plugin "$SRC" --no-conflist
echo "::$?"
echo "::$(ls -A "$D")"
printf '::'
cat "$D/routelet"
`

// bigPlugin is fakePlugin with a large comment before the line answering
// VERSION, so a partly written copy neither matches nor answers.
func bigPlugin(marker string) string {
	return "#!/bin/sh\n# " + marker + " " + strings.Repeat("x", 4<<20) + "\n" +
		`[ "$CNI_COMMAND" = VERSION ] && echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}'` + "\n"
}

// TestInstallConcurrentRunsSeeWholePlugin installs two versions of a plugin
// over each other while another goroutine keeps reading and running the
// installed file, as a runtime's ADD would: every read is one whole
// version and every run answers VERSION.
func TestInstallConcurrentRunsSeeWholePlugin(t *testing.T) {
	binDir, srcDir := t.TempDir(), t.TempDir()
	versions := map[string]string{}
	for _, v := range []string{"v1", "v2"} {
		versions[v] = bigPlugin(v)
		if err := os.MkdirAll(filepath.Join(srcDir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(srcDir, v, "routelet"), versions[v])
	}
	install := func(v string) {
		t.Helper()
		if out, err := runInstaller(t, "--bin-dir", binDir, "--plugin", filepath.Join(srcDir, v, "routelet"), "--no-conflist"); err != nil {
			t.Fatalf("install %s: %v\n%s", v, err, out)
		}
	}
	install("v1")
	installed := filepath.Join(binDir, "routelet")

	stop := make(chan struct{})
	done := make(chan []string)
	go func() {
		var bad []string
		for runs := 0; ; runs++ {
			select {
			case <-stop:
				done <- bad
				return
			default:
			}
			if data, err := os.ReadFile(installed); err != nil {
				bad = append(bad, "read: "+err.Error())
			} else if string(data) != versions["v1"] && string(data) != versions["v2"] {
				bad = append(bad, "read "+strconv.Itoa(len(data))+" bytes that are neither version")
			}
			cmd := exec.Command(installed)
			cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
			if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "supportedVersions") {
				bad = append(bad, "run: "+strings.TrimSpace(string(out))+" "+errString(err))
			}
		}
	}()
	for i := 0; i < 10; i++ {
		install([]string{"v2", "v1"}[i%2])
	}
	close(stop)
	if bad := <-done; len(bad) > 0 {
		t.Errorf("%d reads or runs of the plugin saw a partial file, e.g.: %v", len(bad), bad[:min(len(bad), 3)])
	}
	noTempFiles(t, binDir)
}

// errString is err's message, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
